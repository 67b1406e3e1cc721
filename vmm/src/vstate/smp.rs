//! More than one vCPU: how many a run may have, the in-kernel irqchip the
//! application processors (APs) need, and how they are started.
//!
//! # How APs start
//!
//! The standard way, as QEMU, Firecracker and Cloud Hypervisor do it: the
//! VM gets in-kernel LAPICs (an [`Irqchip`], before any vCPU, so every
//! vCPU gets one), the APs sit in wait-for-SIPI, and the guest's bootstrap
//! processor (vCPU 0) sends INIT-SIPI-SIPI through its LAPIC.
//! KVM then starts each AP in real mode at the SIPI vector's page, where
//! the guest's trampoline takes it to long mode. The VMM only runs every AP
//! thread's `KVM_RUN`, which blocks in KVM until the SIPI arrives.
//!
//! Whether a KVM can do this is probed, not assumed: a new AP must report
//! `KVM_MP_STATE_UNINITIALIZED` (waiting for INIT/SIPI). On `kvm_pvm` (the
//! development host) it does, and INIT-SIPI-SIPI followed by the real-mode
//! trampoline works: that is [`ApStart::InitSipi`]. A KVM whose APs come up
//! runnable is asked once with `KVM_SET_MP_STATE` to hold them; one that
//! still refuses is an error naming it (a direct 64-bit start of the APs
//! from the VMM is not built: no KVM this project runs on needs it).
//!
//! # Which irqchip: split, as Cloud Hypervisor
//!
//! The guest needs LAPICs only (INIT-SIPI-SIPI, IPIs); it never touches a
//! PIC or the IOAPIC. A full in-kernel irqchip (`KVM_CREATE_IRQCHIP`) adds
//! both 8259 PICs and the IOAPIC, whose port and MMIO devices KVM puts on
//! its I/O buses, each registration an SRCU update. Traced on the
//! development host (`strace -f -T`, `perf record -e sched:sched_switch
//! -g`), the next update after them, registering the RAM slot
//! (`kvm_swap_active_memslots`), then waits a normal grace period, 5-10
//! ms, wherever it is put (registered before the irqchip, the wait moved
//! to closing the VM). A split irqchip (`KVM_CAP_SPLIT_IRQCHIP`, the LAPICs
//! in KVM, the rest left to user space, which here has none to offer)
//! registers no such device: the RAM slot took 0.1-0.3 ms after it against
//! 5-7 ms after `KVM_CREATE_IRQCHIP` (a C probe of the three ways, three
//! rounds). So a new VM of several vCPUs gets a split irqchip where KVM
//! has the capability and the full one where it does not; a restore
//! rebuilds what the snapshot's VM had (snapshots of earlier versions
//! carry the PICs' and IOAPIC's state: [`Irqchip::Full`]). The MP table
//! describes an IOAPIC only when there is one.
//!
//! # What a second vCPU costs
//!
//! `vmm run --workload none --no-native --vcpus 2` on the development host
//! (Zen 3 under kvm_pvm, 15 runs each, medians): 5.1 ms from spawn to exit
//! with the split irqchip, setup 1.6 ms, against 4.5 ms and the same setup
//! with one vCPU; it was 12.3 ms, setup 7.5 ms, with the full irqchip. The
//! rest is the AP's bring-up in the guest. The guest sends INIT-SIPI-SIPI
//! back to back (KVM needs none of the MP specification's delays), the
//! APs' threads are spawned before the BSP's (see `supervise_all_with`),
//! and a quiet guest prints no per-CPU serial lines (each byte an exit).
//! `--json` shows each vCPU's [`VcpuPhases`].
//!
//! # One vCPU: a LAPIC for the embedded guest, no irqchip for the rest
//!
//! Without an irqchip a HLT leaves `KVM_RUN` (`KVM_EXIT_HLT`) and the run
//! ends at once, naming it: the answer a kernel of the caller's that halts
//! to stop wants. With an in-kernel LAPIC, KVM keeps a halted vCPU until an
//! interrupt comes, and such a kernel would run into `--timeout` instead.
//!
//! A kernel that carries vmm's ELF note (the embedded guest) ends every run
//! with the protocol's port write, never by halting (docs/protocol.md), so
//! its one vCPU gets a LAPIC (the split irqchip where KVM has it), as
//! Firecracker and Cloud Hypervisor give every vCPU. Why it matters: KVM
//! counts the vCPUs without a LAPIC in a static key and patches its own
//! code, with a cross-CPU call, whenever that count leaves or reaches 0: at
//! the vCPU's creation and again as the VM is destroyed, about 0.15 ms
//! each under the development host's nested KVM. A LAPIC's key is also
//! patched at the first vCPU's creation, but KVM lets it go only a second
//! after the last VM that used it, so runs in a row patch nothing and a
//! single run nothing at its end. `vmm run --workload none` got 0.25 ms
//! faster, a tenth of the run (docs/measurements.md).

