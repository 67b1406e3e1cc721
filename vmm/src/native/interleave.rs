//! Guest and native repetitions of each row, alternating: the guest signals
//! "row R, repetition k done" on [`REP_PORT`](guest::protocol::REP_PORT)
//! (see [`guest::protocol::rep`]); the vCPU thread is then stopped in that
//! port exit, and [`Interleaver::on_rep`] runs the native repetition of the
//! same row on it before the guest resumes. Both sides thus see the same
//! machine state within milliseconds, and a burst of noise from the other
//! users of the machine hits one pair, not the whole native column.

use guest::protocol::{NativeRowOut, RepRecord, Report, RowKey};
use guest::workloads::{self, Selection};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::image::GuestImage;

/// Repetitions per row by default (odd: the median is a measured pair).
pub const DEFAULT_REPS: u32 = 5;
/// Repetition pairs kept: far above 64 rows x 15 repetitions.
pub const MAX_PAIRS: usize = 4096;

/// Which machine code the native repetitions ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NativeCode {
    /// The guest kernel's own bytes, mapped at its link address.
    GuestImage {
        /// Address of `vmm_native_row`.
        entry: u64,
    },
    /// The VMM's own build of the `guest` library (same source, other
    /// machine code), with why the image could not be used.
    VmmBuild {
        /// The named error of the mapping attempt.
        why: String,
    },
}

/// One guest repetition and the native one run right after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepPair {
    /// The row.
    pub key: RowKey,
    /// What the guest measured.
    pub guest: RepRecord,
    /// What the native side measured.
    pub native: NativeRowOut,
}

impl RepPair {
    /// Guest throughput / native throughput (both in TSC cycles), when both
    /// measured something.
    pub fn ratio(&self) -> Option<f64> {
        let (g, n) = (&self.guest, &self.native);
        if n.ran == 0 || g.work == 0 || n.work == 0 || g.cycles == 0 || n.cycles == 0 {
            return None;
        }
        Some((g.work as f64 / g.cycles as f64) / (n.work as f64 / n.cycles as f64))
    }
}

/// The native half of an interleaved run.
pub struct Interleaver {
    image: Option<GuestImage>,
    /// Which code ran natively.
    pub code: NativeCode,
    quick: bool,
    tsc_khz: u64,
    /// Repetitions each row gets.
    pub reps: u32,
    scratch: Vec<u8>,
    report: Box<Report>,
    /// The pairs, in run order.
    pub pairs: Vec<RepPair>,
    /// Signals not acted on: a record outside RAM, an unknown row, or past
    /// [`MAX_PAIRS`].
    pub ignored: u64,
}

impl std::fmt::Debug for Interleaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleaver")
            .field("code", &self.code)
            .field("reps", &self.reps)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

/// Why interleaving cannot start.
#[derive(Debug, thiserror::Error)]
pub enum InterleaveError {
    /// The workload list does not parse.
    #[error("--workload {list:?}: {why}")]
    Workload {
        /// The list.
        list: String,
        /// The parser's reason.
        why: &'static str,
    },
    /// A repetition count outside 1..=MAX_ROW_REPS.
    #[error("repetitions per row must be 1..={max}, not {reps}")]
    Reps {
        /// What was asked.
        reps: u32,
        /// The limit.
        max: u32,
    },
}

impl Interleaver {
    /// Ready to time `list`'s rows natively, `reps` times each, with the
    /// code of `kernel` (an ELF guest kernel) when it can be mapped, else
    /// the VMM's build (the reason kept in [`Interleaver::code`]).
    pub fn new(
        list: &str,
        reps: u32,
        tsc_khz: u64,
        kernel: &[u8],
    ) -> Result<Self, InterleaveError> {
        let sel = Selection::parse(list).map_err(|why| InterleaveError::Workload {
            list: list.to_string(),
            why,
        })?;
        let max = guest::protocol::MAX_ROW_REPS;
        if !(1..=max).contains(&reps) {
            return Err(InterleaveError::Reps { reps, max });
        }
        let (image, code) = match GuestImage::map(kernel) {
            Ok(img) => {
                let entry = img.entry_addr;
                (Some(img), NativeCode::GuestImage { entry })
            }
            Err(e) => (
                None,
                NativeCode::VmmBuild {
                    why: with_sources(&e),
                },
            ),
        };
        Ok(Self {
            image,
            code,
            quick: sel.quick,
            tsc_khz,
            reps,
            scratch: vec![0u8; workloads::scratch_bytes(&sel)],
            report: Box::new(Report::new()),
            pairs: Vec::new(),
            ignored: 0,
        })
    }

    /// Run one native repetition of row `key`.
    pub fn run_native(&mut self, key: RowKey) -> NativeRowOut {
        match &self.image {
            Some(img) => img.run_row(key.encode(), self.quick, self.tsc_khz, &mut self.scratch),
            None => {
                *self.report = Report::new();
                workloads::run_row(
                    key,
                    self.quick,
                    self.tsc_khz,
                    &mut self.scratch,
                    &mut self.report,
                )
            }
        }
    }

    /// The guest finished a repetition; its record is at `addr`. Runs the
    /// native repetition of the same row and keeps the pair.
    pub fn on_rep(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        let mut raw = [0u8; RepRecord::SIZE];
        let (Ok(()), true) = (
            mem.read_slice(&mut raw, GuestAddress(addr)),
            self.pairs.len() < MAX_PAIRS,
        ) else {
            self.ignored += 1;
            return;
        };
        let word = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().unwrap_or_default());
        let guest = RepRecord {
            key: word(0) as u32,
            rep: (word(0) >> 32) as u32,
            work: word(8),
            cycles: word(16),
            digest: word(24),
        };
        let Some(key) = RowKey::decode(guest.key) else {
            self.ignored += 1;
            return;
        };
        let native = self.run_native(key);
        self.pairs.push(RepPair { key, guest, native });
    }
}

/// `e` and its sources, joined with ": ".
fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
