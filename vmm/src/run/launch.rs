//! One guest run, start to end: boot a kernel into a new machine
//! ([`run`]), or run a machine restore has filled ([`execute`]), under the
//! supervisor, and collect what the guest reported.

use std::path::Path;
use std::time::{Duration, Instant};

use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;
use xstate::XfeatureMask;

use super::config::{RunConfig, Xfeatures};
use super::execute::execute;
use super::outcome::RunOutcome;
use super::prepared::{BootClock, Launch};
use crate::arch::boot::{self, Platform};
use crate::arch::layout::{MAX_MEM_MIB, MIN_MEM_MIB};
use crate::arch::{acpi, mptable};
use crate::cpuid::{validate_policy, GuestCpuid, Policy};
use crate::devices::{Devices, SerialIrq};
use crate::error::{Error, MemoryError, Result};
use crate::kvm::HostKvm;
use crate::snapshot::save::{self, SaveContext};
use crate::vstate::machine::{Ap, Machine, VmWithVcpus};
use crate::vstate::vcpu;
use crate::vstate::RamBacking;
use crate::vstate::{pc, smp};
use crate::xstate_manager::XstateManager;

/// Boot a guest and run it to the end.
pub fn run(mut config: RunConfig) -> Result<RunOutcome> {
    let start = Instant::now();
    let plan = check_request(&config)?;
    let platform = plan.platform();
    let initrd = initrd_place(&config, &plan)?;
    // The VM and its vCPUs are built and the kernel is loaded into the RAM
    // on this thread while another reads KVM's CPUID table: none of it
    // depends on the table (see `HostKvm::open_overlapping`).
    let ram = crate::vstate::machine::allocate_ram_backed(config.mem_mib, config.hugepages)?;
    // Before anything touches guest RAM, so the kernel load faults in huge
    // pages already (hugetlbfs RAM is huge pages already).
    let hugepages = config.hugepages.map(|b| (b, advise(&ram, b)));
    let (host, (mut machine, ap_fds), kernel, xcr0) =
        build_and_load(&mut config, &ram, &plan, platform)?;
    // The CPU count reaches the guest through the MP table (below), as
    // on a PC; a `cpus=` word of the caller's still overrides it.
    let cmdline = with_xfeatures_hint(&config.cmdline, xcr0);
    if let (Some(image), Some(at)) = (&config.initrd, initrd) {
        load_initrd(&machine.mem, image, at.0)?;
    }
    // A PC guest's ACPI tables (written below) start with the RSDP there.
    let rsdp = (platform == Platform::Pc).then_some(acpi::RSDP_ADDR);
    boot::write_boot_info(&machine.mem, &cmdline, &kernel, initrd, rsdp)?;
    let entry = kernel.boot_entry(config.entry);

    // The TSC rate is a vCPU property; it goes into the guest's CPUID so the
    // guest converts cycles to time without calibrating.
    let tsc_khz = machine.vcpu.get_tsc_khz().unwrap_or(0);
    let (mut policy, guest_cpuid) = Policy::resolve(&host, xcr0, config.init_xstate, tsc_khz)?;
    let check = vcpu::configure_boot_vcpu(
        &machine.vcpu,
        &machine.mem,
        entry,
        &guest_cpuid,
        &host.xstate.info,
        config.init_xstate,
        host.xsave2_size,
    )?;
    policy.cpuid_check = Some(check);
    // One vCPU too: a guest that finds no table searches all of 0xf0000..
    // 0x100000 for one, a fault on each of its 16 pages.
    write_mptable(&machine, &guest_cpuid, config.vcpus)?;
    if platform == Platform::Pc {
        acpi::write(&machine.mem, config.vcpus)?;
    }
    let xsaves = super::linux_xstate::guest_has_xsaves(guest_cpuid.cpuid.as_slice());
    let ap_start = configure_aps(&mut machine, ap_fds, &guest_cpuid, &host, &policy, &config)?;
    let snapshot = match &config.snapshot_file {
        Some(path) => Some(SaveContext {
            force: config.snapshot_force,
            platform,
            ..SaveContext::new(
                &host,
                path.clone(),
                config.mem_mib,
                cmdline,
                &policy,
                config.xstate_sync,
                tsc_khz,
                guest_cpuid.cpuid.as_slice().to_vec(),
            )?
        }),
        None => None,
    };
    let boot = BootClock::new(entry, &machine.vcpu);
    let mut devices = platform_devices(platform, &machine.vm, config.serial)?;
    if let Some(start_native) = config.interleave.take() {
        devices.native = Some(start_native(u64::from(tsc_khz)).map_err(Error::Argument)?);
    }
    let setup_time = start.elapsed();
    let mut outcome = execute(Launch {
        machine,
        devices,
        earlier_serial: Vec::new(),
        xstate: XstateManager::new(
            config.xstate_sync,
            host.xstate.info,
            policy.xcr0,
            host.xsave2_size,
        ),
        policy,
        tsc_khz,
        timeout: config.timeout,
        snapshot_after: config.snapshot_after,
        snapshot,
        raw: config.raw_loop,
        start,
        setup_time,
        boot: Some(boot),
        pages: None,
    })?;
    outcome.hugepages = hugepages
        .map(|(backing, advised)| hugepages_record(&ram, backing, advised, config.mem_mib));
    outcome.ap_start = ap_start;
    if platform == Platform::Pc {
        super::linux_xstate::linux_oracle(&mut outcome, &host.xstate.info, xsaves);
    }
    drop(ram);
    Ok(outcome)
}

