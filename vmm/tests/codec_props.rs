//! Property tests of the encoders and decoders for outside bytes:
//! encode then decode gives back every field, for every snapshot section
//! (meta with the serial registers, memory, serial output, and per vCPU
//! cpuid, regs, sregs, xcrs, msrs, events, mp_state, debugregs, xstate,
//! lapic; the irqchip and PIT) and
//! for the guest's report record. 256 cases each (proptest's default,
//! stated explicitly). The fuzz targets (`fuzz/`) cover the other direction:
//! arbitrary bytes never panic a decoder.

use guest::protocol::{
    fixed_str, ComponentReport, FaultRecord, Report, ResultRecord, SkipRecord, MAX_RESULTS,
    MAX_SKIPPED, NAME_LEN, REASON_LEN, REPORT_COMPONENTS,
};
use kvm_bindings::{
    kvm_clock_data, kvm_cpuid_entry2, kvm_debugregs, kvm_irqchip, kvm_lapic_state, kvm_pit_state2,
    kvm_regs, kvm_sregs, kvm_vcpu_events,
};
use proptest::collection::vec;
use proptest::prelude::*;
use vmm::internal::vstate::xfd::XfdMsrs;
use vmm::snapshot::format::Container;
use vmm::snapshot::sparse::{SparseMemory, PAGE_SIZE};
use vmm::snapshot::state::{IrqchipState, Meta, SerialRegs, Snapshot, VcpuState};
use xstate::{CpuidEntry, Hex32, XsaveBuf};
use zerocopy::{FromBytes, IntoBytes};

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(256)
}

/// A KVM UAPI structure with arbitrary bytes, padding included: the
/// sections store the kernel's layout verbatim, so every bit must survive.
fn pod<T: FromBytes + std::fmt::Debug>() -> impl Strategy<Value = T> {
    vec(any::<u8>(), std::mem::size_of::<T>())
        .prop_map(|b| T::read_from_bytes(&b).expect("exact size"))
}

fn cpuid_entry() -> impl Strategy<Value = kvm_cpuid_entry2> {
    (any::<[u32; 7]>()).prop_map(|w| kvm_cpuid_entry2 {
        function: w[0],
        index: w[1],
        flags: w[2],
        eax: w[3],
        ebx: w[4],
        ecx: w[5],
        edx: w[6],
        // Not stored: KVM ignores it and the decoder zeroes it.
        padding: [0; 3],
    })
}

/// An XSAVE image as the snapshot stores it: 576 bytes or more, any content
/// (the section decoder checks only the length; compatibility is checked
/// at restore).
fn xstate_image() -> impl Strategy<Value = Vec<u8>> {
    (0usize..40).prop_flat_map(|extra| vec(any::<u8>(), 576 + 64 * extra))
}

fn vcpu(id: u32) -> impl Strategy<Value = VcpuState> {
    (
        vec(cpuid_entry(), 0..8),
        pod::<kvm_regs>(),
        pod::<kvm_sregs>(),
        vec(any::<(u32, u64)>(), 0..4),
        vec(any::<(u32, u64)>(), 0..16),
        proptest::option::of(pod::<kvm_vcpu_events>()),
        proptest::option::of(any::<u32>()),
        proptest::option::of(pod::<kvm_debugregs>()),
        xstate_image(),
        proptest::option::of(any::<(u64, u64)>()),
        proptest::option::of(pod::<kvm_lapic_state>()),
    )
        .prop_map(
            move |(cpuid, regs, sregs, xcrs, msrs, events, mp_state, debugregs, x, xfd, lapic)| {
                VcpuState {
                    id,
                    cpuid,
                    regs,
                    sregs,
                    xcrs,
                    msrs,
                    events,
                    mp_state,
                    debugregs,
                    xfd: xfd.map(|(xfd, xfd_err)| XfdMsrs { xfd, xfd_err }),
                    xstate: XsaveBuf::from_bytes(&x).expect(">= 576 bytes"),
                    lapic,
                }
            },
        )
}

