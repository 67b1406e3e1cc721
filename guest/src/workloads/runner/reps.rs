//! Repetitions of a row, and who hears about each one: the guest kernel
//! signals every repetition to its VMM ([`crate::protocol::rep`]), which
//! times the same row natively in between; the native side and tests hear
//! nothing ([`NoReps`]).

use crate::protocol::RepRecord;

/// Told about each timed repetition of a row.
pub trait RepHook {
    /// Repetitions each row gets (at least 1).
    fn reps(&self) -> u32;
    /// One repetition of a row is done.
    fn rep_done(&mut self, record: &RepRecord);
}

/// One repetition per row, nobody told.
pub struct NoReps;

impl RepHook for NoReps {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, _: &RepRecord) {}
}

/// Keeps the last repetition (the native entry point's answer).
#[derive(Default)]
pub(super) struct LastRep(pub(super) Option<RepRecord>);

impl RepHook for LastRep {
    fn reps(&self) -> u32 {
        1
    }
    fn rep_done(&mut self, record: &RepRecord) {
        self.0 = Some(*record);
    }
}
