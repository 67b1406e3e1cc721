//! The guest's workloads run natively on the host, in the same process and
//! the same run, so every guest figure comes with a guest/native ratio; and
//! the host's `openssl speed` as a reference users already trust.

pub mod image;
pub mod interleave;
pub(crate) mod scratch;
pub(crate) mod worker;

use guest::protocol::{Report, RowKind};
use guest::workloads::{self, AesVariant, CpuFeatures, GemmVariant, Selection};

use crate::bench::openssl::{self, GuestFigure, Yardstick};
use crate::bench::stats::Spread;
use crate::error::{Error, Result};
use crate::report::parallel::Measured;
use crate::report::summary::SeedFigure;
use crate::report::{result_rows, NativeView, RatioSpread, ResultRow};
use crate::run::outcome::NativeScratch;
use interleave::{part_ratio, Interleaver, NativeCode, RepPair};
use scratch::Scratch;

/// Run `sel` (`--workload`, parsed) on the host with every variant the
/// host CPU and OS allow, on memory backed as `backing` says (guest RAM's
/// `--hugepages`), and return the rows and how that memory was backed.
pub fn run_native(
    mut sel: Selection,
    tsc_khz: u64,
    backing: Option<crate::vstate::RamBacking>,
) -> Result<(Vec<ResultRow>, NativeScratch)> {
    // Linux arms XFD for AMX tile data until a process asks: without the
    // grant the native tile row would die of SIGILL, so it is left out
    // (the guest row then has no ratio).
    if sel.amx && !crate::arch::amx::permit_native() {
        sel.amx = false;
    }
    let (mut scratch, info) = Scratch::new(workloads::scratch_bytes(&sel), backing)
        .map_err(|e| Error::Host(format!("mapping the native rows' memory failed: {e}")))?;
    let mut report = Box::new(Report::new());
    if !sel.is_empty() {
        let on = workloads::Target {
            feat: &CpuFeatures::detect(),
            tsc_khz,
            scratch: scratch.as_mut_slice(),
            report: &mut report,
        };
        workloads::run(&sel, on);
    }
    let backed = scratch_of(&info, info.huge_kib());
    Ok((result_rows(&report, tsc_khz), backed))
}

/// Fill each guest row's `native_ratio` from the native row with the same
/// workload, variant and size; rows with interleaved pairs
/// ([`attach_interleaved`]) keep their median.
pub fn attach_ratios(guest: &mut [ResultRow], native: &[ResultRow]) {
    for g in guest.iter_mut().filter(|g| g.native_spread.is_none()) {
        let n = native.iter().find(|n| n.id() == g.id());
        g.native_ratio = match (g.throughput(), n.and_then(ResultRow::throughput)) {
            (Some(gv), Some(nv)) if nv > 0.0 => Some(gv / nv),
            _ => None,
        };
    }
}

/// `bench=parallel` on the host: the guest's scaling set on one thread,
/// then on `threads` threads at once, holding a barrier before each part
/// as the guest's CPUs do. Returns (one thread's rows, each concurrent
/// thread's rows), variants unsuffixed.
pub fn run_parallel_native(threads: usize, tsc_khz: u64) -> (Vec<Measured>, Vec<Vec<Measured>>) {
    use guest::bench::parallel::{self, Part};
    let feat = CpuFeatures::detect();
    let run = |barrier: Option<&std::sync::Barrier>| {
        let mut scratch = vec![0u8; parallel::scratch_bytes()];
        let mut report = Box::new(Report::new());
        for part in Part::ALL {
            if let Some(b) = barrier {
                b.wait();
            }
            parallel::run_part(part, &feat, tsc_khz, &mut scratch, &mut report);
        }
        result_rows(&report, tsc_khz)
            .iter()
            .map(Measured::from)
            .collect::<Vec<_>>()
    };
    let solo = run(None);
    let barrier = std::sync::Barrier::new(threads.max(1));
    let together = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| s.spawn(|| run(Some(&barrier))))
            .collect();
        // A workload thread that panicked has no rows.
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (solo, together)
}

/// The row name, variant name and size a repetition key stands for.
fn row_of(pair: &RepPair) -> Option<(&'static str, String, u64)> {
    let k = pair.key;
    let v = usize::from(k.variant);
    let variant = match k.kind {
        RowKind::AesCbc | RowKind::AesCtr => AesVariant::ALL.get(v)?.name().to_string(),
        RowKind::Dgemm | RowKind::Linpack => GemmVariant::ALL.get(v)?.name().to_string(),
        RowKind::Xts | RowKind::Gcm | RowKind::XtsBorrow | RowKind::GcmBorrow => {
            workloads::mode_row_variant(k)?.as_str().to_string()
        }
    };
    Some((k.kind.name(), variant, u64::from(k.size)))
}

