//! Restoring a snapshot in a fresh VM.
//!
//! Guest memory is not copied: the page index (`memory`) is read and
//! checksummed with the other sections, and the stored pages
//! (`memory.pages`, page-aligned in the file) are mapped privately into
//! guest RAM (`Machine::create_smp_from_image` in `vstate::machine`), so the time to the first
//! `KVM_RUN` does not grow with the guest's size or the pages stored.
//!
//! Integrity, decided: the header, the section table and every section but
//! `memory.pages` are verified (CRC32) before any VM exists, and the
//! table's bounds are checked against the file's length, so every mapped
//! page lies inside the file. The pages' own CRC32 (stored in the table as
//! for every section) is *not* computed by default, since that would read
//! every stored page before the guest runs; `vmm restore --verify-memory`
//! computes it first (reading the pages once, through the page cache the
//! mapping then shares), and `vmm snapshot info` always does. A corrupted
//! page otherwise reaches the guest as it is in the file.
//!
//! Everything that can be checked is checked before a VM exists: the file
//! is opened as a regular file of bounded size ([`crate::input`]), its
//! header and section table are checked before any section is read, then
//! the sections (the stored pages left in the file) and their decoding
//! ([`open`]); then THE
//! validation `vmm snapshot info` also reports ([`validate`], see
//! `crate::snapshot::compat`). Only then is the VM built from the [`Validated`]
//! state, and handed to [`crate::vstate`] to run as a booted one would be.
//! Should KVM still refuse a state, the error names the ioctl, the vCPU,
//! the section and the fields that commonly cause it.
//!
//! The vCPU is loaded in the order KVM needs: CPUID (KVM sizes the guest's
//! xsave state from it), special registers (mode, paging, EFER) before the
//! general registers, XCRs before the xsave image (KVM refuses components
//! the XCR0 in force lacks), MSRs (IA32_XSS before supervisor state; the
//! TSC last), events, MP state, debug registers, and finally the xsave
//! image: the compacted in-use state re-laid out for this host's standard
//! offsets and handed to the xstate manager, which validates it against the
//! guest's XCR0 before `KVM_SET_XSAVE[2]`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::devices::SerialSink;
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::run::launch::{check_snapshot_options, execute};
use crate::run::outcome::RunOutcome;
use crate::run::prepared::Launch;
pub use crate::snapshot::compat::{check, validate, Checked, HostFacts, Validated};
pub use crate::snapshot::error::SnapshotError;
use crate::snapshot::load::{load_irqchip, load_vcpu, restored_devices};
pub use crate::snapshot::load::{load_mapped, open, verify_pages, Opened, MAX_SNAPSHOT_BYTES};
use crate::snapshot::save::SaveContext;
use crate::snapshot::state::Snapshot;
use crate::vstate::machine::{Ap, Machine, RamImage};

use crate::xstate_manager::{SyncPolicy, XstateManager};

/// `vmm restore` options.
pub struct RestoreOptions {
    /// Where the guest's serial output goes from now on.
    pub serial: SerialSink,
    /// Stop the restored guest after this long.
    pub timeout: Option<Duration>,
    /// `None`: the policy the snapshot was taken with.
    pub xstate_sync: Option<SyncPolicy>,
    /// Snapshot the restored guest again (see `vmm run`).
    pub snapshot_after: Option<Duration>,
    /// Where that snapshot goes.
    pub snapshot_file: Option<PathBuf>,
    /// Replace a regular file already at `snapshot_file` (`--force`).
    pub snapshot_force: bool,
    /// Check the stored pages' CRC32 before the guest runs
    /// (`--verify-memory`; see the module documentation).
    pub verify_memory: bool,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        Self {
            serial: SerialSink::Stdout,
            timeout: Some(Duration::from_secs(600)),
            xstate_sync: None,
            snapshot_after: None,
            snapshot_file: None,
            snapshot_force: false,
            verify_memory: false,
        }
    }
}

/// Load, validate and run a snapshot in a new VM.
pub fn restore(
    path: &Path,
    opts: RestoreOptions,
) -> std::result::Result<RunOutcome, SnapshotError> {
    let start = Instant::now();
    let (snap, file) = load_mapped(path)?;
    if opts.verify_memory {
        verify_pages(path, &snap, &file)?;
    }
    let vmm_err = |source: Error| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    };
    // A policy with AMX tile data needs the host's permission before KVM's
    // table is read. Refused, KVM's table lacks the tiles and the
    // validation below refuses the snapshot, naming the state; the
    // kernel's answer is printed first.
    if let Err(e) = crate::arch::amx::permit_policy(snap.meta.policy()) {
        eprintln!("vmm: warning: dynamic xfeature: {e}");
    }
    // System ioctls only (KVM_GET_SUPPORTED_CPUID, ...): no VM yet.
    let host = HostKvm::open().map_err(vmm_err)?;
    let validated = validate(path, &snap, &host)?;
    let launch = build(&snap, validated, &host, &opts, start, Some(&file)).map_err(vmm_err)?;
    execute(launch).map_err(vmm_err)
}

