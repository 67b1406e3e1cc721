//! The boot-time calibration: every supported save strategy measured a few
//! times and the fastest chosen, so the guest's context switches use what
//! is cheapest on the CPU the VMM presents.

use xstate::InitMode;

use super::{run, Profile, Strategy};
use crate::bench::Env;

/// What the boot calibration measured and chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// Minimum over the trials of TSC cycles per switch, per strategy in
    /// [`Strategy::ALL`] order; `None` when unsupported or failed.
    pub cycles: [Option<u64>; 4],
    /// The strategy chosen by [`choose`].
    pub choice: Option<Strategy>,
    /// TSC cycles the calibration took in all.
    pub total_cycles: u64,
}

/// Picks the strategy with the fewest cycles per switch (the first of
/// equals in [`Strategy::ALL`] order); `None` when nothing was measured.
/// The choice is the fastest measured, so within any tolerance of it.
pub fn choose(cycles: &[Option<u64>; 4]) -> Option<Strategy> {
    Strategy::ALL
        .iter()
        .zip(cycles)
        .filter_map(|(s, c)| c.map(|c| (*s, c)))
        .min_by_key(|&(_, c)| c)
        .map(|(s, _)| s)
}

/// Trials per strategy in [`calibrate`].
pub const CALIBRATION_TRIALS: u32 = 7;
/// Activations per trial in [`calibrate`].
pub const CALIBRATION_ACTIVATIONS: u64 = 255;

/// The boot-time chooser: every supported strategy, SSE contexts started
/// from the minimal initial state, [`CALIBRATION_TRIALS`] trials of
/// [`CALIBRATION_ACTIVATIONS`] activations, interleaved across strategies
/// so that drift (frequency, a noisy neighbour) hits them alike; each
/// strategy's figure is its fastest trial. About 7 x 4 x 256 switches: well
/// under a millisecond at a few hundred cycles each.
///
/// A trial whose contexts did not get their own state back disqualifies
/// the strategy.
pub fn calibrate(env: &Env, scratch: &mut [u8]) -> Calibration {
    let t0 = rdtsc();
    let mut cycles = [None; 4];
    let mut failed = [false; 4];
    for _ in 0..CALIBRATION_TRIALS {
        for s in Strategy::ALL {
            let k = s as usize;
            if failed[k] {
                continue;
            }
            match run(
                env,
                s,
                Profile::Sse,
                InitMode::Minimal,
                CALIBRATION_ACTIVATIONS,
                scratch,
            ) {
                Ok(m) if m.state_ok => {
                    let c = m.cycles_per_switch();
                    cycles[k] = Some(cycles[k].map_or(c, |old: u64| old.min(c)));
                }
                _ => {
                    failed[k] = true;
                    cycles[k] = None;
                }
            }
        }
    }
    Calibration {
        cycles,
        choice: choose(&cycles),
        total_cycles: rdtsc().wrapping_sub(t0),
    }
}

fn rdtsc() -> u64 {
    crate::workloads::timing::rdtsc_fenced()
}