use kvm_bindings::{
    kvm_cpuid_entry2, kvm_enable_cap, kvm_mp_state, KVM_CAP_SPLIT_IRQCHIP,
    KVM_MP_STATE_UNINITIALIZED,
};
use kvm_ioctls::{Cap, Kvm, VcpuFd, VmFd};
use serde::Serialize;

use crate::cpuid::GuestCpuid;
pub use crate::error::VcpuCountError;
use crate::error::{Error, Result};

/// The most vCPUs the embedded guest kernel brings up (its per-CPU stacks,
/// TSSes and report slots are static).
pub const GUEST_MAX_CPUS: u32 = guest::protocol::record::MAX_CPUS;

/// `KVM_CAP_MAX_VCPUS` (falling back to `KVM_CAP_NR_VCPUS`, then 4, as the
/// KVM API documents).
pub fn kvm_max_vcpus(kvm: &Kvm) -> u32 {
    let max = kvm.check_extension_int(Cap::MaxVcpus);
    let n = if max > 0 {
        max
    } else {
        kvm.check_extension_int(Cap::NrVcpus)
    };
    if n > 0 {
        n as u32
    } else {
        4
    }
}

/// The interrupt hardware KVM emulates for a VM (see the module docs).
/// One spelling everywhere: a snapshot's `meta.irqchip`, the report's JSON
/// and its text ([`Irqchip::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum Irqchip {
    /// None: one vCPU of a kernel without vmm's ELF note, where a HLT ends
    /// the run (see "One vCPU"), and one-vCPU snapshots from before the
    /// embedded guest's vCPU had a LAPIC.
    #[serde(rename = "none")]
    Absent,
    /// `KVM_CREATE_IRQCHIP`: the LAPICs, both 8259 PICs and the IOAPIC.
    #[serde(rename = "kvm")]
    Full,
    /// `KVM_CAP_SPLIT_IRQCHIP`: the LAPICs only.
    #[serde(rename = "split")]
    Split,
}

impl Irqchip {
    /// Every kind, for parsing.
    pub const ALL: [Irqchip; 3] = [Irqchip::Absent, Irqchip::Full, Irqchip::Split];