fn serial_regs() -> impl Strategy<Value = SerialRegs> {
    (any::<[u8; 9]>(), vec(any::<u8>(), 0..64)).prop_map(|(r, in_buffer)| SerialRegs {
        baud_divisor_low: r[0],
        baud_divisor_high: r[1],
        interrupt_enable: r[2],
        interrupt_identification: r[3],
        line_control: r[4],
        line_status: r[5],
        modem_control: r[6],
        modem_status: r[7],
        scratch: r[8],
        in_buffer,
    })
}

fn cpuid_entries() -> impl Strategy<Value = Vec<CpuidEntry>> {
    vec(
        (0u32..64, any::<[u32; 4]>()).prop_map(|(subleaf, r)| CpuidEntry {
            subleaf,
            eax: Hex32(r[0]),
            ebx: Hex32(r[1]),
            ecx: Hex32(r[2]),
            edx: Hex32(r[3]),
        }),
        0..20,
    )
}

fn meta(mem_mib: u64) -> impl Strategy<Value = Meta> {
    (
        (".*", any::<u64>(), ".*", ".*", any::<u64>(), ".*", ".*"),
        (
            any::<u64>(),
            any::<u64>(),
            cpuid_entries(),
            any::<u64>(),
            any::<u32>(),
        ),
        (
            ".*",
            serial_regs(),
            any::<u64>(),
            -1e12f64..1e12,
            vec(any::<u32>(), 0..8),
        ),
    )
        .prop_map(move |(a, b, c)| Meta {
            vmm_version: a.0,
            created_unix_s: a.1,
            trigger: a.2,
            mem_mib,
            cmdline: a.3,
            policy_xcr0: a.4,
            init_xstate: a.5,
            xstate_sync: a.6,
            kvm_xcr0: b.0,
            kvm_xss: b.1,
            kvm_leaf_0xd: b.2,
            xsave2_size: b.3,
            tsc_khz: b.4,
            irqchip: c.0,
            serial: c.1,
            exits: c.2,
            guest_ran_ms: c.3,
            msrs_unreadable: c.4,
            vcpus: 1,
            memory_write: String::new(),
            platform: "minimal".into(),
        })
}

/// Guest RAM of `pages` pages, most of them zero, the others with a few
/// bytes set (a non-zero page may have its only set byte anywhere).
fn ram() -> impl Strategy<Value = Vec<u8>> {
    (1usize..48).prop_flat_map(|pages| {
        vec((0..pages * PAGE_SIZE, 1u8..=255), 0..24).prop_map(move |writes| {
            let mut ram = vec![0u8; pages * PAGE_SIZE];
            for (at, v) in writes {
                ram[at] = v;
            }
            ram
        })
    })
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (1usize..=3).prop_flat_map(|n| {
        (
            meta(1),
            vec(any::<u8>(), 0..256),
            (0..n as u32).map(vcpu).collect::<Vec<_>>(),
            ram(),
            proptest::option::of((
                pod::<kvm_irqchip>(),
                pod::<kvm_irqchip>(),
                pod::<kvm_irqchip>(),
                proptest::option::of(pod::<kvm_pit_state2>()),
                proptest::option::of(pod::<kvm_clock_data>()),
            )),
        )
            .prop_map(move |(mut meta, serial_output, vcpus, ram, chips)| {
                meta.vcpus = n as u32;
                // RAM of meta.mem_mib = 1 MiB: the generated pages at its start.
                let mut memory = SparseMemory::encode(&ram);
                memory.size = 1 << 20;
                Snapshot {
                    meta,
                    memory,
                    serial_output,
                    vcpus,
                    irqchip: chips.map(|(pic_master, pic_slave, ioapic, pit, clock)| {
                        IrqchipState {
                            pic_master,
                            pic_slave,
                            ioapic,
                            pit,
                            clock,
                        }
                    }),
                }
            })
    })
}