/// The port bus for `platform`: a PC (a Linux guest) gets the in-kernel
/// PIT, COM1 on IRQ 4 and the i8042 reset; the minimal platform a polled
/// COM1 and nothing more.
fn platform_devices(
    platform: Platform,
    vm: &kvm_ioctls::VmFd,
    sink: crate::devices::SerialSink,
) -> Result<Devices> {
    Ok(match platform {
        Platform::Minimal => Devices::with_serial_irq(sink, SerialIrq::Polled),
        Platform::Pc => {
            pc::create_pit(vm)?;
            let mut devices = Devices::with_serial_irq(sink, pc::serial_irq(vm)?);
            devices.i8042 = true;
            devices
        }
    })
}

/// Everything about a run request that can be refused before KVM is
/// opened: the image first (a bad one never opens KVM, let alone creates a
/// VM it could corrupt), the snapshot options and destination, the
/// command-line words the VMM owns. Returns the image's load plan.
fn check_request(config: &RunConfig) -> Result<boot::KernelPlan> {
    let ram_bytes = ram_bytes(config.mem_mib)?;
    let plan = boot::check_kernel(&config.kernel.bytes, &config.kernel.name, ram_bytes)?;
    // Dynamic xfeatures (AMX) need the host's permission before KVM's table
    // and KVM_CAP_XSAVE2 are read and before any vCPU exists; a resolved
    // `--xfeatures` asked for it already.
    if matches!(config.xfeatures, Xfeatures::Kvm) {
        crate::arch::amx::permit_guest(None)?;
    }
    check_snapshot_options(config.snapshot_after, config.snapshot_file.as_deref())?;
    if let Some(path) = &config.snapshot_file {
        save::check_destination(path, config.snapshot_force)?;
    }
    // The policy also travels on the command line: where KVM ignores the
    // CPUID table (kvm_pvm) our guest still limits XCR0 to it. That word is
    // the VMM's alone.
    check_cmdline_words(&config.cmdline)?;
    Ok(plan)
}

/// Where `--initrd` goes (address, size): the top of the RAM the kernel
/// may address, above the kernel; refused, naming the sizes, when it does
/// not fit. Decided before any VM exists.
fn initrd_place(config: &RunConfig, plan: &boot::KernelPlan) -> Result<Option<(u64, u64)>> {
    let Some(initrd) = &config.initrd else {
        return Ok(None);
    };
    let size = initrd.bytes.len() as u64;
    let ram = config.mem_mib << 20;
    let (limit, end) = (plan.initrd_limit(), plan.kernel_end());
    match crate::arch::linux::initrd_address(ram, limit, end, size) {
        Some(at) => Ok(Some((at, size))),
        None => Err(crate::error::BootError::InitrdTooBig {
            initrd: initrd.name.clone(),
            size,
            kernel_end: end,
            top: ram.min(crate::arch::layout::LOW_RAM_END).min(limit),
        }
        .into()),
    }
}