/// The median ratio of one row and its spread. The median is over every
/// pair of parts of all its repetitions (each guest part beside the native
/// part timed right after it), or over the repetition pairs when the guest
/// signalled no parts; the spread is that of the repetitions' own ratios
/// (each the median of its part pairs, or its records' ratio).
pub fn spread(pairs: &[&RepPair]) -> Option<(f64, RatioSpread)> {
    let mut parts = Vec::new();
    let mut ratios = Vec::new();
    for p in pairs {
        let first = parts.len();
        parts.extend(p.parts.iter().filter_map(|(g, n)| part_ratio(g, n)));
        let rep = Spread::of(&parts[first..]).map(|s| s.median);
        ratios.extend(rep.or_else(|| p.ratio()));
    }
    let Spread { min, median, .. } = Spread::of(&ratios)?;
    let max = ratios.iter().copied().fold(min, f64::max);
    let median = Spread::of(&parts).map_or(median, |s| s.median);
    let with_digest: Vec<_> = pairs.iter().filter(|p| p.guest.digest != 0).collect();
    let same_result = (!with_digest.is_empty()).then(|| {
        with_digest
            .iter()
            .all(|p| p.native.ran != 0 && p.native.digest == p.guest.digest)
    });
    Some((
        median,
        RatioSpread {
            reps: ratios.len() as u32,
            parts: parts.len() as u32,
            min,
            max,
            noisy: max - min > (median - 1.0).abs(),
            same_result,
        },
    ))
}

/// Fill `native_ratio` (the median) and `native_spread` of every guest row
/// the interleaved pairs measured, and say how the native side ran. Rows
/// without pairs keep what they had. Returns the view for the summary.
pub fn attach_interleaved(guest: &mut [ResultRow], native: &Interleaver) -> NativeView {
    let mut noisy_rows = 0;
    for g in guest.iter_mut() {
        let pairs: Vec<&RepPair> = native
            .pairs
            .iter()
            .filter(|p| {
                row_of(p).is_some_and(|(n, v, s)| n == g.name && v == g.variant && s == g.size)
            })
            .collect();
        if g.invalid.is_some() {
            continue;
        }
        if let Some((med, sp)) = spread(&pairs) {
            noisy_rows += usize::from(sp.noisy);
            g.native_ratio = Some(med);
            g.native_spread = Some(sp);
        }
    }
    let (code, entry, fallback_reason) = match &native.code {
        NativeCode::GuestImage { entry } => ("guest-image", Some(format!("{entry:#x}")), None),
        NativeCode::VmmBuild { why } => ("vmm-build", None, Some(why.clone())),
    };
    NativeView {
        code,
        entry,
        fallback_reason,
        reps_per_row: native.reps,
        pairs: native.pairs.len(),
        part_pairs: native.pairs.iter().map(|p| p.parts.len()).sum(),
        noisy_rows,
    }
}

/// How the native side's memory was backed: from the mapping's
/// description and its huge-page KiB now.
pub fn scratch_of(info: &scratch::ScratchInfo, huge_kib: Option<u64>) -> NativeScratch {
    NativeScratch {
        backing: info.backing,
        fallback: info.fallback.clone(),
        kib: info.len >> 10,
        huge_kib,
    }
}

/// The summary's view of what `--hugepages` did; `interleaved`: the native
/// side the run carried, whose memory is reported when the run's own
/// record has none.
pub fn hugepages_view(
    h: &crate::run::outcome::HugePages,
    interleaved: Option<&Interleaver>,
) -> crate::report::HugePagesView {
    let native = h
        .native
        .clone()
        .or_else(|| interleaved.map(|n| scratch_of(&n.scratch, n.scratch_huge_kib())));
    crate::report::HugePagesView {
        backing: h.backing.name().to_string(),
        advised: h.advised.is_ok(),
        error: h.advised.clone().err(),
        ram_kib: h.ram_kib,
        anon_huge_kib: h.anon_huge_kib,
        hugetlb_kib: h.hugetlb_kib,
        native: native.as_ref().map(scratch_view),
    }
}

