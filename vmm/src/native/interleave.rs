//! Guest and native repetitions of each row, alternating part by part: the
//! guest signals "part p of repetition k of row R done" on
//! [`PART_PORT`](guest::protocol::PART_PORT) and "repetition k done" on
//! [`REP_PORT`](guest::protocol::REP_PORT) (see [`guest::protocol::rep`]).
//! The vCPU thread is stopped in each of those port exits while the native
//! repetition of the same row, held on its own thread (`super::worker`),
//! times its next part: guest part 0, native part 0, guest part 1, ... So
//! the two halves of each compared pair run ~2 ms apart, and a burst of
//! noise from the other users of the machine hits one pair, not a row.
//!
//! A guest that signals only repetitions (one built before parts, or one
//! told not to) gets the native repetition run whole in its repetition's
//! exit, as before.

use guest::protocol::{NativeRowOut, PartRecord, RepRecord, RowKey};
use guest::workloads::{self, Selection};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::image::GuestImage;
use super::scratch::{Scratch, ScratchInfo};
use super::worker::{Step, Worker};

/// Repetitions per row by default (odd: the median is a measured pair).
pub const DEFAULT_REPS: u32 = 5;
/// Repetition pairs kept, and native repetitions started: far above 64
/// rows x 15 repetitions (a guest that signals more only costs ignored
/// signals, not native time).
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

/// One guest repetition and the native one interleaved with it.
#[derive(Clone, Debug, PartialEq)]
pub struct RepPair {
    /// The row.
    pub key: RowKey,
    /// What the guest measured.
    pub guest: RepRecord,
    /// What the native side measured.
    pub native: NativeRowOut,
    /// Each guest part and the native part timed right after it, in order
    /// (empty when the guest signalled no parts).
    pub parts: Vec<(PartRecord, PartRecord)>,
}

/// Guest throughput / native throughput from (work, TSC cycles) of each,
/// when both measured something.
fn rate_ratio(guest: (u64, u64), native: (u64, u64)) -> Option<f64> {
    let ((gw, gc), (nw, nc)) = (guest, native);
    if gw == 0 || nw == 0 || gc == 0 || nc == 0 {
        return None;
    }
    Some((gw as f64 / gc as f64) / (nw as f64 / nc as f64))
}

/// Guest throughput / native throughput of one pair of parts.
pub fn part_ratio(guest: &PartRecord, native: &PartRecord) -> Option<f64> {
    rate_ratio((guest.work, guest.cycles), (native.work, native.cycles))
}

/// The native repetition now held between parts.
#[derive(Debug)]
struct Running {
    key: RowKey,
    rep: u32,
    parts: Vec<(PartRecord, PartRecord)>,
    /// The native repetition ended (it had fewer parts than the guest's).
    done: Option<NativeRowOut>,
}

impl RepPair {
    /// Guest throughput / native throughput (both in TSC cycles), when both
    /// measured something.
    pub fn ratio(&self) -> Option<f64> {
        let (g, n) = (&self.guest, &self.native);
        if n.ran == 0 {
            return None;
        }
        rate_ratio((g.work, g.cycles), (n.work, n.cycles))
    }
}

