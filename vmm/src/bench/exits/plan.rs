//! Which guest XCR0 values `vmm bench exits` measures, and what each row's
//! live state costs in bytes.
//!
//! The masks climb one register file at a time, each where KVM offers it
//! and the host has it enabled: x87|SSE, +AVX, +AVX-512 (opmask,
//! ZMM_Hi256, Hi16_ZMM), +AMX tiles, then the full XCR0 both allow when it
//! holds more (PKRU, say). `--quick` takes that full XCR0 alone.
//!
//! Why intersect with the host: kvm_pvm runs CPL3 guest code on the host's
//! XCR0 whatever the guest sets, and a hardware KVM cannot give a guest
//! state the host kernel has not enabled; KVM's table is the other bound
//! (it also decides whether the tiles are granted: see `crate::arch::amx`).

use guest::bench::exits::{ExitKind, Upper};
use xstate::{Xfeature, XfeatureMask, XsaveInfo};

/// The user state both KVM (`kvm`, its supported XCR0) and the host's OS
/// (`host`, its XCR0; `None` when it cannot be read) enable.
pub fn offered_xcr0(kvm: XfeatureMask, host: Option<XfeatureMask>) -> XfeatureMask {
    let both = host.map_or(kvm, |h| kvm & h);
    both.user()
}

/// The XCR0 values of a full run, narrowest first: x87|SSE, then AVX,
/// AVX-512 and the AMX tiles added one family at a time where `offered`
/// has the whole family, then `offered` itself when it is still wider
/// (components outside the families, such as PKRU) and a valid XCR0.
pub fn default_masks(offered: XfeatureMask) -> Vec<XfeatureMask> {
    let mut m = (XfeatureMask::LEGACY & offered) | Xfeature::X87.mask();
    let mut masks = vec![m];
    let families = [
        Xfeature::Avx.mask(),
        XfeatureMask::AVX512,
        XfeatureMask::AMX,
    ];
    for family in families {
        let next = m | family;
        if offered.contains_all(family) && next.validate_xcr0(offered).is_ok() {
            m = next;
            masks.push(m);
        }
    }
    if offered != m && offered.contains_all(m) && offered.validate_xcr0(offered).is_ok() {
        masks.push(offered);
    }
    masks
}

/// The XCR0 `--quick` measures: the widest of [`default_masks`].
pub fn quick_masks(offered: XfeatureMask) -> Vec<XfeatureMask> {
    default_masks(offered).pop().into_iter().collect()
}

/// Exit rows one boot of the guest at `xcr0` produces: for each exit
/// kind, a CPL3 row per width `xcr0` has and a CPL0 row.
pub fn rows_per_boot(xcr0: XfeatureMask) -> u64 {
    let widths = Upper::ALL.iter().filter(|u| u.available(xcr0)).count();
    (ExitKind::ALL.len() * (widths + 1)) as u64
}

/// The width of a row's variant (`cpl3-zmm`: `zmm`); `cpl0` rows and any
/// other variant run with the upper state clean.
pub fn upper_of_variant(variant: &str) -> Upper {
    match variant.split_once('-') {
        Some(_) => Upper::of_variant(variant).unwrap_or(Upper::Clean),
        None => Upper::Clean,
    }
}

/// The components a row leaves live during its exits: XINUSE as the guest
/// read it (limited to the row's XCR0), or where it could not, the row's
/// width under `xcr0` on top of x87|SSE.
pub fn live_state(
    measured: Option<XfeatureMask>,
    upper: Upper,
    xcr0: XfeatureMask,
) -> XfeatureMask {
    match measured {
        Some(m) => m & xcr0,
        None => (XfeatureMask::LEGACY | upper.live_under(xcr0)) & xcr0,
    }
}