/// The summary's view of how the native side's memory was backed.
pub fn scratch_view(n: &NativeScratch) -> crate::report::NativeScratchView {
    crate::report::NativeScratchView {
        backing: n.backing.map_or("plain", |b| b.name()).to_string(),
        fallback: n.fallback.clone(),
        scratch_kib: n.kib,
        huge_kib: n.huge_kib,
    }
}

/// The AES yardsticks for the guest's rows: the host's `openssl speed` per
/// mode and size (see [`openssl::yardsticks`]; `quick` keeps one size per
/// mode), rows whose timing is invalid left out.
pub fn aes_yardsticks(guest: &[ResultRow], quick: bool) -> Vec<Yardstick> {
    let figures: Vec<GuestFigure<'_>> = guest
        .iter()
        .filter(|r| r.invalid.is_none() && r.check == "pass")
        .map(|r| GuestFigure {
            name: &r.name,
            variant: &r.variant,
            size: r.size,
            mb_per_s: r.mb_per_s,
        })
        .collect();
    openssl::yardsticks(&figures, quick, openssl::RUNS, &mut openssl::openssl_speed)
}

/// The seed's Ice Lake AES-256-XTS 4 KiB figures, when `guest` has XTS
/// rows to read them against.
pub fn seed_reference(guest: &[ResultRow]) -> Vec<SeedFigure> {
    if !guest.iter().any(|r| r.name == "aes-256-xts") {
        return Vec::new();
    }
    openssl::SEED_ICE_LAKE_XTS_4K
        .iter()
        .map(|&(variant, mb_per_s)| SeedFigure { variant, mb_per_s })
        .collect()
}

