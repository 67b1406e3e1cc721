//! Restoring a snapshot in a fresh VM.
//!
//! Guest memory: the page index (`memory`) and the pages' checksums
//! (`memory.crc32`) are read and checksummed with the other sections; the
//! stored pages themselves (`memory.pages`) are copied into anonymous RAM
//! by `crate::snapshot::pager`, each checked against its CRC32 before the
//! guest can read it: on demand (the first `KVM_RUN` waits for none of
//! them, the file is leased until the last is in), or all before the first
//! `KVM_RUN` with `--verify-memory` or where on demand is not possible.
//! Nothing done to the file after the restore began reaches the guest, and
//! the report keeps what it needs of the snapshot ([`Restored`]) instead
//! of reading the file again. A page that fails ends the restore with its
//! own status (69), naming the page and the section, never blaming the
//! guest.
//!
//! Everything that can be checked is checked before a VM exists: the file
//! is opened as a regular file of bounded size (`crate::input`), its
//! header and section table are checked before any section is read, then
//! the sections (the stored pages left in the file) and their decoding
//! ([`open`]); then THE
//! validation `vmm snapshot info` also reports ([`validate`], see
//! `crate::snapshot::compat`). Only then is the VM built from the [`Validated`]
//! state, and handed to `crate::vstate` to run as a booted one would be.
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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::devices::SerialSink;
use crate::error::{Error, Result};
use crate::kvm::HostKvm;
use crate::run::execute::execute;
use crate::run::launch::check_snapshot_options;
use crate::run::outcome::RunOutcome;
use crate::run::prepared::Launch;
pub use crate::snapshot::compat::{check, validate, Checked, HostFacts, Validated};
pub use crate::snapshot::error::SnapshotError;
use crate::snapshot::load::{load_irqchip, load_vcpu, restored_devices};
pub use crate::snapshot::load::{load_mapped, open, verify_pages, Opened, MAX_SNAPSHOT_BYTES};
use crate::snapshot::pager::{PageSource, Pages};
use crate::snapshot::save::SaveContext;
use crate::snapshot::state::Snapshot;
use crate::vstate::machine::{allocate_ram, Ap, Machine};

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
    /// Read and check every stored page before the first `KVM_RUN`
    /// (`--verify-memory`), not on demand (see the module documentation).
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

/// A restored run and what its report needs of the snapshot, kept during
/// the restore so the file is never read again.
pub struct Restored {
    /// The run.
    pub outcome: RunOutcome,
    /// When the snapshot was written (its `meta.created_unix_s`).
    pub created_unix_s: u64,
    /// The command line the guest booted with.
    pub cmdline: String,
    /// What made the snapshot (`meta.trigger`: a deadline, a guest request,
    /// a guest point).
    pub trigger: String,
    /// The guest's report record as the snapshot held it, (guest address,
    /// bytes) (`Pages::kept`).
    pub memory: Vec<(u64, Vec<u8>)>,
    /// How the stored pages reached RAM.
    pub pages: Option<Pages>,
}

/// Load, validate and run a snapshot in a new VM.
///
/// # Errors
/// As [`restore_keeping`].
pub fn restore(
    path: &Path,
    opts: RestoreOptions,
) -> std::result::Result<RunOutcome, SnapshotError> {
    restore_keeping(path, opts).map(|r| r.outcome)
}

