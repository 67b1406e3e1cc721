//! Conversions between this crate's types and KVM's: leaf 0xD from
//! KVM_GET_SUPPORTED_CPUID (or a vCPU's CPUID table), and the standard-format
//! XSAVE image of KVM_GET_XSAVE / KVM_SET_XSAVE (`kvm_xsave`, a 4096-byte
//! `[u32; 1024]` region) and KVM_GET_XSAVE2 / KVM_SET_XSAVE2 (the
//! [`kvm_bindings::Xsave`] wrapper: the same region followed by a flexible
//! array, sized by KVM_CAP_XSAVE2, for state past 4 KiB such as AMX tiles).
//!
//! KVM's image is always in the standard format (XCOMP_BV = 0).

use std::fmt;

use kvm_bindings::{kvm_cpuid_entry2, kvm_xsave, CpuId, Xsave};

use crate::buffer::XsaveBuf;
use crate::info::{CpuidRegs, InfoError, XsaveInfo};

/// Size of the fixed region of `struct kvm_xsave`.
pub const KVM_XSAVE_REGION_SIZE: usize = 4096;

impl XsaveInfo {
    /// Builds from the leaf-0xD entries of a KVM CPUID table (e.g. from
    /// `Kvm::get_supported_cpuid`). Missing subleaves read as zero.
    ///
    /// # Errors
    /// As [`XsaveInfo::from_kvm_entries`]: [`InfoError::NoLeaf0xd`] if the
    /// table has no leaf 0xD entry, otherwise any error of
    /// [`XsaveInfo::from_leaf_0xd`].
    ///
    /// # Examples
    /// What KVM lets a guest enable on this host (needs `/dev/kvm`):
    /// ```no_run
    /// use kvm_bindings::KVM_MAX_CPUID_ENTRIES;
    /// use kvm_ioctls::Kvm;
    /// use xstate::XsaveInfo;
    /// let kvm = Kvm::new()?;
    /// let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)?;
    /// let info = XsaveInfo::from_kvm_cpuid(&cpuid)?;
    /// println!("KVM supports XCR0 {:#x}", info.supported_xcr0());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_kvm_cpuid(cpuid: &CpuId) -> Result<Self, InfoError> {
        Self::from_kvm_entries(cpuid.as_slice())
    }

    /// Like [`XsaveInfo::from_kvm_cpuid`], from a slice of entries.
    ///
    /// # Errors
    /// - [`InfoError::NoLeaf0xd`]: no entry has `function` 0xD;
    /// - otherwise any error of [`XsaveInfo::from_leaf_0xd`] on the entries'
    ///   registers; a supported component whose subleaf has no entry reads
    ///   as zero and gives [`InfoError::MissingSubleaf`].
    ///
    /// # Examples
    /// ```
    /// use kvm_bindings::kvm_cpuid_entry2;
    /// use xstate::{Xfeature, XsaveInfo};
    /// // Leaf 0xD of a Zen 3 host's KVM_GET_SUPPORTED_CPUID: x87, SSE, AVX, PKRU.
    /// let entry = |index, eax, ebx, ecx| kvm_cpuid_entry2 {
    ///     function: 0xd,
    ///     index,
    ///     eax,
    ///     ebx,
    ///     ecx,
    ///     ..Default::default()
    /// };
    /// let entries = [
    ///     kvm_cpuid_entry2 { function: 0x1, ecx: 1 << 26, ..Default::default() },
    ///     entry(0, 0x207, 832, 2440),
    ///     entry(1, 0xf, 832, 0),
    ///     entry(2, 256, 576, 0),
    ///     entry(9, 8, 2432, 0),
    /// ];
    /// let info = XsaveInfo::from_kvm_entries(&entries)?;
    /// assert_eq!(info.supported_xcr0().bits(), 0x207);
    /// assert_eq!(info.component(Xfeature::Pkru).map(|c| c.standard_offset), Some(2432));
    /// assert_eq!(XsaveInfo::from_kvm_entries(&entries[..1]), Err(xstate::InfoError::NoLeaf0xd));
    /// # Ok::<(), xstate::InfoError>(())
    /// ```
    pub fn from_kvm_entries(entries: &[kvm_cpuid_entry2]) -> Result<Self, InfoError> {
        if !entries.iter().any(|e| e.function == 0xd) {
            return Err(InfoError::NoLeaf0xd);
        }
        Self::from_leaf_0xd(|i| {
            entries
                .iter()
                .find(|e| e.function == 0xd && e.index == i)
                .map(|e| CpuidRegs::new(e.eax, e.ebx, e.ecx, e.edx))
                .unwrap_or_default()
        })
    }
}

