//! How the sections that are not JSON are encoded: KVM UAPI structures as
//! the kernel lays them out, (index, value) pairs for MSRs, the XFD MSRs,
//! and CPUID entries; each decoder refuses bytes of the wrong length.

use kvm_bindings::kvm_cpuid_entry2;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::snapshot::format::FormatError;
use crate::vstate::xfd::XfdMsrs;

/// The bytes of a KVM UAPI structure, as the kernel lays it out (kvm-bindings
/// derives zerocopy's traits for these under its `serde` feature).
pub(super) fn pod_bytes<T: IntoBytes + Immutable>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

/// A KVM UAPI structure from exactly its bytes.
pub(super) fn pod_from<T: FromBytes>(name: &str, b: &[u8]) -> Result<T, FormatError> {
    T::read_from_bytes(b).map_err(|_| {
        FormatError::Malformed(format!(
            "section \"{name}\" is {} bytes, expected {}",
            b.len(),
            std::mem::size_of::<T>()
        ))
    })
}

pub(super) fn pairs_to_bytes(pairs: &[(u32, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 * pairs.len());
    for (k, v) in pairs {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

pub(super) fn pairs_from(name: &str, b: &[u8]) -> Result<Vec<(u32, u64)>, FormatError> {
    if !b.len().is_multiple_of(16) {
        return Err(FormatError::Malformed(format!(
            "section \"{name}\" is {} bytes, not a whole number of 16-byte entries",
            b.len()
        )));
    }
    let mut out: Vec<(u32, u64)> = Vec::with_capacity(b.len() / 16);
    for (i, c) in b.chunks_exact(16).enumerate() {
        let key = u32::from_le_bytes(c[0..4].try_into().expect("4"));
        let pad = u32::from_le_bytes(c[4..8].try_into().expect("4"));
        if pad != 0 {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" entry {i} ({key:#x}): reserved padding {pad:#x} is not zero"
            )));
        }
        if out.iter().any(|&(k, _)| k == key) {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" holds {key:#x} twice"
            )));
        }
        out.push((key, u64::from_le_bytes(c[8..16].try_into().expect("8"))));
    }
    Ok(out)
}

/// The `vcpuN.xfd` section: exactly `IA32_XFD` and `IA32_XFD_ERR`.
pub(super) fn xfd_from(name: &str, b: &[u8]) -> Result<XfdMsrs, FormatError> {
    let pairs = pairs_from(name, b)?;
    XfdMsrs::from_pairs(&pairs).ok_or_else(|| {
        FormatError::Malformed(format!(
            "section \"{name}\" must hold exactly IA32_XFD (0x1c4) and IA32_XFD_ERR (0x1c5), \
             holds {:x?}",
            pairs.iter().map(|(i, _)| i).collect::<Vec<_>>()
        ))
    })
}

pub(super) fn cpuid_to_bytes(entries: &[kvm_cpuid_entry2]) -> Vec<u8> {
    let mut out = Vec::with_capacity(40 * entries.len());
    for e in entries {
        for v in [
            e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx, 0, 0, 0,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

pub(super) fn cpuid_from(name: &str, b: &[u8]) -> Result<Vec<kvm_cpuid_entry2>, FormatError> {
    if !b.len().is_multiple_of(40) {
        return Err(FormatError::Malformed(format!(
            "section \"{name}\" is {} bytes, not a whole number of 40-byte kvm_cpuid_entry2",
            b.len()
        )));
    }
    let mut out: Vec<kvm_cpuid_entry2> = Vec::with_capacity(b.len() / 40);
    for c in b.chunks_exact(40) {
        let w = |i: usize| u32::from_le_bytes(c[4 * i..4 * i + 4].try_into().expect("4"));
        let e = kvm_cpuid_entry2 {
            function: w(0),
            index: w(1),
            flags: w(2),
            eax: w(3),
            ebx: w(4),
            ecx: w(5),
            edx: w(6),
            padding: [0; 3],
        };
        if (7..10).any(|i| w(i) != 0) {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" leaf {:#x}.{}: reserved padding is not zero",
                e.function, e.index
            )));
        }
        if out
            .iter()
            .any(|o| o.function == e.function && o.index == e.index)
        {
            return Err(FormatError::Malformed(format!(
                "section \"{name}\" holds leaf {:#x}.{} twice",
                e.function, e.index
            )));
        }
        out.push(e);
    }
    Ok(out)
}
