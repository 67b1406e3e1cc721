//! A vCPU's own KVM counters (`KVM_GET_STATS_FD`, Linux 5.14+): how the
//! halt watch tells a vCPU that stayed in one HLT from one that was woken,
//! ran and halted again between two looks.
//!
//! KVM's binary statistics are a file: a header, one descriptor per
//! counter (its name, size and offset), then the values. The descriptors
//! are read once; each look is one `pread` of the data block.
//! Documented in the kernel's `Documentation/virt/kvm/api.rst`, "KVM_GET_STATS_FD".

use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::fs::FileExt;

use kvm_ioctls::VcpuFd;

vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, kvm_bindings::KVMIO, 0xce);

/// The counters whose sum moves whenever the vCPU does something a wait
/// cannot: executes a HLT (each halt is one `halt_exits`), or takes an
/// interrupt or NMI KVM injects. A vCPU parked in one HLT moves none of
/// them, however often the VMM kicks it out of `KVM_RUN` to look.
pub const PROGRESS: [&str; 3] = ["halt_exits", "irq_injections", "nmi_injections"];

/// The header's size: six `u32` (flags, name size, descriptor count, and
/// the id, descriptors' and data's offsets).
const HEADER: usize = 24;
/// A descriptor's fixed part before its name: flags (u32), exponent
/// (i16), size in u64 words (u16), offset in the data block (u32),
/// bucket size (u32).
const DESC_FIXED: usize = 16;
/// The most descriptors or data bytes believed: a file claiming more is
/// not read (KVM has about 50 vCPU counters, 3 KiB of data).
const MAX_DESCRIPTORS: usize = 4096;
const MAX_DATA: usize = 1 << 20;

/// Where [`PROGRESS`] lies in a statistics file's data block.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// The data block's offset in the file.
    pub data_offset: u64,
    /// The data block's size in bytes: up to the last counter's end.
    pub data_len: usize,
    /// Each [`PROGRESS`] counter's byte offset in the data block.
    pub counters: Vec<usize>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The descriptors' count and name size a header gives, if believable.
fn descriptor_shape(header: &[u8]) -> Option<(usize, usize)> {
    let name_size = u32_at(header, 4)? as usize;
    let count = u32_at(header, 8)? as usize;
    (count <= MAX_DESCRIPTORS && name_size != 0 && name_size <= 4096).then_some((count, name_size))
}

/// Find [`PROGRESS`] given the header and the descriptor block. `None`
/// when a counter is missing or not one `u64`, or the layout is not
/// believable.
pub fn layout(header: &[u8], descriptors: &[u8]) -> Option<Layout> {
    let (count, name_size) = descriptor_shape(header)?;
    let data_offset = u64::from(u32_at(header, 20)?);
    let each = DESC_FIXED + name_size;
    let mut counters = vec![None; PROGRESS.len()];
    for i in 0..count {
        let d = descriptors.get(i * each..(i + 1) * each)?;
        let name = &d[DESC_FIXED..];
        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
        let Some(slot) = PROGRESS.iter().position(|p| p.as_bytes() == name) else {
            continue;
        };
        // One u64 counter.
        if u16_at(d, 6)? != 1 {
            return None;
        }
        counters[slot] = Some(u32_at(d, 8)? as usize);
    }
    let counters: Vec<usize> = counters.into_iter().collect::<Option<_>>()?;
    let data_len = counters.iter().map(|&o| o + 8).max()?;
    (data_len <= MAX_DATA).then_some(Layout {
        data_offset,
        data_len,
        counters,
    })
}

/// The sum of the [`PROGRESS`] counters in a data block read at
/// [`Layout::data_offset`].
pub fn progress(layout: &Layout, data: &[u8]) -> Option<u64> {
    layout.counters.iter().try_fold(0u64, |sum, &o| {
        let v = u64::from_le_bytes(data.get(o..o + 8)?.try_into().ok()?);
        Some(sum.wrapping_add(v))
    })
}

/// One vCPU's statistics file, opened and understood.
#[derive(Debug)]
pub struct VcpuStats {
    file: File,
    layout: Layout,
}