/// The size of the XSAVE image KVM_GET_XSAVE2 transfers for this VM
/// (KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2)), or 4096 where the capability is
/// missing and only KVM_GET_XSAVE exists.
///
/// # Examples
/// Reading a vCPU's whole image, AMX tiles included (needs `/dev/kvm`):
/// ```no_run
/// use kvm_bindings::Xsave;
/// use kvm_ioctls::Kvm;
/// use xstate::kvm::{kvm_xsave_size, xsave2_fam_len};
/// use xstate::XsaveBuf;
/// let kvm = Kvm::new()?;
/// let vm = kvm.create_vm()?;
/// let vcpu = vm.create_vcpu(0)?;
/// let size = kvm_xsave_size(&vm);
/// let mut xsave = Xsave::new(xsave2_fam_len(size))?;
/// // SAFETY: `xsave` is sized from KVM_CAP_XSAVE2 of this VM, and no
/// // feature is enabled with arch_prctl() after that.
/// unsafe { vcpu.get_xsave2(&mut xsave)? };
/// let image = XsaveBuf::from_kvm_xsave2(&xsave);
/// assert_eq!(image.xcomp_bv(), 0); // KVM's image is always standard format
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn kvm_xsave_size(vm: &kvm_ioctls::VmFd) -> usize {
    let n = vm.check_extension_int(kvm_ioctls::Cap::Xsave2);
    usize::try_from(n).unwrap_or(0).max(KVM_XSAVE_REGION_SIZE)
}

/// Number of `u32` FAM entries a [`kvm_bindings::Xsave`] needs for an image
/// of `total_size` bytes (what `Xsave::new` takes).
///
/// # Examples
/// ```
/// use xstate::kvm::xsave2_fam_len;
/// // Sapphire Rapids with AMX: KVM_CAP_XSAVE2 = 11008, 6912 bytes past the
/// // 4096-byte region.
/// assert_eq!(xsave2_fam_len(11008), 1728);
/// assert_eq!(xsave2_fam_len(4096), 0);
/// ```
pub fn xsave2_fam_len(total_size: usize) -> usize {
    total_size.saturating_sub(KVM_XSAVE_REGION_SIZE).div_ceil(4)
}

fn words_to_bytes(words: &[u32], out: &mut [u8]) {
    for (w, o) in words.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&w.to_le_bytes());
    }
}

fn bytes_to_words(bytes: &[u8], out: &mut [u32]) {
    out.fill(0);
    for (c, w) in bytes.chunks(4).zip(out.iter_mut()) {
        let mut a = [0u8; 4];
        a[..c.len()].copy_from_slice(c);
        *w = u32::from_le_bytes(a);
    }
}

impl XsaveBuf {
    /// Copies the 4096-byte region of a `kvm_xsave` (KVM_GET_XSAVE).
    pub fn from_kvm_xsave(x: &kvm_xsave) -> Self {
        let mut b = Self::new(KVM_XSAVE_REGION_SIZE);
        words_to_bytes(&x.region, b.as_bytes_mut());
        b
    }

    /// Copies the whole image of a KVM_GET_XSAVE2 wrapper (region + FAM).
    pub fn from_kvm_xsave2(x: &Xsave) -> Self {
        let fam = x.as_slice();
        let mut b = Self::new(KVM_XSAVE_REGION_SIZE + 4 * fam.len());
        let (head, tail) = b.as_bytes_mut().split_at_mut(KVM_XSAVE_REGION_SIZE);
        words_to_bytes(&x.as_fam_struct_ref().xsave.region, head);
        words_to_bytes(fam, tail);
        b
    }

    /// A `kvm_xsave` for KVM_SET_XSAVE. Bytes past the image are zero. Fails
    /// if the image holds nonzero bytes past 4096, which KVM_SET_XSAVE cannot
    /// carry (use [`XsaveBuf::to_kvm_xsave2`]).
    ///
    /// # Errors
    /// [`KvmXsaveError::TooLarge`] (`limit` 4096) naming the first nonzero
    /// byte past 4096.
    ///
    /// # Examples
    /// ```
    /// use xstate::kvm::KvmXsaveError;
    /// use xstate::XsaveBuf;
    /// // An 11008-byte Sapphire Rapids image with live AMX tile data at 2816.
    /// let mut image = XsaveBuf::new(11008);
    /// image.as_bytes_mut()[2816 + 2000] = 1;
    /// image.set_xstate_bv(0x40003u64);
    /// assert_eq!(
    ///     image.to_kvm_xsave().unwrap_err(),
    ///     KvmXsaveError::TooLarge { limit: 4096, offset: 4816 }
    /// );
    /// // KVM_SET_XSAVE2 carries all of it.
    /// let xsave2 = image.to_kvm_xsave2(11008)?;
    /// assert_eq!(XsaveBuf::from_kvm_xsave2(&xsave2), image);
    /// // Without tile data, the 4096-byte kvm_xsave round-trips.
    /// image.as_bytes_mut()[4816] = 0;
    /// let x = image.to_kvm_xsave()?;
    /// assert_eq!(x.region[128], 0x40003); // XSTATE_BV at byte 512
    /// assert_eq!(XsaveBuf::from_kvm_xsave(&x).as_bytes(), &image.as_bytes()[..4096]);
    /// # Ok::<(), KvmXsaveError>(())
    /// ```
    pub fn to_kvm_xsave(&self) -> Result<kvm_xsave, KvmXsaveError> {
        let bytes = self.as_bytes();
        check_tail(bytes, KVM_XSAVE_REGION_SIZE)?;
        let mut x = kvm_xsave::default();
        let n = bytes.len().min(KVM_XSAVE_REGION_SIZE);
        bytes_to_words(&bytes[..n], &mut x.region);
        Ok(x)
    }

