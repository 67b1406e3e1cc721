//! Can this host hold a snapshot's state? Everything that can be checked
//! without KVM, before any VM exists: the saved XCR0 and XSTATE_BV against
//! this KVM's leaf 0xD with [`restorable_on`] (the logic of
//! `vmm features compare`), the guest's CPUID policy and IA32_XSS, the
//! xsave image's own consistency and the component sizes; then the image is
//! re-laid out for this host's standard offsets.

use std::path::Path;

use xstate::buffer::{XCOMP_BV_COMPACTED, XSAVE_MIN_SIZE};
use xstate::{restorable_on, Format, XfeatureMask, XsaveBuf, XsaveInfo};

use super::error::SnapshotError;
use super::format::FormatError;
use super::state::Snapshot;
use crate::vstate::vcpu::MSR_IA32_XSS;

/// What [`check`] established: the state fits this host.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The guest's XCR0 as saved.
    pub xcr0: XfeatureMask,
    /// The components in use in the saved image.
    pub xstate_bv: XfeatureMask,
    /// The xsave image in this host's standard format for the guest's
    /// policy, ready for the xstate manager.
    pub standard: XsaveBuf,
    /// The source's standard offsets differed and the image was re-laid out.
    pub relaid: bool,
}

/// Check a decoded snapshot against a host's KVM leaf 0xD, without KVM.
pub fn check(path: &Path, snap: &Snapshot, host: &XsaveInfo) -> Result<Checked, SnapshotError> {
    let malformed = |m: String| SnapshotError::Format {
        path: path.to_path_buf(),
        source: FormatError::Malformed(m),
    };
    let incompatible = |reason: String| SnapshotError::Incompatible {
        path: path.to_path_buf(),
        reason,
    };
    if snap.vcpus.len() != 1 {
        return Err(incompatible(format!(
            "it holds {} vCPUs; this vmm runs guests with one",
            snap.vcpus.len()
        )));
    }
    let v = &snap.vcpus[0];
    let source = snap
        .meta
        .source_info()
        .map_err(|source| SnapshotError::Format {
            path: path.to_path_buf(),
            source,
        })?;
    let xcr0 = XfeatureMask::from_bits(
        v.xcr0()
            .ok_or_else(|| malformed("section \"vcpu0.xcrs\" holds no XCR0".into()))?,
    );
    let image = &v.xstate;
    if image.len() < XSAVE_MIN_SIZE {
        return Err(malformed(format!(
            "section \"vcpu0.xstate\" is {} bytes, shorter than an xsave header",
            image.len()
        )));
    }
    let xstate_bv = image.xstate_bv_mask();
    let xss = XfeatureMask::from_bits(v.msr(MSR_IA32_XSS).unwrap_or(0));
    // The precise refusal first: what the saved state needs that this host lacks.
    restorable_on(xcr0, xstate_bv, host).map_err(|e| incompatible(e.to_string()))?;
    let policy = snap.meta.policy();
    let missing = policy - host.supported_xcr0();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "the guest's CPUID policy {policy:#x} offers {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xcr0()
        )));
    }
    let missing = xss - host.supported_xss();
    if !missing.is_empty() {
        return Err(incompatible(format!(
            "IA32_XSS {xss:#x} enables supervisor {}; this host supports {:#x}",
            missing.describe(),
            host.supported_xss()
        )));
    }
    // The image must be what the saver writes: compacted, in-use only,
    // consistent with the saved XCR0 and the source's layout. (The VMM
    // compacts in software, so the source CPU's XSAVEC support is moot.)
    check_compacted(image, &source, xcr0)
        .map_err(|e| malformed(format!("section \"vcpu0.xstate\": {e}")))?;
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (s, t) = (source.component_by_index(i), host.component_by_index(i));
        let (Some(s), Some(t)) = (s, t) else { continue };
        if s.size != t.size {
            return Err(incompatible(format!(
                "{} is {} bytes on this host and {} bytes in the snapshot",
                XfeatureMask::from_bits(1 << i).describe(),
                t.size,
                s.size
            )));
        }
    }
    // The guest's policy covers its XCR0 (the manager's images are sized by
    // the policy); a snapshot whose XCR0 exceeds it is inconsistent.
    let layout_mask = policy | xcr0;
    let standard_src = xstate::expand_to_standard(&source, image, layout_mask)
        .map_err(|e| malformed(format!("section \"vcpu0.xstate\": {e}")))?;
    let (standard, relaid) = relayout(&source, host, &standard_src, layout_mask, xstate_bv)
        .map_err(|e| incompatible(format!("re-laying out the xsave image: {e}")))?;
    Ok(Checked {
        xcr0,
        xstate_bv,
        standard,
        relaid,
    })
}