/// Copy the initrd into guest RAM at `at` ([`initrd_place`] chose it).
fn load_initrd(mem: &GuestMemoryMmap, initrd: &super::config::KernelImage, at: u64) -> Result<()> {
    use vm_memory::Bytes;
    mem.write_slice(&initrd.bytes, vm_memory::GuestAddress(at))
        .map_err(|source| MemoryError::Write {
            what: "the initrd",
            source,
        })?;
    Ok(())
}

/// `--hugepages`: advise THP on guest RAM (hugetlbfs RAM is huge pages
/// already).
fn advise(ram: &GuestMemoryMmap, backing: RamBacking) -> std::result::Result<(), String> {
    match backing {
        RamBacking::Thp => crate::vstate::machine::advise_hugepages(ram).map_err(|e| e.to_string()),
        RamBacking::Hugetlbfs => Ok(()),
    }
}

/// The machine a run boots: KVM opened (or the one `--xfeatures` was
/// resolved against), the VM and its vCPUs built on `ram`, the kernel
/// loaded, and the XCR0 the policy allows.
type Built = (
    HostKvm,
    (Machine, Vec<VcpuFd>),
    boot::LoadedKernel,
    XfeatureMask,
);

/// Open KVM (or take the resolved one), build the VM and load the kernel.
/// Without `--xfeatures`, KVM's table is read on another thread while the
/// VM and its vCPUs are created and the kernel is loaded, and then
/// validated: a VM built for a table that offers no XSAVE is dropped
/// without running. Guest RAM is registered last (see `VmWithVcpus`).
fn build_and_load(
    config: &mut RunConfig,
    ram: &GuestMemoryMmap,
    plan: &boot::KernelPlan,
    platform: Platform,
) -> Result<Built> {
    let vcpus = config.vcpus;
    let huge_pages = config.hugepages.is_some();
    let kernel = &config.kernel;
    let speaks_protocol = matches!(plan, boot::KernelPlan::Elf(elf) if elf.entry64.is_some());
    let build = |kvm: &kvm_ioctls::Kvm| -> Result<_> {
        // Bad counts are refused before any VM exists.
        smp::check_vcpus(vcpus, smp::kvm_max_vcpus(kvm))?;
        // The PIT and COM1's IRQ need the PICs and the IOAPIC.
        let irqchip = match platform {
            // A kernel with vmm's note ends its runs by the protocol's
            // port write, never by halting: its one vCPU gets a LAPIC too.
            Platform::Minimal => smp::Irqchip::for_new_vm(kvm, vcpus, speaks_protocol),
            Platform::Pc => smp::Irqchip::Full,
        };
        let vm = VmWithVcpus::create(kvm, ram.clone(), vcpus, irqchip)?;
        // The embedded kernel's pages are mapped from the executable, not
        // copied (see `place_from_executable`); not into huge-page RAM,
        // where the mapping would split the first huge page.
        let placed = match plan {
            boot::KernelPlan::Elf(elf) if !huge_pages => {
                crate::vstate::machine::place_from_executable(ram, &kernel.bytes, &elf.segments)
                    .then(|| boot::placed_kernel(elf))
            }
            _ => None,
        };
        // Best effort: without it a copy, and later the boot structures,
        // fault the pages in one by one (see `populate_for_write`).
        let copy = if placed.is_none() {
            plan.load_ranges()
        } else {
            Vec::new()
        };
        for (at, len) in copy.into_iter().chain(crate::arch::layout::BOOT_DATA) {
            let _ =
                crate::vstate::machine::populate_for_write(ram, vm_memory::GuestAddress(at), len);
        }
        let loaded = match placed {
            Some(loaded) => loaded,
            None => boot::load_kernel(ram, &kernel.bytes, &kernel.name, plan)?,
        };
        Ok((vm, loaded))
    };
    match std::mem::replace(&mut config.xfeatures, Xfeatures::Kvm) {
        Xfeatures::Kvm => {
            let (host, (vm, loaded)) = HostKvm::open_overlapping(build)?;
            let xcr0 = validate_policy(None, &host.xstate, &host.supported_cpuid)?;
            check_phys_bits(&host, config.mem_mib)?;
            Ok((host, vm.register_ram()?, loaded, xcr0))
        }
        Xfeatures::Resolved(r) => {
            check_phys_bits(&r.host, config.mem_mib)?;
            let (vm, loaded) = build(&r.host.kvm)?;
            Ok((r.host, vm.register_ram()?, loaded, r.resolution.result))
        }
    }
}