/// Bytes of `live` in the compacted format (legacy region and header
/// included) by `info`'s leaf 0xD: what the in-use-only copy of an
/// exit's state takes, and what `eager-compact` keeps per exit. `None`
/// when `info` has no layout for it.
pub fn compacted_bytes(info: &XsaveInfo, live: XfeatureMask) -> Option<u64> {
    info.compacted_size(live).ok().map(u64::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bits(m: &[XfeatureMask]) -> Vec<u64> {
        m.iter().map(|m| m.bits()).collect()
    }

    fn x(b: u64) -> XfeatureMask {
        XfeatureMask::from_bits(b)
    }

    fn profile(json: &str) -> XsaveInfo {
        xstate::profile::CpuidProfile::from_json(json)
            .expect("bundled profile")
            .xsave_info()
            .expect("its leaf 0xD")
    }

    #[test]
    fn masks_climb_one_family_at_a_time() {
        // Zen 3 without PKU, Zen 3 with PKRU, Zen 4, Sapphire Rapids with
        // the tiles granted, and without them.
        assert_eq!(bits(&default_masks(x(0x7))), [0x3, 0x7]);
        assert_eq!(bits(&default_masks(x(0x207))), [0x3, 0x7, 0x207]);
        assert_eq!(bits(&default_masks(x(0xe7))), [0x3, 0x7, 0xe7]);
        assert_eq!(bits(&default_masks(x(0x2e7))), [0x3, 0x7, 0xe7, 0x2e7]);
        assert_eq!(bits(&default_masks(x(0x600e7))), [0x3, 0x7, 0xe7, 0x600e7]);
        assert_eq!(
            bits(&default_masks(x(0x602e7))),
            [0x3, 0x7, 0xe7, 0x600e7, 0x602e7]
        );
        // x87 alone: nothing to climb.
        assert_eq!(bits(&default_masks(x(0x1))), [0x1]);
        // Tiles without AVX-512 still get their step.
        assert_eq!(bits(&default_masks(x(0x60007))), [0x3, 0x7, 0x60007]);
    }

    #[test]
    fn quick_is_the_full_xcr0() {
        for full in [0x7, 0x207, 0xe7, 0x2e7, 0x600e7, 0x602e7] {
            assert_eq!(bits(&quick_masks(x(full))), [full], "{full:#x}");
        }
    }

    /// A KVM that offers less than the host bounds the masks, and so does
    /// a host that enables less than KVM lists.
    #[test]
    fn kvm_offering_less_than_the_host() {
        // AVX-512 host, KVM without AVX-512 (an older KVM, a policy).
        let o = offered_xcr0(x(0x207), Some(x(0x2e7)));
        assert_eq!(o.bits(), 0x207);
        assert_eq!(bits(&default_masks(o)), [0x3, 0x7, 0x207]);
        // Tiles not granted: KVM's table lacks them, the host has them.
        let o = offered_xcr0(x(0x2e7), Some(x(0x602e7)));
        assert_eq!(bits(&quick_masks(o)), [0x2e7]);
        // kvm_pvm listing what the host has not enabled.
        assert_eq!(offered_xcr0(x(0x2e7), Some(x(0xe7))).bits(), 0xe7);
        // Host XCR0 unknown: KVM's table alone; supervisor bits never.
        assert_eq!(offered_xcr0(x(0x18e7), None).bits(), 0xe7);
    }

    #[test]
    fn rows_per_boot_follow_the_widths() {
        let rows: Vec<u64> = [0x3, 0x7, 0xe7, 0x600e7]
            .into_iter()
            .map(|b| rows_per_boot(x(b)))
            .collect();
        assert_eq!(rows, [6, 9, 12, 15]);
    }

    #[test]
    fn variants_to_widths() {
        assert_eq!(upper_of_variant("cpl3-clean"), Upper::Clean);
        assert_eq!(upper_of_variant("cpl3-zmm"), Upper::Zmm);
        assert_eq!(upper_of_variant("cpl3-tiles"), Upper::Tiles);
        assert_eq!(upper_of_variant("cpl0"), Upper::Clean);
        assert_eq!(upper_of_variant("cpl3-what"), Upper::Clean);
    }

    /// The byte figures come from the layout: the legacy region and header
    /// (576), AVX 256, opmask 64, ZMM_Hi256 512, Hi16_ZMM 1024; on
    /// Sapphire Rapids the tile configuration (64, 64-byte aligned) and the
    /// tile data (8192).
    #[test]
    fn rows_byte_figures() {
        let zen4 = profile(include_str!("../../../../profiles/zen4-genoa.json"));
        let spr = profile(include_str!("../../../../profiles/sapphire-rapids.json"));
        let zen3 = profile(include_str!("../../../../profiles/zen3-milan.json"));
        let bytes =
            |info: &XsaveInfo, upper, xcr0| compacted_bytes(info, live_state(None, upper, x(xcr0)));
        assert_eq!(bytes(&zen3, Upper::Clean, 0x7), Some(576));
        assert_eq!(bytes(&zen3, Upper::Ymm, 0x207), Some(832));
        assert_eq!(bytes(&zen4, Upper::Clean, 0xe7), Some(576));
        assert_eq!(bytes(&zen4, Upper::Ymm, 0xe7), Some(832));
        assert_eq!(bytes(&zen4, Upper::Zmm, 0xe7), Some(2432));
        assert_eq!(bytes(&spr, Upper::Zmm, 0x600e7), Some(2432));
        // Tiles on top of ZMM: TILECFG at 2432 (aligned), TILEDATA after.
        assert_eq!(bytes(&spr, Upper::Tiles, 0x600e7), Some(2432 + 64 + 8192));
        // Measured XINUSE wins over the model, limited to the row's XCR0:
        // PKRU live adds its 8 bytes; bits outside XCR0 are not the guest's.
        let measured = live_state(Some(x(0x2e7)), Upper::Zmm, x(0x2e7));
        assert_eq!(compacted_bytes(&spr, measured), Some(2440));
        let outside = live_state(Some(x(0xe7)), Upper::Clean, x(0x7));
        assert_eq!(outside.bits(), 0x7);
        // A component the CPU lacks has no layout.
        assert_eq!(compacted_bytes(&zen4, XfeatureMask::AMX), None);
    }
}
