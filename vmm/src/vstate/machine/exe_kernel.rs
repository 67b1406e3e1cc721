//! The embedded guest kernel put into fresh guest RAM without copying it:
//! the whole pages of each loadable segment are mapped `MAP_PRIVATE` from
//! the vmm executable itself, where [`crate::GUEST_KERNEL`] lies
//! page-aligned, over the anonymous RAM (as a restore maps a snapshot, see
//! [`super::image`]); only a segment's partial first and last pages are
//! copied, and the writable segments (the kernel's data) whole.
//!
//! Why: copying the kernel (about 0.5 MB, most of it code the run never
//! executes) first faulted in and zeroed every page, then wrote it, on the
//! path `vmm bench startup` holds against a C floor; and each of those
//! pages was freed again at exit. Mapped, a page costs nothing until the
//! guest first touches it, and then only the page cache's copy is mapped.
//! A guest write copies the page (`MAP_PRIVATE`), never reaching the file.
//! A snapshot saves a file-backed part of RAM whole (see
//! `snapshot::save::pages`), so what the guest never touched is still in
//! it.
//!
//! Anything unusual (an image that is not the executable's own bytes, a
//! segment whose file offset and address disagree within a page, no
//! `/proc/self/exe`) gives `false`, and the caller copies as before; it
//! also keeps huge-page RAM to the copy (`run::launch`), where a mapping
//! would split the first huge page.

use std::fs::File;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::image::{map_image, RamImage};
use super::ram::regions_of;
use crate::arch::elf::LoadSegment;
use crate::arch::layout::PAGE_SIZE;

/// Put `segments` of the ELF `image` into the fresh, unregistered RAM
/// `mem`: the whole pages mapped from the executable file that holds
/// `image`, the rest copied. `true` when every segment's file bytes are in
/// place; `false` when the caller must copy them (some pages may already
/// be mapped then: a copy over them gives the same bytes).
pub(crate) fn place_from_executable(
    mem: &GuestMemoryMmap,
    image: &[u8],
    segments: &[LoadSegment],
) -> bool {
    let Some(base) = file_offset_in_executable(image) else {
        return false;
    };
    // Below the first region's end, a guest address is its RAM offset.
    let Some(ram) = regions_of(mem).first().map(|r| r.addr + r.len) else {
        return false;
    };
    let page = PAGE_SIZE as u64;
    let mut runs = Vec::new();
    let mut copies = Vec::new();
    for s in segments {
        let (Some(end), Some(file_end)) = (
            s.paddr.checked_add(s.filesz),
            s.offset.checked_add(s.filesz),
        ) else {
            return false;
        };
        if end > ram || file_end > image.len() as u64 {
            return false;
        }
        // A writable segment (the kernel's data) is copied: the guest
        // writes it first thing, and a page it copies on write from the
        // mapping costs far more (about 28 µs under kvm_pvm on Zen 3)
        // than one copied here (3 µs), which the host then maps writable,
        // so KVM's shadow MMU can map it with its neighbours (see
        // `guest/linker.ld`).
        if s.writable {
            copies.push((s.paddr, s.offset, s.filesz));
            continue;
        }
        let first = s.paddr.next_multiple_of(page);
        let last = end / page * page;
        let offset = base + s.offset + (first - s.paddr);
        if first < last && offset.is_multiple_of(page) {
            runs.push((first, offset, last - first));
            copies.push((s.paddr, s.offset, first - s.paddr));
            copies.push((last, s.offset + (last - s.paddr), end - last));
        } else {
            copies.push((s.paddr, s.offset, s.filesz));
        }
    }
    let Ok(file) = File::open("/proc/self/exe") else {
        return false;
    };
    if map_image(mem, &RamImage { file: &file, runs }).is_err() {
        return false;
    }
    copies.iter().all(|&(at, from, len)| {
        let bytes = &image[from as usize..(from + len) as usize];
        len == 0 || mem.write_slice(bytes, GuestAddress(at)).is_ok()
    })
}