/// The MP table that tells the guest its CPUs, signed with the guest's
/// leaf 1.
fn write_mptable(machine: &Machine, guest_cpuid: &GuestCpuid, vcpus: u32) -> Result<()> {
    let leaf1 = guest_cpuid
        .cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == 1 && e.index == 0)
        .map(|e| mptable::CpuSignature {
            eax: e.eax,
            edx: e.edx,
        })
        .unwrap_or_default();
    mptable::write(&machine.mem, vcpus, leaf1, machine.irqchip.has_ioapic())?;
    Ok(())
}

/// Set up vCPUs 1.. as application processors held for INIT-SIPI, each
/// with its own xstate manager; returns how the last one was held.
fn configure_aps(
    machine: &mut Machine,
    ap_fds: Vec<VcpuFd>,
    guest_cpuid: &GuestCpuid,
    host: &HostKvm,
    policy: &Policy,
    config: &RunConfig,
) -> Result<Option<smp::ApStart>> {
    let mut ap_start = None;
    for (i, vcpu) in ap_fds.into_iter().enumerate() {
        let index = i as u32 + 1;
        vcpu::configure_ap(
            &vcpu,
            index,
            guest_cpuid,
            &host.xstate.info,
            config.init_xstate,
            host.xsave2_size,
        )?;
        ap_start = Some(smp::hold_for_sipi(&vcpu, index)?);
        machine.aps.push(Ap {
            vcpu,
            xstate: XstateManager::new(
                config.xstate_sync,
                host.xstate.info,
                policy.xcr0,
                host.xsave2_size,
            ),
        });
    }
    Ok(ap_start)
}

/// What `--hugepages` did to guest RAM, read at the run's end: the huge
/// pages of every region's mapping, added.
fn hugepages_record(
    ram: &GuestMemoryMmap,
    backing: RamBacking,
    advised: std::result::Result<(), String>,
    mem_mib: u64,
) -> super::outcome::HugePages {
    use crate::vstate::machine::{anon_huge_kib, host_ranges, hugetlb_kib};
    let ranges = host_ranges(ram);
    let added = |kib: fn(u64, u64) -> std::io::Result<u64>| {
        ranges
            .iter()
            .map(|&(host, len)| kib(host, len))
            .sum::<std::io::Result<u64>>()
            .ok()
    };
    super::outcome::HugePages {
        backing,
        advised,
        ram_kib: mem_mib << 10,
        anon_huge_kib: added(anon_huge_kib),
        hugetlb_kib: (backing == RamBacking::Hugetlbfs)
            .then(|| added(hugetlb_kib))
            .flatten(),
        // The native side's: the tool that started it reads it.
        native: None,
    }
}

/// `--mem` in bytes, refused when outside what the memory map allows.
fn ram_bytes(mem_mib: u64) -> Result<u64> {
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&mem_mib) {
        return Err(MemoryError::SizeOutOfRange(mem_mib).into());
    }
    Ok(mem_mib << 20)
}

/// Refuse `mem_mib` MiB of RAM when its end (RAM past 3 GiB lies above
/// 4 GiB) is past the physical addresses this KVM gives a guest: the
/// guest could not address it.
pub(crate) fn check_phys_bits(host: &HostKvm, mem_mib: u64) -> Result<()> {
    fits_phys_bits(host.supported_cpuid.as_slice(), mem_mib).map_err(Into::into)
}