fn assert_vcpu_eq(a: &VcpuState, b: &VcpuState) {
    assert_eq!(a.id, b.id);
    assert_eq!(a.cpuid, b.cpuid, "vcpu{}.cpuid", a.id);
    assert_eq!(a.regs, b.regs, "vcpu{}.regs", a.id);
    assert_eq!(a.sregs, b.sregs, "vcpu{}.sregs", a.id);
    assert_eq!(a.xcrs, b.xcrs, "vcpu{}.xcrs", a.id);
    assert_eq!(a.msrs, b.msrs, "vcpu{}.msrs", a.id);
    assert_eq!(a.events, b.events, "vcpu{}.events", a.id);
    assert_eq!(a.mp_state, b.mp_state, "vcpu{}.mp_state", a.id);
    assert_eq!(a.debugregs, b.debugregs, "vcpu{}.debugregs", a.id);
    assert_eq!(
        a.xstate.as_bytes(),
        b.xstate.as_bytes(),
        "vcpu{}.xstate",
        a.id
    );
    assert_eq!(a.lapic, b.lapic, "vcpu{}.lapic", a.id);
}

proptest! {
    #![proptest_config(config())]

    /// Every section through the container and the file bytes: decode(encode(s)) == s.
    #[test]
    fn snapshot_sections_round_trip(s in snapshot()) {
        let bytes = s.to_bytes();
        let back = Snapshot::from_bytes(&bytes).expect("an encoded snapshot decodes");
        prop_assert_eq!(&back.meta, &s.meta);
        prop_assert_eq!(&back.meta.serial, &s.meta.serial);
        prop_assert_eq!(&back.memory, &s.memory);
        prop_assert_eq!(&back.serial_output, &s.serial_output);
        prop_assert_eq!(back.vcpus.len(), s.vcpus.len());
        for (a, b) in back.vcpus.iter().zip(&s.vcpus) {
            assert_vcpu_eq(a, b);
        }
        let chips = |s: &Snapshot| s.irqchip.as_ref().map(|i| {
            (
                [&i.pic_master, &i.pic_slave, &i.ioapic].map(|c| c.as_bytes().to_vec()),
                i.pit,
                i.clock.map(|c| c.as_bytes().to_vec()),
            )
        });
        prop_assert_eq!(chips(&back), chips(&s));
        // And the container itself: parse(to_bytes(c)) == c.
        let c = s.to_container();
        prop_assert_eq!(Container::parse(&c.to_bytes()), Ok(c));
    }

    /// The meta section alone (JSON), serial registers included.
    #[test]
    fn meta_round_trip(m in meta(64)) {
        let json = serde_json::to_vec_pretty(&m).expect("serialise");
        let back: Meta = serde_json::from_slice(&json).expect("parse back");
        prop_assert_eq!(&back.serial, &m.serial);
        prop_assert_eq!(back, m);
    }

    /// Sparse memory: decode(encode(ram)) == ram, and the encoding is canonical.
    #[test]
    fn sparse_memory_round_trip(ram in ram(), block_pages in 1usize..8) {
        let m = SparseMemory::encode(&ram);
        let bytes = m.to_bytes();
        let back = SparseMemory::from_bytes(&bytes).expect("decodes");
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.to_bytes(), bytes);
        let nonzero = ram.chunks(PAGE_SIZE).filter(|p| p.iter().any(|&b| b != 0)).count();
        prop_assert_eq!(back.stored_pages(), nonzero as u64);
        let mut out = vec![0u8; back.size as usize];
        back.apply(|addr, data| {
            out[addr as usize..addr as usize + data.len()].copy_from_slice(data);
            Ok::<(), ()>(())
        }).expect("infallible");
        prop_assert_eq!(out, ram.clone());
        // Appending block by block encodes the same.
        let mut parts = SparseMemory::empty();
        for block in ram.chunks(block_pages * PAGE_SIZE) {
            parts.append(block);
        }
        prop_assert_eq!(parts, m);
    }

    /// The guest's report record: decode(encode(r)) == r, field by field.
    #[test]
    fn report_round_trip(r in report()) {
        let back = Report::from_bytes(r.as_bytes()).expect("a built report decodes");
        prop_assert_eq!(back.as_bytes(), r.as_bytes());
        macro_rules! same {
            ($($f:ident),*) => { $( prop_assert_eq!(back.$f, r.$f, "{}", stringify!($f)); )* };
        }
        same!(
            magic, version, size, cpuid1_ecx, cpuid1_edx, cpuid7_ebx, cpuid7_ecx, cpuid7_edx,
            cpuid7_1_eax, cpuid_xcr0_supported, cpuid_xss_supported, cpuid_size_enabled,
            cpuid_size_max, cpuid_xsave_features, cpuid_size_compacted, components, xcr0,
            xinuse, xcr0_hardware, computed_standard_size, computed_compacted_size, tsc_khz,
            fault, result_count, skipped_count, result_aux, switch_strategy, switch_cycles,
            switch_calibration_cycles
        );
        prop_assert_eq!(back.results(), r.results());
        prop_assert_eq!(back.skipped(), r.skipped());
        prop_assert_eq!(format!("{back:?}"), format!("{r:?}"));
    }
}

