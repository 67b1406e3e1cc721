//! The host's KVM: opening `/dev/kvm`, checking the capabilities the VMM
//! relies on, and what KVM can give a guest. Every capability is read here,
//! once, with one meaning.

use kvm_bindings::{CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm};
use xstate::kvm::KVM_XSAVE_REGION_SIZE;
use xstate::{XfeatureMask, XsaveInfo};

use crate::error::{Error, Result};

/// The extended-state view of KVM's supported CPUID.
#[derive(Clone, Debug)]
pub struct KvmXstate {
    /// Leaf 0xD of `KVM_GET_SUPPORTED_CPUID`, parsed.
    pub info: XsaveInfo,
}

impl KvmXstate {
    /// Parse leaf 0xD of a supported-CPUID table.
    fn from_supported(supported: &CpuId) -> Result<Self> {
        let info = XsaveInfo::from_kvm_cpuid(supported).map_err(Error::KvmCpuid)?;
        Ok(Self { info })
    }

    /// User state KVM can give a guest.
    pub fn supported_xcr0(&self) -> XfeatureMask {
        self.info.supported_xcr0()
    }
}

/// An open `/dev/kvm` with its supported CPUID and xstate view.
pub struct HostKvm {
    /// The system file descriptor (VMs are created from it).
    pub kvm: Kvm,
    /// `KVM_GET_SUPPORTED_CPUID`.
    pub supported_cpuid: CpuId,
    /// Leaf 0xD of the supported CPUID, parsed.
    pub xstate: KvmXstate,
    /// The size of the xsave image KVM exchanges: `KVM_CAP_XSAVE2` (all the
    /// state a guest may enable), or the legacy 4 KiB `kvm_xsave` region
    /// where the capability is absent; never less than 4 KiB. Above 4 KiB
    /// the VMM must use `KVM_GET/SET_XSAVE2`.
    pub xsave2_size: usize,
}

impl HostKvm {
    /// Open `/dev/kvm` and check what the VMM needs. A missing device or a
    /// permission problem is a one-line error.
    pub fn open() -> Result<Self> {
        let kvm = open_checked()?;
        let supported_cpuid = supported_cpuid(&kvm)?;
        Self::finish(kvm, supported_cpuid)
    }

    /// [`HostKvm::open`], with `work` (building a VM, say) done on this
    /// thread while another reads `KVM_GET_SUPPORTED_CPUID`, if it can
    /// start in time.
    ///
    /// Why: that ioctl executes CPUID for every leaf it reports, and under
    /// a nested hypervisor each CPUID traps (about 0.3 ms for the whole
    /// table on the development host, as long as creating the VM and its
    /// vCPU and loading the kernel). But a new thread may wait for a CPU:
    /// 0.2-0.6 ms on the development host when its other CPU was idle, and
    /// milliseconds when other processes kept it busy. So whichever thread
    /// is free first reads the table (`TableHelper`): when `work` is done
    /// before the helper has begun, this thread reads it itself and the
    /// helper, once it runs, does nothing.
    ///
    /// `work` does not get the table, so it cannot depend on it; the
    /// caller validates against it afterwards (a VM built for a request
    /// then refused is dropped unused). What should not overlap another
    /// thread's work in KVM (registering guest RAM: see
    /// `vstate::machine::VmWithVcpus`) comes after this returns. Errors
    /// come in the caller's order: `work`'s, then the table's.
    ///
    /// # Errors
    /// `/dev/kvm` unavailable or lacking a capability the VMM needs;
    /// `work`'s error; the table refused.
    pub fn open_overlapping<T>(work: impl FnOnce(&Kvm) -> Result<T>) -> Result<(Self, T)> {
        let helper = TableHelper::spawn();
        let kvm = open_checked()?;
        let done = work(&kvm);
        let supported = match helper.and_then(TableHelper::result) {
            Some(table) => table,
            None => supported_cpuid(&kvm),
        };
        let done = done?;
        let host = Self::finish(kvm, supported?)?;
        Ok((host, done))
    }