/// Where `bytes` lie in the executable's file, when they are part of one
/// of its loadable segments' file contents (`None` for bytes on the heap
/// or in a shared library).
fn file_offset_in_executable(bytes: &[u8]) -> Option<u64> {
    struct Search {
        addr: u64,
        len: u64,
        found: Option<u64>,
    }
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: glibc passes a valid `dl_phdr_info` whose `dlpi_phdr`
        // points to `dlpi_phnum` program headers, for the duration of the
        // call; `data` is the `Search` that `dl_iterate_phdr` was given,
        // borrowed by no one else meanwhile.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        let phdrs = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        search.found = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .find_map(|p| {
                let start = info.dlpi_addr.checked_add(p.p_vaddr)?;
                let inside = search.addr.checked_sub(start)?;
                (inside.checked_add(search.len)? <= p.p_filesz).then(|| p.p_offset + inside)
            });
        // The first object is the executable: stop there.
        1
    }
    let mut search = Search {
        addr: bytes.as_ptr() as u64,
        len: bytes.len() as u64,
        found: None,
    };
    // SAFETY: the callback only reads what glibc hands it and writes the
    // `Search` passed through `data`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first_object), (&raw mut search).cast()) };
    search.found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::elf::check_image;
    use vm_memory::GuestMemoryBackend;

    /// The embedded kernel as `check_image` plans it, and fresh RAM.
    fn kernel_and_ram() -> (Vec<LoadSegment>, GuestMemoryMmap) {
        let plan = check_image(crate::GUEST_KERNEL, 64 << 20).expect("the embedded kernel");
        let mem = crate::vstate::machine::allocate_ram(64).expect("RAM");
        (plan.segments, mem)
    }

    /// The `/proc/self/pagemap` entry of the page at host address `addr`.
    fn pagemap_entry(addr: u64) -> u64 {
        use std::os::unix::fs::FileExt;
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let mut entry = [0u8; 8];
        pagemap
            .read_exact_at(&mut entry, addr / PAGE_SIZE as u64 * 8)
            .unwrap();
        u64::from_le_bytes(entry)
    }

    /// Whether the page at host address `addr` is present (bit 63).
    fn is_present(addr: u64) -> bool {
        pagemap_entry(addr) & (1 << 63) != 0
    }

    /// Whether the page at host address `addr` is present and a page of a
    /// file (bit 61), not an anonymous copy.
    fn is_file_page(addr: u64) -> bool {
        is_present(addr) && pagemap_entry(addr) & (1 << 61) != 0
    }

    #[test]
    fn the_embedded_kernel_is_page_aligned_in_the_executable() {
        let at = file_offset_in_executable(crate::GUEST_KERNEL).expect("in the executable");
        assert_eq!(crate::GUEST_KERNEL.as_ptr() as usize % PAGE_SIZE, 0);
        assert_eq!(at % PAGE_SIZE as u64, 0);
        // The bytes at that offset of the file are the kernel's.
        let mut bytes = vec![0u8; crate::GUEST_KERNEL.len()];
        std::os::unix::fs::FileExt::read_exact_at(
            &File::open("/proc/self/exe").unwrap(),
            &mut bytes,
            at,
        )
        .unwrap();
        assert!(bytes == crate::GUEST_KERNEL);
    }

    #[test]
    fn mapped_segments_hold_the_same_bytes_as_copied_ones() {
        let (segments, mapped) = kernel_and_ram();
        assert!(place_from_executable(
            &mapped,
            crate::GUEST_KERNEL,
            &segments
        ));
        let (_, copied) = kernel_and_ram();
        for s in &segments {
            let len = s.filesz as usize;
            let from = &crate::GUEST_KERNEL[s.offset as usize..s.offset as usize + len];
            copied.write_slice(from, GuestAddress(s.paddr)).unwrap();
            let (mut a, mut b) = (vec![0u8; len], vec![1u8; len]);
            mapped.read_slice(&mut a, GuestAddress(s.paddr)).unwrap();
            copied.read_slice(&mut b, GuestAddress(s.paddr)).unwrap();
            assert!(a == b, "segment {} differs", s.index);
            // Past the file's bytes, the segment is zero in both.
            let tail = (s.memsz - s.filesz).min(4096) as usize;
            let mut z = vec![1u8; tail];
            mapped
                .read_slice(&mut z, GuestAddress(s.paddr + s.filesz))
                .unwrap();
            assert!(z.iter().all(|&b| b == 0), "segment {} bss", s.index);
        }
        // And the whole pages (read above) of the read-only segment are the
        // executable's, not anonymous copies; every page of the writable
        // one (the kernel's data) is a copy, present before the guest runs.
        let host = mapped.get_host_address(GuestAddress(0)).unwrap() as u64;
        let page = segments[0].paddr.next_multiple_of(4096) + host;
        assert!(!segments[0].writable);
        assert!(is_file_page(page), "page {page:#x} is not a file page");
        let data = segments
            .iter()
            .find(|s| s.writable)
            .expect("a writable segment");
        for at in (data.paddr..data.paddr + data.filesz).step_by(PAGE_SIZE) {
            assert!(
                !is_file_page(host + at),
                "data page {at:#x} is mapped from the file"
            );
            assert!(is_present(host + at), "data page {at:#x} is not present");
        }
    }

    #[test]
    fn a_write_by_the_guest_stays_in_its_ram() {
        let (segments, mem) = kernel_and_ram();
        assert!(place_from_executable(&mem, crate::GUEST_KERNEL, &segments));
        let at = GuestAddress(segments[0].paddr.next_multiple_of(4096));
        mem.write_obj(0xdead_beef_u32, at).unwrap();
        assert_eq!(mem.read_obj::<u32>(at).unwrap(), 0xdead_beef);
        // A second RAM mapped from the same file sees the kernel's bytes.
        let (_, other) = kernel_and_ram();
        assert!(place_from_executable(
            &other,
            crate::GUEST_KERNEL,
            &segments
        ));
        let want = segments[0].offset + (at.0 - segments[0].paddr);
        let mut got = [0u8; 4];
        other.read_slice(&mut got, at).unwrap();
        assert_eq!(got, crate::GUEST_KERNEL[want as usize..want as usize + 4]);
    }

    #[test]
    fn bytes_outside_the_executable_are_copied_instead() {
        let (segments, mem) = kernel_and_ram();
        let heap = crate::GUEST_KERNEL.to_vec();
        assert!(!place_from_executable(&mem, &heap, &segments));
    }
}
