//! A machine ready to run, as booting ([`super::launch::run`]) and
//! restoring ([`super::restore`]) hand it over, and what the run loops need
//! of it: the boot's clock (where the guest's first instruction falls on the
//! VMM's), the monotonic clock other processes share, the serial bound.

use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::arch::boot::BootEntry;
use crate::arch::layout::BOOT_TSC_ADDR;
use crate::cpuid::Policy;
use crate::devices::{Devices, SERIAL_CAPTURE_MAX};
use crate::snapshot::save::SaveContext;
use crate::vstate::machine::Machine;
use crate::vstate::vcpu;
use crate::xstate_manager::XstateManager;

/// A configured machine, ready to run: what booting and restoring hand to
/// [`super::launch::execute`].
pub(crate) struct Launch {
    /// VM, RAM and vCPU, loaded.
    pub machine: Machine,
    /// The port bus.
    pub devices: Devices,
    /// Serial output from before a restore (not printed again).
    pub earlier_serial: Vec<u8>,
    /// The guest's xsave state and its sync policy.
    pub xstate: XstateManager,
    /// The xstate policy, for the outcome.
    pub policy: Policy,
    /// The guest's TSC rate.
    pub tsc_khz: u32,
    /// Stop the guest after this long.
    pub timeout: Option<Duration>,
    /// Snapshot the guest after this long (needs `snapshot`).
    pub snapshot_after: Option<Duration>,
    /// Where and how to write a snapshot, when one may be taken.
    pub snapshot: Option<SaveContext>,
    /// Run the raw benchmark loop.
    pub raw: bool,
    /// When the run (or restore) began.
    pub start: Instant,
    /// How long building the machine took.
    pub setup_time: Duration,
    /// How a booted guest was started (`None` after a restore).
    pub boot: Option<BootClock>,
    /// A restore's stored pages, when they come in on demand or were read
    /// by [`crate::snapshot::pager`] (`None` for a boot).
    pub pages: Option<crate::snapshot::pager::Pages>,
}

/// A TSC anchor read within this is taken as it is ([`BootClock::new`]).
const ANCHOR_WINDOW: Duration = Duration::from_micros(50);
/// Reads of the anchor at most.
const ANCHOR_TRIES: usize = 4;

/// How a booted guest was started, and what places its first instruction
/// on the VMM's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BootClock {
    /// The entry the vCPU started at.
    pub(super) entry: BootEntry,
    /// The guest's TSC (`KVM_GET_MSRS` IA32_TSC) and the VMM's clock read
    /// together before the first `KVM_RUN`; `None` when KVM would not say.
    anchor: Option<(Instant, u64)>,
}

impl BootClock {
    /// Read the anchor: the guest TSC runs at `tsc_khz` from here on
    /// whether or not the vCPU runs, so one pair converts any later guest
    /// TSC value into the VMM's time.
    ///
    /// The TSC read is bracketed by two clock reads and placed at their
    /// midpoint: a thread preempted between reading one and the other
    /// (a loaded host) would otherwise put every later guest time late by
    /// the preemption. A bracket wider than [`ANCHOR_WINDOW`] is read again
    /// (a few times at most), keeping the tightest.
    pub(super) fn new(entry: BootEntry, vcpu: &kvm_ioctls::VcpuFd) -> Self {
        let mut anchor: Option<(Instant, Duration, u64)> = None;
        for _ in 0..ANCHOR_TRIES {
            let before = Instant::now();
            let Ok((values, _)) = vcpu::get_msrs(vcpu, &[MSR_IA32_TSC]) else {
                break;
            };
            let window = before.elapsed();
            let Some(&(_, tsc)) = values.first() else {
                break;
            };
            if anchor.is_none_or(|(_, best, _)| window < best) {
                anchor = Some((before + window / 2, window, tsc));
            }
            if window <= ANCHOR_WINDOW {
                break;
            }
        }
        Self {
            entry,
            anchor: anchor.map(|(at, _, tsc)| (at, tsc)),
        }
    }

    /// When the guest ran its first instruction, after `start`: the TSC
    /// the direct entry wrote at [`BOOT_TSC_ADDR`] (0: not written, or
    /// the PVH entry, which has no slot), on the anchor's clock.
    pub(super) fn first_instruction(
        &self,
        mem: &GuestMemoryMmap,
        start: Instant,
        tsc_khz: u32,
    ) -> Option<Duration> {
        let BootEntry::Direct64(_) = self.entry else {
            return None;
        };
        let (at, anchor_tsc) = self.anchor?;
        let tsc: u64 = mem.read_obj(GuestAddress(BOOT_TSC_ADDR)).ok()?;
        if tsc == 0 || tsc_khz == 0 {
            return None;
        }
        let ticks = tsc.checked_sub(anchor_tsc)?;
        let after_anchor =
            Duration::from_nanos(ticks.saturating_mul(1_000_000) / u64::from(tsc_khz));
        Some((at + after_anchor).saturating_duration_since(start))
    }
}

/// Keep the last [`SERIAL_CAPTURE_MAX`] bytes of a run's serial output;
/// returns how many were cut.
pub(super) fn keep_last_serial(serial: &mut Vec<u8>) -> u64 {
    let cut = serial.len().saturating_sub(SERIAL_CAPTURE_MAX);
    serial.drain(..cut);
    cut as u64
}

/// The IA32_TSC MSR: the guest's time-stamp counter.
const MSR_IA32_TSC: u32 = 0x10;

/// `start` as a `CLOCK_MONOTONIC` reading in nanoseconds (what `Instant`
/// measures on Linux), so another process can place this run on its own
/// clock: `vmm bench startup` subtracts the moment it spawned us.
pub(super) fn monotonic_ns(start: Instant) -> u64 {
    let now = Instant::now();
    monotonic_now_ns().saturating_sub(now.saturating_duration_since(start).as_nanos() as u64)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (0 if the clock cannot be read).
pub(crate) fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