fn name() -> impl Strategy<Value = [u8; NAME_LEN]> {
    "[a-z0-9-]{0,32}".prop_map(|s| fixed_str(&s))
}

fn result_record() -> impl Strategy<Value = (ResultRecord, u64)> {
    (
        name(),
        name(),
        any::<[u64; 3]>(),
        0u32..3,
        0u32..2,
        -1e3f64..1e3,
        any::<u64>(),
    )
        .prop_map(|(name, variant, n, unit, check, residual, aux)| {
            (
                ResultRecord {
                    name,
                    variant,
                    size: n[0],
                    work: n[1],
                    cycles: n[2],
                    unit,
                    check,
                    residual,
                },
                aux,
            )
        })
}

fn skip_record() -> impl Strategy<Value = SkipRecord> {
    (name(), name(), "[ -~]{0,64}").prop_map(|(name, variant, reason)| SkipRecord {
        name,
        variant,
        reason: fixed_str::<REASON_LEN>(&reason),
    })
}

fn report() -> impl Strategy<Value = Report> {
    (
        any::<[u32; 10]>(),
        any::<[u64; 6]>(),
        vec(any::<[u32; 4]>(), REPORT_COMPONENTS),
        (any::<[u32; 3]>(), any::<[u64; 3]>()),
        vec(result_record(), 0..=MAX_RESULTS),
        vec(skip_record(), 0..=MAX_SKIPPED),
        (name(), any::<[u64; 4]>(), any::<u64>()),
    )
        .prop_map(
            |(w, q, comps, (fw, fq), results, skipped, (strategy, cycles, cal))| {
                let mut r = Report::new();
                r.cpuid1_ecx = w[0];
                r.cpuid1_edx = w[1];
                r.cpuid7_ebx = w[2];
                r.cpuid7_ecx = w[3];
                r.cpuid7_edx = w[4];
                r.cpuid7_1_eax = w[5];
                r.cpuid_size_enabled = w[6];
                r.cpuid_size_max = w[7];
                r.cpuid_xsave_features = w[8];
                r.cpuid_size_compacted = w[9];
                r.cpuid_xcr0_supported = q[0];
                r.cpuid_xss_supported = q[1];
                r.xcr0 = q[2];
                r.xinuse = q[3];
                r.xcr0_hardware = q[4];
                r.tsc_khz = q[5];
                r.computed_standard_size = w[6] ^ w[9];
                r.computed_compacted_size = w[7] ^ w[8];
                for (c, v) in r.components.iter_mut().zip(comps) {
                    *c = ComponentReport {
                        size: v[0],
                        offset: v[1],
                        flags: v[2],
                        compacted_offset: v[3],
                    };
                }
                r.fault = FaultRecord {
                    valid: fw[0] & 1,
                    vector: fw[1],
                    error_code: fq[0],
                    rip: fq[1],
                    cr2: fq[2],
                    cpl: fw[2] & 3,
                    _pad: 0,
                };
                for (rec, aux) in results {
                    assert!(r.push_result_aux(rec, aux));
                }
                for s in skipped {
                    assert!(r.push_skipped(s));
                }
                r.switch_strategy = strategy;
                r.switch_cycles = cycles;
                r.switch_calibration_cycles = cal;
                r
            },
        )
}