/// Structural checks of a stored compacted image: the format bit, XCOMP_BV
/// within XCR0, XSTATE_BV within XCOMP_BV, zero reserved header bytes, the
/// length of its layout; then the standard image it expands to is
/// validated as KVM would see it (MXCSR reserved bits included).
fn check_compacted(image: &XsaveBuf, source: &XsaveInfo, xcr0: XfeatureMask) -> Result<(), String> {
    let view = image.view();
    let xcomp_bv = view.xcomp_bv();
    if xcomp_bv & XCOMP_BV_COMPACTED == 0 {
        return Err("a standard-format image; snapshots store the compacted format".into());
    }
    let comp = XfeatureMask::from_bits(xcomp_bv & !XCOMP_BV_COMPACTED);
    let bv = view.xstate_bv_mask();
    if !(comp - xcr0).is_empty() {
        return Err(format!(
            "XCOMP_BV {comp:#x} has components outside XCR0 {xcr0:#x}"
        ));
    }
    if !(bv - comp).is_empty() {
        return Err(format!(
            "XSTATE_BV {bv:#x} has components outside XCOMP_BV {comp:#x}"
        ));
    }
    if !view.header_reserved_is_zero() {
        return Err("reserved xsave header bytes are not zero".into());
    }
    let need = source
        .compacted_size(comp)
        .map_err(|e| format!("compacted layout of {comp:#x}: {e}"))?;
    if (image.len() as u64) < need as u64 {
        return Err(format!(
            "{} bytes, the compacted layout of {comp:#x} needs {need}",
            image.len()
        ));
    }
    let standard = xstate::expand_to_standard(source, image, xcr0).map_err(|e| e.to_string())?;
    xstate::validate(standard.as_bytes(), source, xcr0, XfeatureMask::EMPTY)
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A standard-format image of `source`'s layout, moved to `target`'s
/// standard offsets. Legacy region and header are common to both.
fn relayout(
    source: &XsaveInfo,
    target: &XsaveInfo,
    image: &XsaveBuf,
    mask: XfeatureMask,
    xstate_bv: XfeatureMask,
) -> Result<(XsaveBuf, bool), String> {
    let from = source
        .layout(mask, Format::Standard)
        .map_err(|e| format!("source layout of {mask:#x}: {e}"))?;
    let to = target
        .layout(mask, Format::Standard)
        .map_err(|e| format!("this host's layout of {mask:#x}: {e}"))?;
    if from == to {
        return Ok((image.clone(), false));
    }
    let mut out = XsaveBuf::standard_for(target, mask).map_err(|e| e.to_string())?;
    let head = XSAVE_MIN_SIZE;
    out.as_bytes_mut()[..head].copy_from_slice(&image.as_bytes()[..head]);
    for i in xstate_bv.user().iter_indices().filter(|&i| i >= 2) {
        let (Some(r), Some(w)) = (from.range_by_index(i), to.range_by_index(i)) else {
            return Err(format!(
                "component {i} is in use but has no standard offset"
            ));
        };
        if r.len() != w.len() {
            return Err(format!(
                "component {i} is {} bytes here, {} in the snapshot",
                w.len(),
                r.len()
            ));
        }
        out.as_bytes_mut()[w].copy_from_slice(&image.as_bytes()[r]);
    }
    Ok((out, true))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A standard image with every register of every component of `xcr0`
    /// holding a distinct pattern (x87 control words valid, MXCSR default).
    pub(crate) fn pattern_image(info: &XsaveInfo, xcr0: XfeatureMask) -> XsaveBuf {
        let mut img = XsaveBuf::standard_for(info, xcr0).unwrap();
        let layout = info.layout(xcr0, Format::Standard).unwrap();
        {
            let mut v = img.view_mut();
            v.set_fcw(0x027f);
            v.set_fsw(0x0100);
            v.set_ftw(0xff);
            v.set_mxcsr(0x1f80 | 0x8000);
            for i in 0..8 {
                v.set_st(i, [0x40 + i as u8; 16].map(|b| b ^ 0x5a));
            }
            for i in 0..16 {
                let mut x = [0u8; 16];
                for (k, b) in x.iter_mut().enumerate() {
                    *b = 0x80 ^ ((i as u8) << 4) ^ k as u8;
                }
                v.set_xmm(i, x);
            }
            for c in xcr0.iter_indices().filter(|&i| i >= 2) {
                if let Some(bytes) = v.component_by_index_mut(c, &layout) {
                    for (k, b) in bytes.iter_mut().enumerate() {
                        *b = (c as u8).wrapping_mul(37) ^ (k as u8).wrapping_mul(3) | 1;
                    }
                }
            }
            v.set_xstate_bv(xcr0.bits());
        }
        img
    }

    #[test]
    fn relayout_moves_components_to_the_target_offsets() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../xstate/tests/data");
        let text = std::fs::read_to_string(dir.join("intel-sapphire-rapids.json")).unwrap();
        let spr = xstate::CpuidProfile::from_json(&text)
            .unwrap()
            .xsave_info()
            .unwrap();
        let xcr0 = XfeatureMask::from_bits(0x2e7); // AVX-512 and PKRU
        let img = pattern_image(&spr, xcr0);
        let (same, relaid) = relayout(&spr, &spr, &img, xcr0, xcr0).unwrap();
        assert!(!relaid);
        assert_eq!(same, img);

        // A target without AMX whose PKRU sits 64 bytes further up (and
        // whose sizes say so).
        let mut raw: [xstate::CpuidRegs; 64] = core::array::from_fn(|i| spr.raw_subleaf(i as u32));
        raw[17] = xstate::CpuidRegs::default();
        raw[18] = xstate::CpuidRegs::default();
        raw[0].eax &= !0x60000;
        raw[9].ebx += 64;
        let end = raw[9].ebx + raw[9].eax;
        raw[0].ebx = end;
        raw[0].ecx = end;
        let target =
            XsaveInfo::from_raw(raw).unwrap_or_else(|e| panic!("synthetic target leaf 0xD: {e}"));
        let (moved, relaid) = relayout(&spr, &target, &img, xcr0, xcr0).unwrap();
        assert!(relaid);
        let (from, to) = (
            spr.layout(xcr0, Format::Standard).unwrap(),
            target.layout(xcr0, Format::Standard).unwrap(),
        );
        assert_eq!(
            &moved.as_bytes()[..XSAVE_MIN_SIZE],
            &img.as_bytes()[..XSAVE_MIN_SIZE]
        );
        for i in xcr0.iter_indices().filter(|&i| i >= 2) {
            let (r, w) = (
                from.range_by_index(i).unwrap(),
                to.range_by_index(i).unwrap(),
            );
            assert_eq!(&moved.as_bytes()[w], &img.as_bytes()[r], "component {i}");
        }
        assert_ne!(from.offset_by_index(9), to.offset_by_index(9));
    }
}
