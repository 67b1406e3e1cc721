//! The guest kernel's own machine code, run natively: its `PT_LOAD`
//! segments mapped into this process at the addresses it links at, and its
//! exported [`NATIVE_ROW_SYMBOL`] called with a stable `extern "C"` ABI. The
//! VMM's native repetitions then time exactly the bytes the guest runs, not
//! the VMM's own (PIC, differently optimised) build of the same source.
//!
//! The kernel is static, position-dependent and links at 1 MiB (above
//! `mmap_min_addr`, below where Linux puts a PIE or its heap), so the range
//! is normally free; it is claimed with `MAP_FIXED_NOREPLACE` and a range
//! already in use is a named error ([`ImageMapError::RangeTaken`]) that the
//! caller answers by falling back to the VMM's build. One mapping can exist
//! per process at a time.
//!
//! What the entry point may do natively: the workloads are `no_std`, make no
//! system calls and use only unprivileged instructions (CPUID, XGETBV,
//! RDTSC); a panic would reach the kernel's fault path (a breakpoint), which
//! is why every input is checked by [`guest::workloads::run_row`] first.

use std::ffi::c_void;

use guest::protocol::{NativeRowArgs, NativeRowOut, OnPart, NATIVE_ROW_SYMBOL};

use crate::arch::elf::{check_image, ImageError};
use crate::arch::layout::MAX_MEM_MIB;