/// Build the VM of a validated snapshot, ready to run. Stored pages left
/// in the file ([`load_mapped`]) are mapped from `file`; pages read are
/// written into fresh RAM.
pub(crate) fn build(
    snap: &Snapshot,
    validated: Validated,
    host: &HostKvm,
    opts: &RestoreOptions,
    start: Instant,
    file: Option<&File>,
) -> Result<Launch> {
    check_snapshot_options(opts.snapshot_after, opts.snapshot_file.as_deref())?;
    if let Some(path) = &opts.snapshot_file {
        crate::snapshot::save::check_destination(path, opts.snapshot_force)?;
    }
    let meta = &snap.meta;
    let v = &snap.vcpus[0];
    let Validated {
        checked,
        mut policy,
        guest: resolved,
    } = validated;

    let (mut machine, ap_fds) = build_machine(snap, host, checked.irqchip, file)?;

    let tsc_khz = load_vcpu(&machine.vcpu, v, meta.tsc_khz, &resolved, &mut policy)?;
    // XFD after the CPUID that gives the guest XFD, before the xsave image.
    let listed = host
        .kvm
        .get_msr_index_list()
        .map_err(Error::kvm("KVM_GET_MSR_INDEX_LIST"))?;
    crate::vstate::xfd::restore(
        &machine.vcpu,
        v.xfd,
        crate::vstate::xfd::supported(listed.as_slice()),
    )?;

    // The xsave image last, through the manager's validation.
    let sync = opts.xstate_sync.unwrap_or(checked.sync);
    let mut xstate = XstateManager::new(sync, host.xstate.info, policy.xcr0, host.xsave2_size);
    xstate.replace_standard(&checked.standard)?;
    xstate.before_run(&machine.vcpu)?;

    // The APs the same way, each with its own xstate manager.
    let xfd_supported = crate::vstate::xfd::supported(listed.as_slice());
    for ((fd, state), c) in ap_fds
        .into_iter()
        .zip(&snap.vcpus[1..])
        .zip(&checked.vcpus[1..])
    {
        let xstate = load_ap(
            &fd,
            state,
            c,
            (meta.tsc_khz, sync, xfd_supported),
            &resolved,
            &policy,
            host,
        )?;
        machine.aps.push(Ap { vcpu: fd, xstate });
    }
    if let Some(irq) = &snap.irqchip {
        load_irqchip(&machine.vm, irq)?;
    }

    let devices = restored_devices(opts.serial, meta)?;
    let snapshot = match &opts.snapshot_file {
        Some(p) => Some(SaveContext {
            force: opts.snapshot_force,
            ..SaveContext::new(
                host,
                p.clone(),
                meta.mem_mib,
                meta.cmdline.clone(),
                &policy,
                sync,
                tsc_khz,
                v.cpuid.clone(),
            )?
        }),
        None => None,
    };
    Ok(Launch {
        machine,
        devices,
        earlier_serial: snap.serial_output.clone(),
        xstate,
        policy,
        tsc_khz,
        timeout: opts.timeout,
        snapshot_after: opts.snapshot_after,
        snapshot,
        raw: false,
        start,
        setup_time: start.elapsed(),
        boot: None,
    })
}

/// The VM of a snapshot with its RAM: several vCPUs get the irqchip the
/// source VM had first, then every vCPU (see `Machine::create_smp` and
/// `vstate::smp`); one vCPU, the VM it always was. Stored pages left in
/// `file` are mapped from it, not copied; pages read are written.
fn build_machine(
    snap: &Snapshot,
    host: &HostKvm,
    irqchip: crate::vstate::smp::Irqchip,
    file: Option<&File>,
) -> Result<(Machine, Vec<kvm_ioctls::VcpuFd>)> {
    let mem_mib = snap.meta.mem_mib;
    crate::run::launch::check_phys_bits(host, mem_mib)?;
    let vcpus = snap.vcpus.len() as u32;
    let (machine, ap_fds) = match (&snap.memory.in_file, file) {
        (Some(pages), Some(file)) => {
            let runs = snap
                .memory
                .placed_runs()
                .map(|(addr, at, len)| (addr, pages.offset + at, len))
                .collect();
            let image = RamImage { file, runs };
            Machine::create_smp_from_image(&host.kvm, mem_mib, vcpus, irqchip, &image)?
        }
        (Some(_), None) => return Err(MemoryError::Layout.into()),
        (None, _) => Machine::create_smp(&host.kvm, mem_mib, vcpus, irqchip)?,
    };
    snap.memory
        .apply(|offset, data| crate::vstate::machine::write_ram(&machine.mem, offset, data))?;
    Ok((machine, ap_fds))
}

/// Load an application processor as the boot one was: its registers,
/// its XFD MSRs, and its xsave image through a manager of its own, which
/// is returned. `(tsc_khz, sync, xfd)`: the saved TSC rate, the sync
/// policy, and whether KVM has the XFD MSRs.
fn load_ap(
    fd: &kvm_ioctls::VcpuFd,
    state: &crate::snapshot::state::VcpuState,
    checked: &crate::snapshot::compat::VcpuChecked,
    (tsc_khz, sync, xfd): (u32, SyncPolicy, bool),
    resolved: &crate::cpuid::GuestCpuid,
    policy: &crate::cpuid::Policy,
    host: &HostKvm,
) -> Result<XstateManager> {
    let mut ap_policy = policy.clone();
    load_vcpu(fd, state, tsc_khz, resolved, &mut ap_policy)?;
    crate::vstate::xfd::restore(fd, state.xfd, xfd)?;
    let mut xstate = XstateManager::new(sync, host.xstate.info, policy.xcr0, host.xsave2_size);
    xstate.replace_standard(&checked.standard)?;
    xstate.before_run(fd)?;
    Ok(xstate)
}

#[cfg(test)]
mod tests;