/// The native half of an interleaved run.
pub struct Interleaver {
    /// The native thread (`None`: it could not be started, and nothing is
    /// run natively: every signal counts as ignored).
    worker: Option<Worker>,
    /// Which code ran natively.
    pub code: NativeCode,
    /// How the native rows' memory is backed (as guest RAM is).
    pub scratch: ScratchInfo,
    /// Repetitions each row gets.
    pub reps: u32,
    running: Option<Running>,
    /// Native repetitions started.
    started: usize,
    /// The pairs, in run order.
    pub pairs: Vec<RepPair>,
    /// Signals not acted on: a record outside RAM, an unknown row, past
    /// [`MAX_PAIRS`], or with no native thread.
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
    /// A repetition count outside 1..=MAX_ROW_REPS.
    #[error("repetitions per row must be 1..={max}, not {reps}")]
    Reps {
        /// What was asked.
        reps: u32,
        /// The limit.
        max: u32,
    },
    /// The native thread could not be created.
    #[error("starting the thread for the native repetitions failed")]
    Thread(#[source] std::io::Error),
    /// The native rows' memory could not be mapped.
    #[error("mapping the native repetitions' memory failed")]
    Scratch(#[source] std::io::Error),
}

impl Interleaver {
    /// Ready to time `sel`'s rows natively, `reps` times each, with the
    /// code of `kernel` (an ELF guest kernel) when it can be mapped, else
    /// the VMM's build (the reason kept in [`Interleaver::code`]), on
    /// memory backed like guest RAM (`backing`, `--hugepages`).
    pub fn new(
        sel: Selection,
        reps: u32,
        tsc_khz: u64,
        kernel: &[u8],
        backing: Option<crate::vstate::RamBacking>,
    ) -> Result<Self, InterleaveError> {
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
        let (scratch, info) = Scratch::new(workloads::scratch_bytes(&sel), backing)
            .map_err(InterleaveError::Scratch)?;
        let worker =
            Worker::spawn(image, sel.quick, tsc_khz, scratch).map_err(InterleaveError::Thread)?;
        Ok(Self {
            worker: Some(worker),
            code,
            scratch: info,
            reps,
            running: None,
            started: 0,
            pairs: Vec::new(),
            ignored: 0,
        })
    }

    /// KiB of the native rows' memory in huge pages now (see
    /// `ScratchInfo::huge_kib`); `None` once the native thread is gone
    /// (its memory went with it) or without huge pages.
    pub fn scratch_huge_kib(&self) -> Option<u64> {
        self.worker.as_ref().and(self.scratch.huge_kib())
    }

    /// Whether the guest should signal its parts: yes while the native
    /// thread runs.
    pub fn wants_parts(&self) -> bool {
        self.worker.is_some()
    }

    /// The guest timed a part; its record is at `addr`. Lets the native
    /// repetition of the same row time its next part (starting that
    /// repetition at the row's first part) and keeps the two.
    pub fn on_part(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        let Some(w) = read_words(mem, addr) else {
            self.ignored += 1;
            return;
        };
        let guest = PartRecord {
            key: w[0] as u32,
            rep: (w[0] >> 32) as u32,
            part: w[1] as u32,
            reserved: (w[1] >> 32) as u32,
            work: w[2],
            cycles: w[3],
        };
        let same = self
            .running
            .as_ref()
            .is_some_and(|r| r.key.encode() == guest.key && r.rep == guest.rep);
        let (Some(key), true, Some(worker)) = (
            RowKey::decode(guest.key),
            same || self.started < MAX_PAIRS,
            self.worker.as_ref(),
        ) else {
            self.ignored += 1;
            return;
        };
        if !same {
            self.started += 1;
            // A part of another repetition while one is held (a guest
            // that skipped its repetition signal): that one ends unpaired.
            if self.running.take().is_some_and(|r| r.done.is_none()) {
                finish(worker);
            }
            self.running = Some(Running {
                key,
                rep: guest.rep,
                parts: Vec::new(),
                done: None,
            });
        }
        if self.running.as_ref().is_some_and(|r| r.done.is_some()) {
            // The native repetition had fewer parts: this one stays unpaired.
            return;
        }
        let step = if same {
            worker.next()
        } else {
            worker.start(key)
        };
        match (step, self.running.as_mut()) {
            (Some(Step::Part(native)), Some(run)) => run.parts.push((guest, native)),
            (Some(Step::Done(out)), Some(run)) => run.done = Some(out),
            (Some(_), None) => {}
            (None, _) => self.native_gone(),
        }
    }

    /// The guest finished a repetition; its record is at `addr`. Lets the
    /// native repetition of the same row run to its end (all of it, when
    /// the guest signalled no parts) and keeps the pair.
    pub fn on_rep(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        let (Some(w), true) = (read_words(mem, addr), self.pairs.len() < MAX_PAIRS) else {
            self.ignored += 1;
            return;
        };
        let guest = RepRecord {
            key: w[0] as u32,
            rep: (w[0] >> 32) as u32,
            work: w[1],
            cycles: w[2],
            digest: w[3],
        };
        let (Some(key), Some(worker)) = (RowKey::decode(guest.key), self.worker.as_ref()) else {
            self.ignored += 1;
            return;
        };
        let held = match self.running.take() {
            Some(r) if r.key == key && r.rep == guest.rep => Some(r),
            Some(other) => {
                // The end of a repetition other than the one held (a guest
                // that mixed up its signals): the held one ends unpaired.
                if other.done.is_none() && finish(worker).is_none() {
                    self.native_gone();
                    return;
                }
                None
            }
            None => None,
        };
        let (native, parts) = match held {
            Some(Running {
                done: Some(out),
                parts,
                ..
            }) => (Some(out), parts),
            Some(Running { parts, .. }) => (finish(worker), parts),
            None if self.started >= MAX_PAIRS => {
                self.ignored += 1;
                return;
            }
            None => {
                // No parts signalled: the whole native repetition now.
                self.started += 1;
                let out = match worker.start(key) {
                    Some(Step::Done(out)) => Some(out),
                    Some(Step::Part(_)) => finish(worker),
                    None => None,
                };
                (out, Vec::new())
            }
        };
        let Some(native) = native else {
            self.native_gone();
            return;
        };
        self.pairs.push(RepPair {
            key,
            guest,
            native,
            parts,
        });
    }

    /// The native thread died (a panic in the VMM's build): no more pairs.
    fn native_gone(&mut self) {
        self.worker = None;
        self.running = None;
        self.ignored += 1;
    }
}

/// The four little-endian words of a [`PartRecord`] or [`RepRecord`] (both
/// 32 bytes) at guest-physical `addr`; `None` outside RAM.
fn read_words(mem: &GuestMemoryMmap, addr: u64) -> Option<[u64; 4]> {
    const _: () = assert!(PartRecord::SIZE == 32 && RepRecord::SIZE == 32);
    let mut raw = [0u8; 32];
    mem.read_slice(&mut raw, GuestAddress(addr)).ok()?;
    Some(core::array::from_fn(|i| {
        u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().unwrap_or_default())
    }))
}

/// Let the held native repetition run to its end (its parts past the
/// guest's are not paired); its result, or `None` if the thread is gone.
fn finish(worker: &Worker) -> Option<NativeRowOut> {
    loop {
        match worker.next()? {
            Step::Part(_) => continue,
            Step::Done(out) => return Some(out),
        }
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
impl crate::devices::NativeSide for Interleaver {
    fn reps(&self) -> u32 {
        self.reps
    }

    fn wants_parts(&self) -> bool {
        Interleaver::wants_parts(self)
    }

    fn on_rep(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        Interleaver::on_rep(self, mem, addr);
    }

    fn on_part(&mut self, mem: &GuestMemoryMmap, addr: u64) {
        Interleaver::on_part(self, mem, addr);
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// What a run starts the native side with once the guest's TSC rate is
/// known ([`crate::run::RunConfig::interleave`]): `reps` pairs of every row
/// of `workload`, the guest `kernel`'s own code, scratch memory backed as
/// guest RAM is (`backing`).
pub fn starter(
    workload: Selection,
    reps: u32,
    kernel: std::borrow::Cow<'static, [u8]>,
    backing: Option<crate::vstate::RamBacking>,
) -> crate::run::config::StartNative {
    Box::new(move |tsc_khz| {
        Interleaver::new(workload, reps, tsc_khz, &kernel, backing)
            .map(|n| Box::new(n) as Box<dyn crate::devices::NativeSide>)
            .map_err(|e| e.to_string())
    })
}

/// The interleaver a run carried, if it carried this one.
pub fn of(native: Option<&dyn crate::devices::NativeSide>) -> Option<&Interleaver> {
    native.and_then(|n| n.as_any().downcast_ref::<Interleaver>())
}