impl VcpuStats {
    /// Open `vcpu`'s statistics. `None` where KVM has none (before 5.14)
    /// or lacks one of the [`PROGRESS`] counters.
    pub fn open(vcpu: &VcpuFd) -> Option<Self> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file
        // descriptor (or -1); `vcpu` is a live vCPU fd.
        let fd = unsafe { vmm_sys_util::ioctl::ioctl(vcpu, KVM_GET_STATS_FD()) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by KVM and nothing else owns it.
        let file = unsafe { File::from_raw_fd(fd) };
        let mut header = [0u8; HEADER];
        file.read_exact_at(&mut header, 0).ok()?;
        let (count, name_size) = descriptor_shape(&header)?;
        let desc_offset = u64::from(u32_at(&header, 16)?);
        let mut descriptors = vec![0u8; count * (DESC_FIXED + name_size)];
        file.read_exact_at(&mut descriptors, desc_offset).ok()?;
        let layout = layout(&header, &descriptors)?;
        Some(Self { file, layout })
    }

    /// The current sum of the [`PROGRESS`] counters.
    pub fn progress(&self) -> Option<u64> {
        let mut data = vec![0u8; self.layout.data_len];
        self.file
            .read_exact_at(&mut data, self.layout.data_offset)
            .ok()?;
        progress(&self.layout, &data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statistics file as KVM lays it out: header, descriptors (names
    /// of `name_size` bytes), data.
    fn file(name_size: usize, counters: &[(&str, u16, u32, u64)]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let each = DESC_FIXED + name_size;
        let desc_offset = HEADER + name_size; // the id string follows the header
        let data_offset = desc_offset + counters.len() * each;
        let mut header = Vec::new();
        for v in [
            0u32,
            name_size as u32,
            counters.len() as u32,
            HEADER as u32,
            desc_offset as u32,
            data_offset as u32,
        ] {
            header.extend_from_slice(&v.to_le_bytes());
        }
        let mut desc = Vec::new();
        let mut data = vec![0u8; 64 * 8];
        for &(name, size, offset, value) in counters {
            desc.extend_from_slice(&0u32.to_le_bytes());
            desc.extend_from_slice(&0i16.to_le_bytes());
            desc.extend_from_slice(&size.to_le_bytes());
            desc.extend_from_slice(&offset.to_le_bytes());
            desc.extend_from_slice(&0u32.to_le_bytes());
            let mut n = name.as_bytes().to_vec();
            n.resize(name_size, 0);
            desc.extend_from_slice(&n);
            data[offset as usize..offset as usize + 8].copy_from_slice(&value.to_le_bytes());
        }
        (header, desc, data)
    }

    #[test]
    fn the_progress_counters_are_found_by_name_and_summed() {
        let (h, d, data) = file(
            48,
            &[
                ("halt_wakeup", 1, 0, 1000),
                ("halt_exits", 1, 8, 3),
                ("irq_exits", 1, 16, 1000),
                ("irq_injections", 1, 24, 5),
                ("halt_wait_hist", 32, 32, 7),
                ("nmi_injections", 1, 296, 2),
            ],
        );
        let l = layout(&h, &d).unwrap();
        assert_eq!(l.counters, vec![8, 24, 296]);
        assert_eq!(l.data_len, 304);
        assert_eq!(l.data_offset as usize, HEADER + 48 + 6 * 64);
        assert_eq!(progress(&l, &data), Some(10));
    }

    #[test]
    fn a_missing_or_odd_counter_gives_no_layout() {
        let (h, d, _) = file(48, &[("halt_exits", 1, 0, 0), ("irq_injections", 1, 8, 0)]);
        assert_eq!(layout(&h, &d), None, "nmi_injections missing");
        let (h, d, _) = file(
            48,
            &[
                ("halt_exits", 2, 0, 0),
                ("irq_injections", 1, 16, 0),
                ("nmi_injections", 1, 24, 0),
            ],
        );
        assert_eq!(layout(&h, &d), None, "a counter of two words");
        let (h, d, _) = file(48, &[("halt_exits", 1, 0, 0)]);
        assert_eq!(layout(&h, &d[..10]), None, "descriptors cut short");
        assert_eq!(layout(&h[..8], &d), None, "header cut short");
    }

    #[test]
    fn a_short_data_block_gives_no_progress() {
        let (h, d, data) = file(
            16,
            &[
                ("halt_exits", 1, 0, 1),
                ("irq_injections", 1, 8, 1),
                ("nmi_injections", 1, 16, 1),
            ],
        );
        let l = layout(&h, &d).unwrap();
        assert_eq!(progress(&l, &data[..24]), Some(3));
        assert_eq!(progress(&l, &data[..20]), None);
    }
}