/// [`restore`], keeping what the report needs of the snapshot.
///
/// # Errors
/// The file refused (unreadable, malformed, a checksum), a state this host
/// cannot hold, KVM refusing it, and [`SnapshotError::Memory`]: a stored
/// page that failed while the pages were read up front (a page failing
/// on demand ends the run instead, [`RunEnd::SnapshotMemory`](crate::run::RunEnd)).
pub fn restore_keeping(
    path: &Path,
    opts: RestoreOptions,
) -> std::result::Result<Restored, SnapshotError> {
    let start = Instant::now();
    let (snap, file, leased) = load_mapped(path)?;
    let vmm_err = |source: Error| SnapshotError::Vmm {
        path: path.to_path_buf(),
        source,
    };
    // A policy with AMX tile data needs the host's permission before KVM's
    // table is read. Refused, KVM's table lacks the tiles and the
    // validation below refuses the snapshot, naming the state; the
    // kernel's answer is printed first.
    if let Err(e) = crate::arch::amx::permit_policy(snap.meta.policy()) {
        crate::output::terminal::line(format_args!("vmm: warning: dynamic xfeature: {e}"));
    }
    // System ioctls only (KVM_GET_SUPPORTED_CPUID, ...): no VM yet.
    let host = HostKvm::open().map_err(vmm_err)?;
    let validated = validate(path, &snap, &host)?;
    // Guest RAM first, the pages put in (or armed to come in on demand).
    let ram = allocate_ram(snap.meta.mem_mib).map_err(vmm_err)?;
    let pages =
        match PageSource::new(file, leased, &snap.memory) {
            Some(source) => Some(source.fill(&ram, opts.verify_memory).map_err(|source| {
                SnapshotError::Memory {
                    path: path.to_path_buf(),
                    source,
                }
            })?),
            None => None,
        };
    let mut launch = build(&snap, validated, &host, &opts, start, Some(ram)).map_err(vmm_err)?;
    launch.pages = pages.clone();
    let mut outcome = execute(launch).map_err(vmm_err)?;
    // A restored Linux is held to its x86/fpu lines as a booted one is.
    if snap.meta.platform() == Some(crate::arch::boot::Platform::Pc) {
        let xsaves = crate::run::linux_xstate::guest_has_xsaves(&snap.vcpus[0].cpuid);
        crate::run::linux_xstate::linux_oracle(&mut outcome, &host.xstate.info, xsaves);
    }
    let memory = match &pages {
        // The pager is done by now unless the run was very short.
        Some(p) => p.wait().map(|()| p.kept()).unwrap_or_default(),
        None => Vec::new(),
    };
    Ok(Restored {
        outcome,
        created_unix_s: snap.meta.created_unix_s,
        cmdline: snap.meta.cmdline.clone(),
        trigger: snap.meta.trigger.clone(),
        memory,
        pages,
    })
}

/// Build the VM of a validated snapshot, ready to run, on `ram` (guest RAM
/// the caller allocated and filled, [`crate::snapshot::pager`]) or on
/// fresh RAM the snapshot's pages (read with the other sections) are
/// written into.
pub(crate) fn build(
    snap: &Snapshot,
    validated: Validated,
    host: &HostKvm,
    opts: &RestoreOptions,
    start: Instant,
    ram: Option<vm_memory::GuestMemoryMmap>,
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

    let (mut machine, ap_fds) = build_machine(snap, host, checked.irqchip, ram)?;

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

    let devices = restored_devices(opts.serial, meta, &machine.vm)?;
    let snapshot = match &opts.snapshot_file {
        Some(p) => Some(SaveContext {
            force: opts.snapshot_force,
            platform: meta
                .platform()
                .unwrap_or(crate::arch::boot::Platform::Minimal),
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
        pages: None,
    })
}

/// The VM of a snapshot with its RAM: several vCPUs get the irqchip the
/// source VM had first, then every vCPU (see `Machine::create_smp` and
/// `vstate::smp`); one vCPU, the VM it always was. On `ram` when given
/// (its pages already the pager's); else on fresh RAM, with the pages
/// read with the other sections written into it.
fn build_machine(
    snap: &Snapshot,
    host: &HostKvm,
    irqchip: crate::vstate::smp::Irqchip,
    ram: Option<vm_memory::GuestMemoryMmap>,
) -> Result<(Machine, Vec<kvm_ioctls::VcpuFd>)> {
    let mem_mib = snap.meta.mem_mib;
    crate::run::launch::check_phys_bits(host, mem_mib)?;
    let vcpus = snap.vcpus.len() as u32;
    let (machine, ap_fds) = match ram {
        Some(ram) => Machine::create_smp_on(&host.kvm, ram, vcpus, irqchip)?,
        None => Machine::create_smp(&host.kvm, mem_mib, vcpus, irqchip)?,
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