    /// A KVM_SET_XSAVE2 wrapper of `total_size` bytes (from
    /// [`kvm_xsave_size`]; at least 4096). Fails if the image holds nonzero
    /// bytes past `total_size`.
    ///
    /// # Errors
    /// - [`KvmXsaveError::TooLarge`]: a nonzero byte past `total_size` (at
    ///   least 4096);
    /// - [`KvmXsaveError::Alloc`]: the wrapper refuses the FAM length (more
    ///   than `u32::MAX` entries) or cannot allocate it.
    ///
    /// See [`XsaveBuf::to_kvm_xsave`] for an example.
    pub fn to_kvm_xsave2(&self, total_size: usize) -> Result<Xsave, KvmXsaveError> {
        let total_size = total_size.max(KVM_XSAVE_REGION_SIZE);
        let bytes = self.as_bytes();
        check_tail(bytes, total_size)?;
        let fam_len = xsave2_fam_len(total_size);
        let mut x = Xsave::new(fam_len).map_err(|_| KvmXsaveError::Alloc(total_size))?;
        let n = bytes.len().min(KVM_XSAVE_REGION_SIZE);
        // SAFETY: only the fixed `region` array is written; the FAM length
        // (`len`) that the wrapper's invariants depend on is not touched.
        let region = &mut unsafe { x.as_mut_fam_struct() }.xsave.region;
        bytes_to_words(&bytes[..n], region);
        if bytes.len() > KVM_XSAVE_REGION_SIZE {
            let end = bytes.len().min(total_size);
            bytes_to_words(&bytes[KVM_XSAVE_REGION_SIZE..end], x.as_mut_slice());
        }
        Ok(x)
    }
}

/// Copies a standard-format image into a `kvm_xsave` (see
/// [`XsaveBuf::to_kvm_xsave`]), for callers that keep the image in their
/// own memory and reuse one `kvm_xsave`.
///
/// # Errors
/// [`KvmXsaveError::TooLarge`] (`limit` 4096) naming the first nonzero byte
/// of `bytes` past 4096.
///
/// # Examples
/// ```
/// use kvm_bindings::kvm_xsave;
/// use xstate::kvm::{write_kvm_xsave, KvmXsaveError};
/// let mut image = vec![0u8; 2440]; // Zen 3, XCR0 0x207
/// image[24..28].copy_from_slice(&0x1f80u32.to_le_bytes()); // MXCSR
/// let mut x = kvm_xsave::default();
/// write_kvm_xsave(&image, &mut x)?;
/// assert_eq!(x.region[6], 0x1f80); // bytes 24..28
/// let mut big = vec![0u8; 8192];
/// big[5000] = 1;
/// assert_eq!(
///     write_kvm_xsave(&big, &mut x),
///     Err(KvmXsaveError::TooLarge { limit: 4096, offset: 5000 })
/// );
/// # Ok::<(), KvmXsaveError>(())
/// ```
pub fn write_kvm_xsave(bytes: &[u8], dst: &mut kvm_xsave) -> Result<(), KvmXsaveError> {
    check_tail(bytes, KVM_XSAVE_REGION_SIZE)?;
    let n = bytes.len().min(KVM_XSAVE_REGION_SIZE);
    bytes_to_words(&bytes[..n], &mut dst.region);
    Ok(())
}

fn check_tail(bytes: &[u8], limit: usize) -> Result<(), KvmXsaveError> {
    if bytes.len() > limit {
        if let Some(p) = bytes[limit..].iter().position(|&b| b != 0) {
            return Err(KvmXsaveError::TooLarge {
                limit,
                offset: limit + p,
            });
        }
    }
    Ok(())
}

/// Why an image could not be converted for KVM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvmXsaveError {
    /// The image has state past what the KVM structure can carry.
    TooLarge {
        /// Bytes the structure carries.
        limit: usize,
        /// First nonzero byte beyond it.
        offset: usize,
    },
    /// The KVM_SET_XSAVE2 wrapper could not be allocated.
    Alloc(usize),
}

impl fmt::Display for KvmXsaveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvmXsaveError::TooLarge { limit, offset } => write!(
                f,
                "xsave image has state at byte {offset}, past the {limit} bytes the KVM call carries \
                 (use KVM_SET_XSAVE2)"
            ),
            KvmXsaveError::Alloc(n) => write!(f, "cannot allocate a {n}-byte KVM xsave structure"),
        }
    }
}

impl std::error::Error for KvmXsaveError {}