    fn finish(kvm: Kvm, supported_cpuid: CpuId) -> Result<Self> {
        let xstate = KvmXstate::from_supported(&supported_cpuid)?;
        // Read after any dynamic-xfeature permission (crate::arch::amx): KVM
        // sizes it by what this process may give its guests.
        let xsave2_size = xsave_image_size(kvm.check_extension_int(Cap::Xsave2), &xstate.info)?;
        Ok(Self {
            kvm,
            supported_cpuid,
            xstate,
            xsave2_size,
        })
    }
}

/// A thread that reads `KVM_GET_SUPPORTED_CPUID` on its own `/dev/kvm`
/// unless the thread that started it claims the job first
/// ([`HostKvm::open_overlapping`]).
///
/// The helper is not joined: it owns everything it touches, and when it
/// finds the job claimed it ends without a system call, whenever it gets
/// to run (at the latest, with the process). A panic in it is caught there
/// and shows as no result, and the starting thread reads the table itself.
struct TableHelper {
    /// Set by whichever thread takes the job.
    claimed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The helper's table, if it took the job.
    table: std::sync::mpsc::Receiver<Result<CpuId>>,
}

impl TableHelper {
    /// Start the helper (`None`: no thread could be started; the caller
    /// reads the table itself).
    fn spawn() -> Option<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let claimed = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, table) = std::sync::mpsc::sync_channel(1);
        let theirs = claimed.clone();
        std::thread::Builder::new()
            .name("kvm-cpuid".into())
            .spawn(move || {
                if theirs.swap(true, Ordering::AcqRel) {
                    return;
                }
                let read = std::panic::catch_unwind(|| {
                    let kvm = Kvm::new().map_err(Error::KvmUnavailable)?;
                    supported_cpuid(&kvm)
                });
                if let Ok(read) = read {
                    let _ = tx.send(read);
                }
            })
            .ok()?;
        Some(Self { claimed, table })
    }

    /// The helper's table, waiting for it if the helper has begun; `None`
    /// when this thread claims the job (or the helper was lost).
    fn result(self) -> Option<Result<CpuId>> {
        if !self.claimed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return None;
        }
        self.table.recv().ok()
    }
}

