//! The PVH boot information (`hvm_start_info`, Xen's `arch-x86/hvm/start_info.h`
//! ABI) the VMM leaves in guest memory, read once at CPL3 and copied into
//! kernel-owned buffers so later allocations cannot clobber it.

/// `hvm_start_info.magic`.
pub const HVM_START_MAGIC: u32 = 0x336e_c578;
/// E820 type of usable RAM in the PVH memory map.
pub const MEMMAP_TYPE_RAM: u32 = guest::firmware::E820_RAM;
/// Most memory-map entries the kernel keeps.
pub const MAX_MEMMAP: usize = 64;
/// Longest command line the kernel keeps (longer ones are cut here).
pub const MAX_CMDLINE: usize = guest::protocol::CMDLINE_MAX;

/// `struct hvm_start_info` (version 1 layout; version 0 ends at `rsdp_paddr`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct HvmStartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

/// `struct hvm_memmap_table_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemmapEntry {
    pub addr: u64,
    pub size: u64,
    pub kind: u32,
    pub reserved: u32,
}

/// Why the boot information was not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootInfoError {
    /// EBX pointed outside mapped guest memory (below 4 KiB or past 4 GiB).
    BadAddress(u64),
    BadMagic(u32),
}

impl core::fmt::Display for BootInfoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadAddress(a) => {
                write!(f, "hvm_start_info address {a:#x} is not in mapped memory")
            }
            Self::BadMagic(m) => write!(
                f,
                "hvm_start_info magic {m:#x}, expected {HVM_START_MAGIC:#x} (not booted via PVH?)"
            ),
        }
    }
}

/// What the kernel keeps of the boot information.
///
/// `repr(C)` with the arrays last: a copy of a short command line and a
/// few memory-map entries then writes only the first bytes of the
/// struct, one page of a static `BootInfo`, not its end as well (each
/// page touched is a guest page fault).
#[repr(C)]
pub struct BootInfo {
    pub version: u32,
    /// True when the command line was longer than [`MAX_CMDLINE`].
    pub cmdline_truncated: bool,
    /// `rsdp_paddr`: the ACPI RSDP's address (0: the VMM provides no ACPI).
    pub rsdp: u64,
    cmdline_len: usize,
    memmap_len: usize,
    memmap: [MemmapEntry; MAX_MEMMAP],
    cmdline: [u8; MAX_CMDLINE],
}

/// The lowest and highest (exclusive) address the kernel's page tables map
/// that boot information may live at.
const MAPPED: core::ops::Range<u64> = 0x1000..0x1_0000_0000;

fn mapped(addr: u64, len: u64) -> bool {
    addr >= MAPPED.start && addr.checked_add(len).is_some_and(|end| end <= MAPPED.end)
}

impl BootInfo {
    /// No boot information: every length zero.
    pub const EMPTY: BootInfo = BootInfo {
        version: 0,
        cmdline_truncated: false,
        rsdp: 0,
        cmdline_len: 0,
        memmap_len: 0,
        memmap: [MemmapEntry {
            addr: 0,
            size: 0,
            kind: 0,
            reserved: 0,
        }; MAX_MEMMAP],
        cmdline: [0; MAX_CMDLINE],
    };

    /// Read and copy the `hvm_start_info` at guest-physical `addr` into
    /// `self`, in place: only the bytes copied are written (the lengths say
    /// how many are valid), so a static `BootInfo` costs the pages the
    /// copy reaches, not all of its 5.6 KiB. On an error `self` holds no
    /// command line and no memory map.
    pub fn read_into(&mut self, addr: u32) -> Result<(), BootInfoError> {
        self.cmdline_len = 0;
        self.cmdline_truncated = false;
        self.memmap_len = 0;
        let addr = u64::from(addr);
        if !mapped(addr, core::mem::size_of::<HvmStartInfo>() as u64) {
            return Err(BootInfoError::BadAddress(addr));
        }
        // SAFETY: the range is identity-mapped and readable (checked above);
        // `read_unaligned` makes no alignment assumption and the struct is
        // plain integers. Reading the version-1 tail of a version-0 record
        // reads bytes that exist in RAM but are ignored below.
        let si: HvmStartInfo = unsafe { core::ptr::read_unaligned(addr as *const HvmStartInfo) };
        if si.magic != HVM_START_MAGIC {
            return Err(BootInfoError::BadMagic(si.magic));
        }
        let info = self;
        info.version = si.version;
        info.rsdp = si.rsdp_paddr;

        if si.cmdline_paddr != 0 && mapped(si.cmdline_paddr, 1) {
            let limit = (MAPPED.end - si.cmdline_paddr).min(MAX_CMDLINE as u64 + 1) as usize;
            for i in 0..limit {
                // SAFETY: `cmdline_paddr + i` is below 4 GiB and not in the
                // unmapped first page (checked by `mapped` and `limit`).
                let c = unsafe { core::ptr::read_volatile((si.cmdline_paddr as *const u8).add(i)) };
                if c == 0 {
                    break;
                }
                if i == MAX_CMDLINE {
                    info.cmdline_truncated = true;
                    break;
                }
                info.cmdline[i] = c;
                info.cmdline_len = i + 1;
            }
        }

        if si.version >= 1 && si.memmap_paddr != 0 {
            // Entries past MAX_MEMMAP are ignored.
            let keep = (si.memmap_entries as usize).min(MAX_MEMMAP);
            let bytes = (keep * core::mem::size_of::<MemmapEntry>()) as u64;
            if mapped(si.memmap_paddr, bytes) {
                for i in 0..keep {
                    // SAFETY: entry `i` lies inside the mapped range checked
                    // above; plain integers, read unaligned.
                    info.memmap[i] = unsafe {
                        core::ptr::read_unaligned((si.memmap_paddr as *const MemmapEntry).add(i))
                    };
                }
                info.memmap_len = keep;
            }
        }
        Ok(())
    }

    /// The command line bytes (no NUL).
    pub fn cmdline(&self) -> &[u8] {
        &self.cmdline[..self.cmdline_len]
    }

    /// The memory map (empty for a version-0 start info).
    pub fn memmap(&self) -> &[MemmapEntry] {
        &self.memmap[..self.memmap_len]
    }
}