/// The `openssl speed -evp aes-128-cbc` 8192-byte figure among `ys`.
pub fn cbc_8192(ys: &[Yardstick]) -> Option<f64> {
    ys.iter()
        .find(|y| y.cipher == "aes-128-cbc" && y.size == 8192)
        .and_then(|y| y.openssl_mb_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `--workload` list as `main` parses it.
    fn sel(list: &str) -> Selection {
        Selection::parse(list).unwrap()
    }
    use guest::protocol::{NativeRowOut, PartRecord, RepRecord, RowKey, NATIVE_ROW_SYMBOL};
    use interleave::InterleaveError;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    fn pair(guest: (u64, u64, u64), native: (u64, u64, u64)) -> RepPair {
        RepPair {
            key: RowKey::decode(0x3000_0100).unwrap(),
            guest: RepRecord {
                key: 0x3000_0100,
                rep: 0,
                work: guest.0,
                cycles: guest.1,
                digest: guest.2,
            },
            native: NativeRowOut {
                ran: 1,
                check: 1,
                work: native.0,
                cycles: native.1,
                digest: native.2,
            },
            parts: Vec::new(),
        }
    }

    #[test]
    fn xts_and_gcm_keys_name_their_rows() {
        let named = |kind, variant, size| {
            let mut p = pair((1, 1, 0), (1, 1, 0));
            p.key = RowKey {
                kind,
                variant,
                size,
            };
            row_of(&p)
        };
        use RowKind::*;
        for (kind, variant, size, want) in [
            (Xts, 0, 4096, Some(("aes-256-xts", "aesni"))),
            (Xts, 3, 512, Some(("aes-256-xts", "vaes-512"))),
            (Xts, 4, 512, Some(("aes-256-xts", "soft"))),
            (Xts, 5, 512, None),
            (Gcm, 3, 512, Some(("aes-128-gcm", "soft"))),
            (Gcm, 4, 512, None),
            (
                XtsBorrow,
                4,
                512,
                Some(("aes-256-xts", "aesni-avx +xsave/ymm")),
            ),
            (
                XtsBorrow,
                11,
                512,
                Some(("aes-256-xts", "vaes-512 +xsave/zmm")),
            ),
            (XtsBorrow, 12, 512, None),
            (
                GcmBorrow,
                6,
                512,
                Some(("aes-128-gcm", "vaes-vpclmul-512 +xsave/xmm")),
            ),
            (GcmBorrow, 9, 512, None),
        ] {
            let want = want.map(|(n, v)| (n, v.to_string(), u64::from(size)));
            assert_eq!(named(kind, variant, size), want, "{kind:?} {variant}");
        }
    }

    fn part(work: u64, cycles: u64) -> PartRecord {
        PartRecord {
            key: 0x3000_0100,
            work,
            cycles,
            ..PartRecord::default()
        }
    }

    #[test]
    fn part_pairs_decide_the_median_and_each_repetition_is_its_parts_median() {
        // Repetition records say 0.5, but the parts were paired: ratios
        // 0.9, 1.0, 1.1 in the first repetition, 0.96, 0.97 in the second.
        let mut a = pair((50, 100, 7), (100, 100, 7));
        a.parts = vec![
            (part(90, 100), part(100, 100)),
            (part(100, 100), part(100, 100)),
            (part(110, 100), part(100, 100)),
        ];
        let mut b = pair((50, 100, 7), (100, 100, 7));
        b.parts = vec![
            (part(96, 100), part(100, 100)),
            (part(97, 100), part(100, 100)),
            // A native part that measured nothing is no pair.
            (part(97, 100), part(0, 0)),
        ];
        let (med, sp) = spread(&[&a, &b]).unwrap();
        // Median of 0.9, 0.96, 0.97, 1.0, 1.1.
        assert!((med - 0.97).abs() < 1e-12, "{med}");
        assert_eq!((sp.reps, sp.parts), (2, 5));
        // The repetitions' ratios: 1.0 and 0.965.
        assert!(
            (sp.min - 0.965).abs() < 1e-12 && (sp.max - 1.0).abs() < 1e-12,
            "{sp:?}"
        );
        assert!(sp.noisy);
    }

    #[test]
    fn median_ratio_spread_and_noise_flag() {
        // Ratios 0.5, 0.98, 0.99 (guest work/cycles over native's).
        let p = [
            pair((50, 100, 7), (100, 100, 7)),
            pair((98, 100, 7), (100, 100, 7)),
            pair((99, 100, 7), (100, 100, 7)),
        ];
        let refs: Vec<&RepPair> = p.iter().collect();
        let (med, sp) = spread(&refs).unwrap();
        assert_eq!(med, 0.98);
        assert_eq!((sp.reps, sp.parts, sp.min, sp.max), (3, 0, 0.5, 0.99));
        // Spread 0.49 is wider than |0.98 - 1| = 0.02: noise decides.
        assert!(sp.noisy);
        assert_eq!(sp.same_result, Some(true));
        // A tight row far from 1.0 is not noisy; a differing digest shows.
        let q = [
            pair((90, 100, 7), (100, 100, 7)),
            pair((91, 100, 8), (100, 100, 7)),
        ];
        let refs: Vec<&RepPair> = q.iter().collect();
        let (med, sp) = spread(&refs).unwrap();
        assert!((med - 0.905).abs() < 1e-12);
        assert!(!sp.noisy);
        assert_eq!(sp.same_result, Some(false));
        // AES rows carry no digest; nothing measured has no spread.
        let a = [pair((1, 1, 0), (1, 1, 0))];
        assert_eq!(spread(&[&a[0]]).unwrap().1.same_result, None);
        let none = pair((0, 0, 0), (1, 1, 0));
        assert_eq!(none.ratio(), None);
        assert!(spread(&[&none]).is_none());
    }

    #[test]
    fn interleaver_falls_back_and_pairs_each_signal() {
        let mut kernel = crate::GUEST_KERNEL.to_vec();
        let name = NATIVE_ROW_SYMBOL.as_bytes();
        let at = kernel
            .windows(name.len() + 1)
            .position(|w| &w[..name.len()] == name && w[name.len()] == 0)
            .unwrap();
        kernel[at] = b'X';
        let mut n = Interleaver::new(sel("gemm,quick"), 3, 100, &kernel, None).unwrap();
        match &n.code {
            NativeCode::VmmBuild { why } => {
                assert_eq!(
                    *why,
                    format!("the guest kernel exports no `{NATIVE_ROW_SYMBOL}` function")
                )
            }
            other => panic!("{other:?}"),
        }
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        // dgemm sse2 n=40, as a guest would write it.
        let rec: [u64; 4] = [0x3000_0028, 1000, 2000, 0x1234];
        for (i, w) in rec.iter().enumerate() {
            mem.write_obj(*w, GuestAddress(0x800 + 8 * i as u64))
                .unwrap();
        }
        n.on_rep(&mem, 0x800);
        // Outside RAM, and an unknown row: counted, not run.
        n.on_rep(&mem, 0xfff0);
        mem.write_obj(0u64, GuestAddress(0x900)).unwrap();
        n.on_rep(&mem, 0x900);
        assert_eq!(n.pairs.len(), 1);
        assert_eq!(n.ignored, 2);
        let p = &n.pairs[0];
        assert!(p.parts.is_empty());
        assert_eq!(
            (p.guest.work, p.guest.cycles, p.guest.digest),
            (1000, 2000, 0x1234)
        );
        assert_eq!((p.native.ran, p.native.check), (1, 1));
        assert!(p.ratio().is_some());
        assert!(matches!(
            Interleaver::new(sel("gemm"), 0, 100, &kernel, None),
            Err(InterleaveError::Reps { reps: 0, max: 15 })
        ));
    }

    #[test]
    fn each_guest_part_is_paired_with_the_next_native_part() {
        let _turn = image::tests::LINK_RANGE
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The native repetition has min(10, target / call) parts, so the
        // target must hold three calls on the slowest machine this runs
        // on: a 20 ms quick target at a claimed 10 GHz is 2 x 10^8 TSC
        // cycles (~0.1 s anywhere), and a DGEMM of n = 40 takes ~10^4 on
        // Zen 3 but 8.5 x 10^6 under QEMU's TCG, where a 1 GHz claim
        // (a target of 2 x 10^7) gave 2 parts.
        let mut n =
            Interleaver::new(sel("gemm,quick"), 3, 10_000_000, crate::GUEST_KERNEL, None).unwrap();
        assert!(
            matches!(n.code, NativeCode::GuestImage { .. }),
            "{:?}",
            n.code
        );
        assert!(n.wants_parts());
        let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let key = 0x3000_0028u64; // dgemm sse2 n=40
        for rep in 0..2u64 {
            for part in 0..3u64 {
                let rec = [key | rep << 32, part, 1000 + part, 2000];
                for (i, w) in rec.iter().enumerate() {
                    mem.write_obj(*w, GuestAddress(0x800 + 8 * i as u64))
                        .unwrap();
                }
                n.on_part(&mem, 0x800);
            }
            let rec = [key | rep << 32, 1000, 2000, 0x1234];
            for (i, w) in rec.iter().enumerate() {
                mem.write_obj(*w, GuestAddress(0xa00 + 8 * i as u64))
                    .unwrap();
            }
            n.on_rep(&mem, 0xa00);
        }
        assert_eq!((n.pairs.len(), n.ignored), (2, 0));
        // The turns held this (the vCPU's) thread on one CPU.
        // SAFETY: a zeroed cpu_set_t is a valid set for the kernel to fill.
        let cpus = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            libc::CPU_COUNT(&set)
        };
        assert_eq!(cpus, 1);
        for (rep, p) in n.pairs.iter().enumerate() {
            assert_eq!((p.native.ran, p.native.check), (1, 1));
            assert_eq!(p.parts.len(), 3, "{p:?}");
            for (i, (g, nat)) in p.parts.iter().enumerate() {
                assert_eq!(
                    (g.rep, g.part, g.work),
                    (rep as u32, i as u32, 1000 + i as u64)
                );
                // The native side times its own repetition 0, part by part.
                assert_eq!((nat.key, nat.rep, nat.part), (key as u32, 0, i as u32));
                assert!(nat.work > 0 && nat.cycles > 0, "{nat:?}");
            }
        }
        let refs: Vec<&RepPair> = n.pairs.iter().collect();
        assert_eq!(spread(&refs).unwrap().1.parts, 6);
        // A part outside RAM is counted, not paired.
        n.on_part(&mem, 0xfff0);
        assert_eq!(n.ignored, 1);
        // Mixed-up signals: a part of repetition 7, then the end of
        // repetition 8. The held native repetition ends unpaired, the
        // eighth runs whole, and the native thread keeps serving.
        let write = |at: u64, rec: [u64; 4]| {
            for (i, w) in rec.iter().enumerate() {
                mem.write_obj(*w, GuestAddress(at + 8 * i as u64)).unwrap();
            }
        };
        write(0x800, [key | 7 << 32, 0, 1000, 2000]);
        n.on_part(&mem, 0x800);
        write(0xa00, [key | 8 << 32, 1000, 2000, 0x1234]);
        n.on_rep(&mem, 0xa00);
        assert_eq!(n.pairs.len(), 3);
        let p = &n.pairs[2];
        assert!(p.parts.is_empty() && p.native.ran == 1, "{p:?}");
        write(0x800, [key | 9 << 32, 0, 1000, 2000]);
        n.on_part(&mem, 0x800);
        write(0xa00, [key | 9 << 32, 1000, 2000, 0x1234]);
        n.on_rep(&mem, 0xa00);
        assert_eq!(
            (n.pairs.len(), n.pairs[3].parts.len(), n.ignored),
            (4, 1, 1)
        );
    }
}