/// `/dev/kvm`, with every capability the VMM relies on checked.
fn open_checked() -> Result<Kvm> {
    let kvm = Kvm::new().map_err(Error::KvmUnavailable)?;
    for (cap, name) in [
        (Cap::Xsave, "KVM_CAP_XSAVE"),
        (Cap::Xcrs, "KVM_CAP_XCRS"),
        (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID"),
        (Cap::UserMemory, "KVM_CAP_USER_MEMORY"),
    ] {
        if !kvm.check_extension(cap) {
            return Err(Error::KvmCapability(name));
        }
    }
    Ok(kvm)
}

/// `KVM_GET_SUPPORTED_CPUID`.
fn supported_cpuid(kvm: &Kvm) -> Result<CpuId> {
    kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(Error::kvm("KVM_GET_SUPPORTED_CPUID"))
}

/// The xsave image size KVM exchanges, from `KVM_CAP_XSAVE2` (`cap`, 0 when
/// absent): 0 and anything below the legacy region mean KVM_GET_XSAVE's
/// 4 KiB. Refused when smaller than the standard-format size of the user
/// state KVM's own table offers (`info`): every image would be truncated,
/// which is how AMX tile data (8 KiB at offset 0xb00) gets lost.
pub fn xsave_image_size(cap: i32, info: &XsaveInfo) -> Result<usize> {
    let size = usize::try_from(cap).unwrap_or(0).max(KVM_XSAVE_REGION_SIZE);
    let needed = info
        .standard_size(info.supported_xcr0())
        .map_err(|_| Error::KvmCapability("a consistent leaf 0xD layout"))?;
    if (needed as usize) > size {
        return Err(Error::KvmCapability(
            "KVM_CAP_XSAVE2 as large as the state its CPUID table offers \
             (KVM_GET_XSAVE's 4 KiB cannot hold it)",
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use xstate::CpuidRegs;

    fn leaf_d(xcr0: u32, max: u32) -> XsaveInfo {
        XsaveInfo::from_leaf_0xd(|i| match i {
            0 => CpuidRegs::new(xcr0, max, max, 0),
            1 => CpuidRegs::new(0x1f, 0, 0, 0),
            2 => CpuidRegs::new(0x100, 0x240, 0, 0),
            5 => CpuidRegs::new(0x40, 0x440, 0, 0),
            6 => CpuidRegs::new(0x200, 0x480, 0, 0),
            7 => CpuidRegs::new(0x400, 0x680, 0, 0),
            9 => CpuidRegs::new(0x8, 0xa80, 0, 0),
            17 => CpuidRegs::new(0x40, 0xac0, 2, 0),
            18 => CpuidRegs::new(0x2000, 0xb00, 6, 0),
            _ => CpuidRegs::default(),
        })
        .unwrap()
    }

    /// The table is KVM's whichever thread reads it: the helper when
    /// `work` outlasts its start (a 50 ms `work`), this thread when `work`
    /// is done before the helper begins (an empty `work`, most runs); and
    /// `work`'s error comes first.
    #[cfg_attr(no_kvm, ignore = "needs /dev/kvm")]
    #[test]
    fn open_overlapping_gives_kvms_table_whichever_thread_reads_it() {
        let plain = match HostKvm::open() {
            Ok(host) => host,
            Err(e) if std::env::var("VMM_REQUIRE_KVM").as_deref() != Ok("1") => {
                eprintln!(
                    "SKIPPED open_overlapping_gives_kvms_table_whichever_thread_reads_it: {e}"
                );
                return;
            }
            Err(e) => panic!("VMM_REQUIRE_KVM=1 but KVM cannot be opened: {e}"),
        };
        // The table as KVM reports it on any CPU: what leaves 1 and 0xB
        // say of the APIC ID is the CPU's the ioctl ran on.
        let table = |host: &HostKvm| {
            let mut entries = host.supported_cpuid.as_slice().to_vec();
            for e in &mut entries {
                match e.function {
                    1 => e.ebx &= 0x00ff_ffff,
                    0xb | 0x1f => e.edx = 0,
                    _ => {}
                }
            }
            entries
        };
        for pause in [Duration::ZERO, Duration::from_millis(50)] {
            for _ in 0..5 {
                let (host, done) = HostKvm::open_overlapping(|kvm| {
                    std::thread::sleep(pause);
                    Ok(kvm.get_vcpu_mmap_size().is_ok())
                })
                .unwrap();
                assert!(done);
                assert_eq!(table(&host), table(&plain), "after {pause:?}");
                assert_eq!(host.xsave2_size, plain.xsave2_size);
            }
        }
        let refused = HostKvm::open_overlapping(|_| -> Result<()> {
            Err(Error::Argument("work refused".into()))
        });
        assert!(matches!(refused, Err(Error::Argument(m)) if m == "work refused"));
    }

    #[test]
    fn xsave_image_is_sized_by_xsave2() {
        // Sapphire Rapids with the AMX permission: 0x2b00 bytes, XSAVE2 needed.
        let amx = leaf_d(0x602e7, 0x2b00);
        assert_eq!(xsave_image_size(0x2b00, &amx).unwrap(), 0x2b00);
        let e = xsave_image_size(0, &amx).unwrap_err().to_string();
        assert!(e.contains("KVM_CAP_XSAVE2"), "{e}");
        assert!(xsave_image_size(4096, &amx).is_err());
        // Without it KVM's table has no AMX and 4 KiB holds everything.
        let no_amx = leaf_d(0x2e7, 0xa88);
        assert_eq!(xsave_image_size(0, &no_amx).unwrap(), 4096);
        assert_eq!(xsave_image_size(-1, &no_amx).unwrap(), 4096);
        assert_eq!(xsave_image_size(0xa88, &no_amx).unwrap(), 4096);
    }
}
