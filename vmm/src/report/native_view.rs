//! How the guest/native ratios were measured: per row the spread of the
//! interleaved repetitions ([`RatioSpread`]), for the run which machine code
//! ran natively ([`NativeView`]), and what `--hugepages` achieved
//! ([`HugePagesView`]).

use serde::Serialize;

/// The spread of one row's per-repetition guest/native ratios
/// (`native_spread` in a result row). Its `native_ratio` is the median over
/// every pair of timed parts (a guest part and the native part run right
/// after it), or over the repetition pairs when the guest signalled no
/// parts; a repetition's own ratio is the median of its part pairs.
#[derive(schemars::JsonSchema, Clone, Debug, Serialize, PartialEq)]
pub struct RatioSpread {
    /// Guest/native repetition pairs measured.
    pub reps: u32,
    /// Guest/native part pairs among them (0: the guest signalled no parts).
    pub parts: u32,
    /// The lowest repetition's ratio.
    pub min: f64,
    /// The highest repetition's ratio.
    pub max: f64,
    /// True when `max - min` is wider than the median's distance from 1.0:
    /// noise, not the guest, decides whether this row is above or below
    /// native speed.
    pub noisy: bool,
    /// Whether every native repetition computed bit for bit the guest's
    /// result (DGEMM product, Linpack solution; null for AES rows, whose
    /// known answers are checked on both sides instead).
    pub same_result: Option<bool>,
}

/// How the native side ran (`native` in the JSON; null without interleaving).
#[derive(schemars::JsonSchema, Clone, Debug, Serialize, PartialEq)]
pub struct NativeView {
    /// `guest-image`: the guest kernel's own bytes, mapped at its link
    /// address in the VMM and called through `vmm_native_row`;
    /// `vmm-build`: the VMM's build of the same source (other machine code).
    pub code: &'static str,
    /// Address of the entry point (`guest-image` only).
    pub entry: Option<String>,
    /// Why the guest image could not be used (`vmm-build` only).
    pub fallback_reason: Option<String>,
    /// Repetitions per row the guest was asked for.
    pub reps_per_row: u32,
    /// Guest/native repetition pairs measured.
    pub pairs: usize,
    /// Guest/native part pairs among them (0: the guest signalled no parts,
    /// each repetition was compared whole).
    pub part_pairs: usize,
    /// Rows with a ratio whose spread is wider than its distance from 1.0.
    pub noisy_rows: usize,
}

/// What `--hugepages` did to guest RAM (`hugepages` in the JSON; null
/// without the option).
#[derive(schemars::JsonSchema, Clone, Debug, Serialize, PartialEq)]
pub struct HugePagesView {
    /// What backed guest RAM: `thp` (MADV_HUGEPAGE on anonymous memory)
    /// or `hugetlbfs` (2 MiB pages from the host's reserved pool).
    pub backing: String,
    /// Whether `madvise(MADV_HUGEPAGE)` on the RAM mapping succeeded
    /// (hugetlbfs: true, nothing to advise).
    pub advised: bool,
    /// Why not (null when it did).
    pub error: Option<String>,
    /// Guest RAM in KiB.
    pub ram_kib: u64,
    /// KiB of the RAM mapping backed by transparent huge pages at the end
    /// of the run (`AnonHugePages` in `/proc/self/smaps`); null when it
    /// could not be read.
    pub anon_huge_kib: Option<u64>,
    /// hugetlbfs: KiB of guest RAM in 2 MiB hugetlb pages at the end of
    /// the run (`Private_Hugetlb` in `/proc/self/smaps`: the pages the
    /// guest touched); null with THP.
    pub hugetlb_kib: Option<u64>,
    /// The native side's memory, backed like guest RAM so both sides of a
    /// ratio run on the same page size (null when nothing ran natively).
    pub native: Option<NativeScratchView>,
}

/// How the native rows' memory was backed (`hugepages.native`).
#[derive(schemars::JsonSchema, Clone, Debug, Serialize, PartialEq)]
pub struct NativeScratchView {
    /// `thp` (MADV_HUGEPAGE) or `hugetlbfs` (2 MiB pages from the pool).
    pub backing: String,
    /// Why it is not guest RAM's backing (hugetlbfs asked, the pool had no
    /// room for it beyond guest RAM: THP instead), or why the advice was
    /// refused; null when it matches.
    pub fallback: Option<String>,
    /// Its size, KiB.
    pub scratch_kib: u64,
    /// KiB of it in huge pages at the end of the run (`AnonHugePages`, or
    /// the hugetlb fields of `/proc/self/smaps`); null when unknown.
    pub huge_kib: Option<u64>,
}