/// [`check_phys_bits`] on a CPUID table: leaf 0x8000_0008, EAX bits 7:0
/// (no such leaf, or an implausible width: no check).
fn fits_phys_bits(
    cpuid: &[kvm_bindings::kvm_cpuid_entry2],
    mem_mib: u64,
) -> std::result::Result<(), MemoryError> {
    let bits = cpuid
        .iter()
        .find(|e| e.function == 0x8000_0008 && e.index == 0)
        .map(|e| e.eax & 0xff)
        .filter(|&b| (32..64).contains(&b));
    let end = crate::arch::layout::ram_end(mem_mib << 20);
    match bits {
        Some(bits) if end > 1 << bits => Err(MemoryError::BeyondPhysBits {
            mib: mem_mib,
            end,
            bits,
        }),
        _ => Ok(()),
    }
}

/// A time-triggered snapshot needs somewhere to go: refused before any VM
/// exists.
pub(crate) fn check_snapshot_options(after: Option<Duration>, file: Option<&Path>) -> Result<()> {
    if after.is_some() && file.is_none() {
        return Err(Error::Argument(
            "--snapshot-after needs --snapshot-file".into(),
        ));
    }
    Ok(())
}

/// Refuse a guest command line the VMM cannot pass whole: one with words
/// the VMM owns (`guest::protocol::VMM_OWNED_WORDS`: a caller's
/// `xfeatures=` would replace the policy hint), or one that, with the VMM's
/// own words, would not fit the guest's `guest::protocol::CMDLINE_MAX`
/// bytes (the guest would cut it, and with it words it needs), or one
/// with a character that is not printable ASCII (a snapshot records the
/// line, and a restore refuses one that holds such a character; our guest
/// reads words of printable ASCII).
pub fn check_cmdline_words(cmdline: &str) -> Result<()> {
    if let Some(c) = cmdline.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(Error::Argument(format!(
            "the guest command line holds {c:?}: only printable ASCII (spaces between \
             words) is passed to the guest"
        )));
    }
    if let Some(word) = guest::protocol::vmm_owned_word(cmdline) {
        return Err(Error::Argument(format!(
            "guest command-line word {word:?} is the VMM's own (words the VMM sets: {}); \
             use --xfeatures for the xstate policy",
            guest::protocol::VMM_OWNED_WORDS.join(" ")
        )));
    }
    let room = guest::protocol::CMDLINE_MAX - guest::protocol::VMM_WORDS_MAX;
    if cmdline.len() > room {
        return Err(Error::Argument(format!(
            "the guest command line is {} bytes; with the VMM's own words it must fit the \
             guest's {} bytes, which leaves {room} for the rest",
            cmdline.len(),
            guest::protocol::CMDLINE_MAX
        )));
    }
    Ok(())
}

/// Put `xfeatures=MASK` (see `guest::protocol`) first, so no text of the
/// caller's can push it out of what the guest reads; the caller's command
/// line has none and fits beside it ([`check_cmdline_words`]).
fn with_xfeatures_hint(cmdline: &str, xcr0: XfeatureMask) -> String {
    let hint = format!("xfeatures={:#x}", xcr0.bits());
    if cmdline.is_empty() {
        hint
    } else {
        format!("{hint} {cmdline}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RAM whose end passes the guest's physical address width is refused
    /// naming both; RAM up to it, or a table without the leaf, is not.
    #[test]
    fn ram_past_the_physical_address_width_is_refused() {
        let leaf = |bits: u32| kvm_bindings::kvm_cpuid_entry2 {
            function: 0x8000_0008,
            eax: 0x3000 | bits,
            ..Default::default()
        };
        // 36 bits: 64 GiB of addresses; 61 GiB of RAM ends at 62 GiB.
        assert!(fits_phys_bits(&[leaf(36)], 61 << 10).is_ok());
        assert!(fits_phys_bits(&[leaf(36)], 63 << 10).is_ok());
        let e = fits_phys_bits(&[leaf(36)], 64 << 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--mem 65536 MiB puts guest RAM up to 0x1040000000")
                && e.contains("past the 36-bit physical addresses"),
            "{e}"
        );
        assert!(fits_phys_bits(&[leaf(48)], crate::arch::layout::MAX_MEM_MIB).is_ok());
        assert!(fits_phys_bits(&[], crate::arch::layout::MAX_MEM_MIB).is_ok());
        assert!(fits_phys_bits(&[leaf(0)], 64 << 10).is_ok());
    }
}