    /// Its name in a snapshot's `meta.irqchip` and in the report (`kvm`
    /// for the full one, as snapshots have always said).
    pub const fn name(self) -> &'static str {
        match self {
            Irqchip::Absent => "none",
            Irqchip::Full => "kvm",
            Irqchip::Split => "split",
        }
    }

    /// The kind named `name` ([`Irqchip::name`]).
    pub fn from_name(name: &str) -> Option<Irqchip> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What a new VM of `vcpus` vCPUs gets from this KVM: LAPICs for
    /// several (split where KVM can, else the full irqchip); for one, the
    /// split irqchip when `lapic_for_one` (a guest that never halts to stop;
    /// see "One vCPU" above) and KVM can, else none. One vCPU never gets the
    /// full irqchip here: its devices would make registering RAM wait for
    /// an SRCU grace period (docs/design.md#split-irqchip).
    pub fn for_new_vm(kvm: &Kvm, vcpus: u32, lapic_for_one: bool) -> Irqchip {
        let split = || kvm.check_extension(Cap::SplitIrqchip);
        match vcpus {
            0 | 1 if lapic_for_one && split() => Irqchip::Split,
            0 | 1 => Irqchip::Absent,
            _ if split() => Irqchip::Split,
            _ => Irqchip::Full,
        }
    }

    /// Whether the VM has an IOAPIC (and both PICs), whose state a
    /// snapshot keeps in its `irqchip.*` sections.
    pub const fn has_ioapic(self) -> bool {
        matches!(self, Irqchip::Full)
    }

    /// Whether every vCPU has an in-kernel LAPIC (`vcpuN.lapic`).
    pub const fn has_lapics(self) -> bool {
        !matches!(self, Irqchip::Absent)
    }

    /// Create it on `vm`, before any vCPU.
    pub fn create(self, vm: &VmFd) -> Result<()> {
        match self {
            Irqchip::Absent => Ok(()),
            Irqchip::Full => vm
                .create_irq_chip()
                .map_err(Error::kvm("KVM_CREATE_IRQCHIP")),
            Irqchip::Split => {
                // args[0]: the IOAPIC pins reserved for a user-space
                // IOAPIC's routes; there is none.
                let cap = kvm_enable_cap {
                    cap: KVM_CAP_SPLIT_IRQCHIP,
                    ..Default::default()
                };
                vm.enable_cap(&cap)
                    .map_err(Error::kvm("KVM_ENABLE_CAP(KVM_CAP_SPLIT_IRQCHIP)"))
            }
        }
    }
}

/// Refuse a vCPU count of 0, above KVM's limit or above the guest's, each
/// by name.
pub fn check_vcpus(asked: u32, kvm_max: u32) -> std::result::Result<(), VcpuCountError> {
    if asked == 0 {
        return Err(VcpuCountError::Zero);
    }
    if asked > kvm_max {
        return Err(VcpuCountError::AboveKvm {
            asked,
            max: kvm_max,
        });
    }
    if asked > GUEST_MAX_CPUS {
        return Err(VcpuCountError::AboveGuest {
            asked,
            max: GUEST_MAX_CPUS,
        });
    }
    Ok(())
}

/// How the APs were started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ApStart {
    /// The guest sent INIT-SIPI-SIPI; KVM held the APs in wait-for-SIPI.
    InitSipi,
}

impl ApStart {
    /// The name the report prints.
    pub fn name(self) -> &'static str {
        match self {
            ApStart::InitSipi => "init-sipi",
        }
    }
}

/// When one vCPU's thread reached the points of an SMP run that set its
/// length, in milliseconds since the VMM began the run (`timing_ms` has
/// setup, the first instruction and the whole run on the same clock).
///
/// Read together they give the run's breakdown: an AP's `first_exit_ms`
/// is when INIT reached it, the ending vCPU's `left_ms` is the guest's exit,
/// and every other vCPU's `left_ms` minus that is how long kicking it out
/// of `KVM_RUN` took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct VcpuPhases {
    /// Its thread began, right before its first `KVM_RUN`.
    pub thread_start_ms: f64,
    /// Its first return from `KVM_RUN` (null when it had none): an AP's
    /// is when INIT reached it (KVM returns from the wait for it).
    pub first_exit_ms: Option<f64>,
    /// Its run loop returned: its own end, or stopped after another
    /// vCPU ended the run.
    pub left_ms: f64,
}

impl VcpuPhases {
    /// The phases of a thread that ran from `entered` to `left`, with its
    /// first exit `first_exit` after `origin`.
    pub fn new(
        origin: std::time::Instant,
        entered: std::time::Instant,
        first_exit: Option<std::time::Duration>,
        left: std::time::Instant,
    ) -> Self {
        let ms = |t: std::time::Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e3;
        Self {
            thread_start_ms: ms(entered),
            first_exit_ms: first_exit.map(|d| d.as_secs_f64() * 1e3),
            left_ms: ms(left),
        }
    }
}