/// Why the guest kernel's code cannot run natively.
#[derive(Debug, thiserror::Error)]
pub enum ImageMapError {
    /// The image breaks the loader's rules.
    #[error("the guest kernel image is not loadable")]
    Image(#[source] ImageError),
    /// The symbol table is missing or malformed.
    #[error("the guest kernel's symbol table is unreadable: {0}")]
    Symtab(&'static str),
    /// No native entry point: a kernel other than the embedded guest.
    #[error("the guest kernel exports no `{NATIVE_ROW_SYMBOL}` function")]
    NoEntry,
    /// Something of this process already occupies the link addresses.
    #[error("the address range {start:#x}..{end:#x} the guest kernel links at is already mapped in this process")]
    RangeTaken {
        /// First byte.
        start: u64,
        /// First byte past it.
        end: u64,
    },
    /// `mmap` refused for another reason.
    #[error("mapping the guest kernel at {start:#x}..{end:#x} failed")]
    Map {
        /// First byte.
        start: u64,
        /// First byte past it.
        end: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

type NativeRowFn = unsafe extern "C" fn(*const NativeRowArgs, *mut NativeRowOut);

/// The guest kernel mapped at its link addresses; unmapped on drop.
#[derive(Debug)]
pub struct GuestImage {
    base: *mut c_void,
    len: usize,
    entry: NativeRowFn,
    /// Address of the entry point (for the report).
    pub entry_addr: u64,
    /// Bytes of the entry point's function (`st_size`; the tests check it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub entry_size: u64,
}

// SAFETY: the mapping is private to this value and only read and executed
// through `run_row`, which takes `&self` and touches no shared state of the
// image other than its own stack frame (the workloads keep no statics).
unsafe impl Send for GuestImage {}

const PAGE: u64 = 4096;
const SHT_SYMTAB: u32 = 2;
const STT_FUNC: u8 = 2;
const SHDR_SIZE: u64 = 64;
const SYM_SIZE: u64 = 24;

fn bytes_at<const N: usize>(b: &[u8], at: u64) -> Option<[u8; N]> {
    let at = usize::try_from(at).ok()?;
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
fn u16_at(b: &[u8], at: u64) -> Option<u16> {
    bytes_at(b, at).map(u16::from_le_bytes)
}
fn u32_at(b: &[u8], at: u64) -> Option<u32> {
    bytes_at(b, at).map(u32::from_le_bytes)
}
fn u64_at(b: &[u8], at: u64) -> Option<u64> {
    bytes_at(b, at).map(u64::from_le_bytes)
}

/// `(st_value, st_size)` of the function `name` in the ELF symbol table,
/// every read bounds-checked.
pub fn find_function(elf: &[u8], name: &str) -> Result<Option<(u64, u64)>, ImageMapError> {
    let bad = ImageMapError::Symtab;
    let shoff = u64_at(elf, 0x28).ok_or(bad("no ELF header"))?;
    let shentsize = u16_at(elf, 0x3a).ok_or(bad("no ELF header"))?;
    let shnum = u16_at(elf, 0x3c).ok_or(bad("no ELF header"))?;
    if shnum == 0 {
        return Err(bad("no section headers (stripped image)"));
    }
    if u64::from(shentsize) != SHDR_SIZE {
        return Err(bad("section header size is not 64"));
    }
    let shdr = |i: u64| shoff.checked_add(i * SHDR_SIZE);
    for i in 0..u64::from(shnum) {
        let at = shdr(i).ok_or(bad("section header offset overflows"))?;
        if u32_at(elf, at.saturating_add(4)).ok_or(bad("section header past the end"))?
            != SHT_SYMTAB
        {
            continue;
        }
        let off = u64_at(elf, at.saturating_add(0x18)).ok_or(bad("symtab header cut"))?;
        let size = u64_at(elf, at.saturating_add(0x20)).ok_or(bad("symtab header cut"))?;
        let link = u32_at(elf, at.saturating_add(0x28)).ok_or(bad("symtab header cut"))?;
        let str_at = shdr(u64::from(link)).ok_or(bad("string table index overflows"))?;
        let str_off = u64_at(elf, str_at.saturating_add(0x18))
            .ok_or(bad("string table header past the end"))?;
        let str_size = u64_at(elf, str_at.saturating_add(0x20))
            .ok_or(bad("string table header past the end"))?;
        let strtab = usize::try_from(str_off)
            .ok()
            .and_then(|o| elf.get(o..o.checked_add(usize::try_from(str_size).ok()?)?))
            .ok_or(bad("string table past the end"))?;
        for s in 0..size / SYM_SIZE {
            let sym = off.saturating_add(s * SYM_SIZE);
            let st_name = u32_at(elf, sym).ok_or(bad("symbol past the end"))? as usize;
            let info =
                bytes_at::<1>(elf, sym.saturating_add(4)).ok_or(bad("symbol past the end"))?[0];
            let value = u64_at(elf, sym.saturating_add(8)).ok_or(bad("symbol past the end"))?;
            let st_size = u64_at(elf, sym.saturating_add(16)).ok_or(bad("symbol past the end"))?;
            let Some(rest) = strtab.get(st_name..) else {
                return Err(bad("symbol name outside the string table"));
            };
            let sym_name = rest.split(|&b| b == 0).next().unwrap_or_default();
            if info & 0xf == STT_FUNC && sym_name == name.as_bytes() {
                return Ok(Some((value, st_size)));
            }
        }
    }
    Ok(None)
}

impl GuestImage {
    /// Map `elf` (a PVH guest kernel) at its link addresses and find its
    /// native entry point.
    pub fn map(elf: &[u8]) -> Result<Self, ImageMapError> {
        let plan = check_image(elf, MAX_MEM_MIB << 20).map_err(ImageMapError::Image)?;
        let (entry_addr, entry_size) =
            find_function(elf, NATIVE_ROW_SYMBOL)?.ok_or(ImageMapError::NoEntry)?;
        let start = plan.segments.iter().map(|s| s.paddr).min().unwrap_or(0) & !(PAGE - 1);
        let end = plan
            .segments
            .iter()
            .map(|s| s.paddr + s.memsz)
            .max()
            .unwrap_or(0)
            .next_multiple_of(PAGE);
        // The entry must be code the image carries.
        if !plan
            .segments
            .iter()
            .any(|s| (s.paddr..s.paddr + s.filesz).contains(&entry_addr))
        {
            return Err(ImageMapError::NoEntry);
        }
        let len = (end - start) as usize;
        // SAFETY: a fresh anonymous private mapping at a fixed address that
        // MAP_FIXED_NOREPLACE refuses to place over anything existing.
        let base = unsafe {
            libc::mmap(
                start as *mut c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            return Err(if source.raw_os_error() == Some(libc::EEXIST) {
                ImageMapError::RangeTaken { start, end }
            } else {
                ImageMapError::Map { start, end, source }
            });
        }
        if base as u64 != start {
            // A kernel before 4.17 takes the flag as a hint and maps elsewhere.
            // SAFETY: the mapping just made, not shared with anything.
            unsafe { libc::munmap(base, len) };
            return Err(ImageMapError::RangeTaken { start, end });
        }
        for s in &plan.segments {
            // Inside the file: check_image verified every segment's bytes.
            let bytes = &elf[s.offset as usize..(s.offset + s.filesz) as usize];
            // SAFETY: `s.paddr .. s.paddr + s.filesz` lies inside the mapping
            // made above (start..end covers every segment's memsz), which
            // nothing else references yet.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), s.paddr as *mut u8, bytes.len())
            };
        }
        // SAFETY: the address is a function of the mapped image whose C ABI
        // the guest kernel declares (`vmm_native_row2` in guest/src/main.rs).
        let entry = unsafe { std::mem::transmute::<usize, NativeRowFn>(entry_addr as usize) };
        Ok(Self {
            base,
            len,
            entry,
            entry_addr,
            entry_size,
        })
    }

    /// One repetition of row `key`, by the guest kernel's code; `on_part`
    /// (callback and context) is called after each timed part.
    ///
    /// The context must be what the callback expects, valid for the call.
    pub fn run_row(
        &self,
        key: u32,
        quick: bool,
        tsc_khz: u64,
        scratch: &mut [u8],
        on_part: Option<(OnPart, *mut c_void)>,
    ) -> NativeRowOut {
        let args = NativeRowArgs {
            key,
            quick: u32::from(quick),
            tsc_khz,
            scratch: scratch.as_mut_ptr(),
            scratch_len: scratch.len(),
            on_part: on_part.map(|(f, _)| f),
            on_part_ctx: on_part.map_or(std::ptr::null_mut(), |(_, c)| c),
        };
        let mut out = NativeRowOut::default();
        // SAFETY: the image stays mapped while `self` lives; `args` and `out`
        // are valid for the call, `scratch` is exclusively borrowed, and
        // the callback's context is the caller's to keep valid.
        unsafe { (self.entry)(&args, &mut out) };
        out
    }
}

impl Drop for GuestImage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, no longer referenced.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use guest::protocol::{Report, RowKey, RowKind};
    use guest::workloads::{self, GemmVariant};

    use super::*;

    /// One mapping at the link address per process: the tests that make
    /// one take turns.
    pub(crate) static LINK_RANGE: Mutex<()> = Mutex::new(());

    fn embedded() -> &'static [u8] {
        crate::GUEST_KERNEL
    }

    #[test]
    fn the_guest_code_computes_the_vmm_builds_dgemm_bit_for_bit() {
        let _turn = LINK_RANGE.lock().unwrap_or_else(|e| e.into_inner());
        let img = GuestImage::map(embedded()).unwrap();
        let (addr, size) = find_function(embedded(), NATIVE_ROW_SYMBOL)
            .unwrap()
            .unwrap();
        assert_eq!((img.entry_addr, img.entry_size), (addr, size));
        assert!(addr >= 0x10_0000 && size > 0, "{addr:#x} {size}");
        let mut scratch = vec![0u8; 4 << 20];
        let mut ran = 0;
        for (vi, _) in GemmVariant::ALL.iter().enumerate() {
            for kind in [RowKind::Dgemm, RowKind::Linpack] {
                let key = RowKey {
                    kind,
                    variant: vi as u8,
                    size: 72,
                };
                let guest_code = img.run_row(key.encode(), true, 100, &mut scratch, None);
                let mut report = Report::new();
                let vmm_build =
                    workloads::run_row(key, true, 100, &mut scratch, &mut report, &mut |_| {});
                // Same variant availability, same checks, same bits.
                assert_eq!(guest_code.ran, vmm_build.ran, "{key:?}");
                assert_eq!(guest_code.check, vmm_build.check, "{key:?}");
                assert_eq!(guest_code.digest, vmm_build.digest, "{key:?}");
                if guest_code.ran == 1 {
                    assert_eq!(guest_code.check, 1, "{key:?}");
                    assert!(guest_code.work > 0 && guest_code.cycles > 0);
                    ran += 1;
                }
            }
        }
        // SSE2 is baseline x86-64: at least that variant ran.
        assert!(ran >= 2);
    }

    #[test]
    fn a_taken_range_is_a_named_error() {
        let _turn = LINK_RANGE.lock().unwrap_or_else(|e| e.into_inner());
        let first = GuestImage::map(embedded()).unwrap();
        let err = GuestImage::map(embedded()).unwrap_err();
        assert!(
            matches!(err, ImageMapError::RangeTaken { start: 0x10_0000, end } if end > start_of(&first)),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("already mapped in this process"),
            "{err}"
        );
        drop(first);
        // Unmapped on drop: the range is free again.
        GuestImage::map(embedded()).unwrap();
    }

    #[test]
    fn corrupt_headers_never_panic_the_symbol_lookup() {
        let elf = embedded();
        let shoff = u64_at(elf, 0x28).unwrap() as usize;
        let shnum = u16_at(elf, 0x3c).unwrap() as usize;
        let offsets = (0..64).chain(shoff..shoff + shnum * 64);
        let mut found = 0;
        for at in offsets {
            for v in [0x00, 0xff, 0x7f] {
                let mut bad = elf.to_vec();
                bad[at] = v;
                // Any answer but a panic; most corruptions leave it found.
                if let Ok(Some(_)) = find_function(&bad, NATIVE_ROW_SYMBOL) {
                    found += 1;
                }
            }
        }
        assert!(found > 0);
    }

    fn start_of(img: &GuestImage) -> u64 {
        img.base as u64
    }

    #[test]
    fn kernels_without_the_entry_point_are_named() {
        // The symbol renamed: a kernel that does not export it.
        let mut other = embedded().to_vec();
        let name = NATIVE_ROW_SYMBOL.as_bytes();
        let at = other
            .windows(name.len() + 1)
            .position(|w| &w[..name.len()] == name && w[name.len()] == 0)
            .unwrap();
        other[at + name.len() - 1] = b'x';
        assert!(matches!(
            GuestImage::map(&other),
            Err(ImageMapError::NoEntry)
        ));
        // Stripped of its section headers.
        let mut stripped = embedded().to_vec();
        stripped[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        let err = GuestImage::map(&stripped).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the guest kernel's symbol table is unreadable: no section headers (stripped image)"
        );
        // Not an ELF at all.
        assert!(matches!(
            GuestImage::map(b"MZ not an elf"),
            Err(ImageMapError::Image(_))
        ));
        // A symbol table pointing past the end of the file.
        let mut cut = embedded().to_vec();
        cut[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            find_function(&cut, NATIVE_ROW_SYMBOL),
            Err(ImageMapError::Symtab(_))
        ));
    }
}