/// Make sure an AP waits for INIT/SIPI: the probe of the module docs.
pub fn hold_for_sipi(ap: &VcpuFd, index: u32) -> Result<ApStart> {
    let state = ap.get_mp_state().map_err(Error::kvm("KVM_GET_MP_STATE"))?;
    if state.mp_state == KVM_MP_STATE_UNINITIALIZED {
        return Ok(ApStart::InitSipi);
    }
    ap.set_mp_state(kvm_mp_state {
        mp_state: KVM_MP_STATE_UNINITIALIZED,
    })
    .map_err(Error::kvm("KVM_SET_MP_STATE"))?;
    let again = ap.get_mp_state().map_err(Error::kvm("KVM_GET_MP_STATE"))?;
    if again.mp_state == KVM_MP_STATE_UNINITIALIZED {
        Ok(ApStart::InitSipi)
    } else {
        Err(Error::Host(format!(
            "vCPU {index}: this KVM does not hold an application processor in \
             wait-for-SIPI (MP state {} after KVM_SET_MP_STATE UNINITIALIZED); \
             run with --vcpus 1",
            again.mp_state
        )))
    }
}

/// The guest CPUID table for vCPU `index`: the boot table with the APIC ID
/// in leaf 1 EBX bits 31:24 and the x2APIC ID of leaves 0xB/0x1F EDX set to
/// `index` (KVM gives LAPIC `index` the APIC ID `index`; a guest that reads
/// its ID from CPUID must see the same).
pub fn cpuid_for(table: &GuestCpuid, index: u32) -> GuestCpuid {
    let mut t = table.clone();
    set_apic_id(t.cpuid.as_mut_slice(), index);
    t
}

/// Put APIC ID `index` into a CPUID table (see [`cpuid_for`]): vCPU
/// `index`'s table as its snapshot stores it.
pub fn set_apic_id(entries: &mut [kvm_cpuid_entry2], index: u32) {
    for e in entries {
        match e.function {
            1 => e.ebx = (e.ebx & 0x00ff_ffff) | (index << 24),
            0xb | 0x1f => e.edx = index,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn an_irqchip_has_one_name_in_snapshots_and_reports() {
        for k in Irqchip::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
            assert_eq!(Irqchip::from_name(k.name()), Some(k));
        }
        assert_eq!(Irqchip::from_name("full"), None);
    }

    #[test]
    fn phases_are_milliseconds_after_the_origin() {
        let origin = Instant::now();
        let p = VcpuPhases::new(
            origin,
            origin + Duration::from_micros(1_500),
            Some(Duration::from_micros(2_250)),
            origin + Duration::from_millis(4),
        );
        assert_eq!(
            p,
            VcpuPhases {
                thread_start_ms: 1.5,
                first_exit_ms: Some(2.25),
                left_ms: 4.0
            }
        );
        // An instant before the origin (never, but not a panic) is 0.
        let early = VcpuPhases::new(origin + Duration::from_millis(1), origin, None, origin);
        assert_eq!(early.thread_start_ms, 0.0);
        assert_eq!(early.first_exit_ms, None);
    }

    #[test]
    fn counts_are_refused_by_name() {
        assert_eq!(check_vcpus(0, 1024), Err(VcpuCountError::Zero));
        assert_eq!(
            check_vcpus(3, 2),
            Err(VcpuCountError::AboveKvm { asked: 3, max: 2 })
        );
        assert_eq!(
            check_vcpus(GUEST_MAX_CPUS + 1, 1024),
            Err(VcpuCountError::AboveGuest {
                asked: GUEST_MAX_CPUS + 1,
                max: GUEST_MAX_CPUS
            })
        );
        assert_eq!(check_vcpus(1, 1), Ok(()));
        assert_eq!(check_vcpus(GUEST_MAX_CPUS, 1024), Ok(()));
        assert_eq!(
            VcpuCountError::AboveKvm { asked: 3, max: 2 }.to_string(),
            "--vcpus 3: KVM allows at most 2 vCPUs per VM (KVM_CAP_MAX_VCPUS)"
        );
    }
}
