//! The register patterns of the xstate check: the image XRSTOR loads
//! (every x87, SSE, AVX and AVX-512 register distinct and non-default),
//! the edit the VMM is asked to make, and the comparison that names the
//! first register that changed. Pure data work on standard-format images:
//! no assembly, testable anywhere.

use core::fmt;

use xstate::buffer::offsets;
use xstate::{init_image, Format, InitMode, Layout, Xfeature, XfeatureMask, XsaveInfo, XsaveMut};

use crate::protocol::xmm_edit_pattern;

/// The x87 control word in the pattern (53-bit precision, all masked).
pub const FCW_PATTERN: u16 = 0x027f;
/// The x87 status word in the pattern (C0 set, TOP 0, no exceptions).
pub const FSW_PATTERN: u16 = 0x0100;
/// MXCSR in the pattern: FZ, round toward zero, all masked, IE flag set.
/// Only architectural bits (no DAZ, which old CPUs' MXCSR_MASK lacks).
pub const MXCSR_PATTERN: u32 = 0xff81;

/// The components the check fills: `xcr0` & (x87 | SSE | AVX | AVX-512).
pub fn fill_mask(xcr0: XfeatureMask) -> XfeatureMask {
    xcr0 & (XfeatureMask::AVX | XfeatureMask::AVX512)
}

/// Byte `k` of register `reg` of component `component` in the pattern:
/// distinct across registers and components, never the edit pattern.
/// (`component * 32 + reg` < 256 times an odd number is a bijection
/// modulo 256, so byte 0 alone tells every register apart.)
pub const fn pattern_byte(component: u32, reg: u32, k: usize) -> u8 {
    let seed = (component * 32 + reg).wrapping_mul(0x9d).wrapping_add(0x11) as u8;
    seed ^ (k as u8).wrapping_mul(0x07)
}

/// One architectural register (or control field) of the checked state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    /// x87 control word.
    Fcw,
    /// x87 status word.
    Fsw,
    /// x87 tag word (abridged, as FXSAVE stores it).
    Ftw,
    /// x87 last opcode.
    Fop,
    /// x87 last instruction pointer.
    Fip,
    /// x87 last data pointer.
    Fdp,
    /// SSE control and status.
    Mxcsr,
    /// x87 register ST(i) (MM(i)).
    St(u8),
    /// XMM register i.
    Xmm(u8),
    /// Upper half of YMM register i.
    YmmHi(u8),
    /// AVX-512 opmask register k(i).
    K(u8),
    /// Upper 256 bits of ZMM register i (0..=15).
    ZmmHi256(u8),
    /// ZMM16-31 (Hi16_ZMM), whole.
    Zmm(u8),
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reg::Fcw => f.write_str("x87 FCW"),
            Reg::Fsw => f.write_str("x87 FSW"),
            Reg::Ftw => f.write_str("x87 FTW"),
            Reg::Fop => f.write_str("x87 FOP"),
            Reg::Fip => f.write_str("x87 FIP"),
            Reg::Fdp => f.write_str("x87 FDP"),
            Reg::Mxcsr => f.write_str("MXCSR"),
            Reg::St(i) => write!(f, "st{i}"),
            Reg::Xmm(i) => write!(f, "xmm{i}"),
            Reg::YmmHi(i) => write!(f, "ymm{i}[255:128]"),
            Reg::K(i) => write!(f, "k{i}"),
            Reg::ZmmHi256(i) => write!(f, "zmm{i}[511:256]"),
            Reg::Zmm(i) => write!(f, "zmm{i}"),
        }
    }
}

/// The first byte that differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The register.
    pub reg: Reg,
    /// Byte within the register.
    pub byte: u32,
    /// What the byte must hold.
    pub expected: u8,
    /// What it held.
    pub got: u8,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} byte {}: {:#04x} -> {:#04x}",
            self.reg, self.byte, self.expected, self.got
        )
    }
}

/// Every checked register of `mask` under the standard `layout`: (register,
/// component, byte range in the area).
fn registers(
    mask: XfeatureMask,
    layout: &Layout,
) -> impl Iterator<Item = (Reg, u32, core::ops::Range<usize>)> + '_ {
    use offsets as o;
    const X87: [(Reg, usize, usize); 6] = [
        (Reg::Fcw, o::FCW, 2),
        (Reg::Fsw, o::FSW, 2),
        (Reg::Ftw, o::FTW, 1),
        (Reg::Fop, o::FOP, 2),
        (Reg::Fip, o::FIP, 8),
        (Reg::Fdp, o::FDP, 8),
    ];
    let x87 = mask.contains(Xfeature::X87);
    let sse_or_avx = mask.contains(Xfeature::Sse) || mask.contains(Xfeature::Avx);
    let env = X87
        .into_iter()
        .filter(move |_| x87)
        .map(|(r, at, n)| (r, 0, at..at + n));
    let st = (0..8u8).filter(move |_| x87).map(|i| {
        (
            Reg::St(i),
            0,
            o::ST0 + 16 * i as usize..o::ST0 + 16 * i as usize + 10,
        )
    });
    // MXCSR travels with SSE or AVX; compared as SSE (never normalised).
    let mxcsr = core::iter::once((Reg::Mxcsr, u32::MAX, o::MXCSR..o::MXCSR + 4))
        .filter(move |_| sse_or_avx);
    let sse = mask.contains(Xfeature::Sse);
    let xmm = (0..16u8).filter(move |_| sse).map(|i| {
        (
            Reg::Xmm(i),
            1,
            o::XMM0 + 16 * i as usize..o::XMM0 + 16 * i as usize + 16,
        )
    });
    let comp = move |f: Xfeature, n: u8, width: usize, reg: fn(u8) -> Reg| {
        let off = if mask.contains(f) {
            layout.offset(f)
        } else {
            None
        };
        (0..n).filter_map(move |i| {
            off.map(|off| {
                let at = off as usize + width * i as usize;
                (reg(i), f.index(), at..at + width)
            })
        })
    };
    env.chain(st)
        .chain(mxcsr)
        .chain(xmm)
        .chain(comp(Xfeature::Avx, 16, 16, Reg::YmmHi))
        .chain(comp(Xfeature::Opmask, 8, 8, Reg::K))
        .chain(comp(Xfeature::ZmmHi256, 16, 32, Reg::ZmmHi256))
        .chain(comp(Xfeature::Hi16Zmm, 16, 64, |i| Reg::Zmm(i + 16)))
}

/// What CPU `cpu`'s pattern XORs into every vector-register byte: 0 for
/// CPU 0 (the single-CPU pattern), distinct and odd-spaced for the others,
/// so two CPUs never hold the same register bytes.
pub const fn cpu_salt(cpu: u32) -> u8 {
    (cpu as u8).wrapping_mul(0x5b)
}

/// Writes the pattern image for `mask` (standard format, XSTATE_BV = mask)
/// into `img`; returns its length.
pub fn build_image(info: &XsaveInfo, mask: XfeatureMask, img: &mut [u8]) -> Option<usize> {
    build_image_for(info, mask, img, 0)
}

/// [`build_image`] with CPU `cpu`'s pattern: every XMM, YMM, opmask and
/// ZMM byte XORed with [`cpu_salt`], the x87 registers' mantissas too (the
/// control words stay architectural).
pub fn build_image_for(
    info: &XsaveInfo,
    mask: XfeatureMask,
    img: &mut [u8],
    cpu: u32,
) -> Option<usize> {
    let salt = cpu_salt(cpu);
    let len = init_image(info, mask, InitMode::AllOfXcr0, img).ok()?;
    let layout = info.layout(mask, Format::Standard).ok()?;
    let mut v = XsaveMut::new(&mut img[..len]).ok()?;
    if mask.contains(Xfeature::X87) {
        v.set_fcw(FCW_PATTERN);
        v.set_fsw(FSW_PATTERN);
        v.set_ftw(0xff);
        for i in 0..8 {
            let mut st = [0u8; 16];
            // A normal 80-bit value: explicit integer bit, exponent near 1.
            let mut mant = 0x8000_0000_0000_0000u64;
            for k in 0..7 {
                mant |= u64::from(pattern_byte(0, i as u32, k) ^ salt) << (8 * k);
            }
            st[..8].copy_from_slice(&mant.to_le_bytes());
            st[8..10].copy_from_slice(&(0x3fffu16 + i as u16).to_le_bytes());
            v.set_st(i, st);
        }
    }
    if mask.contains(Xfeature::Sse) || mask.contains(Xfeature::Avx) {
        v.set_mxcsr(MXCSR_PATTERN);
    }
    for (reg, comp, range) in registers(mask, &layout) {
        let r = match reg {
            Reg::Xmm(i) | Reg::YmmHi(i) | Reg::K(i) | Reg::ZmmHi256(i) | Reg::Zmm(i) => i,
            _ => continue,
        };
        for (k, b) in v.as_bytes_mut()[range].iter_mut().enumerate() {
            *b = pattern_byte(comp, u32::from(r), k) ^ salt;
        }
    }
    Some(len)
}

/// Replaces XMM`reg` in a pattern image with what the VMM is asked to
/// write ([`xmm_edit_pattern`]).
pub fn apply_edit(img: &mut [u8], reg: u32) {
    let at = offsets::XMM0 + 16 * (reg as usize & 15);
    img[at..at + 16].copy_from_slice(&xmm_edit_pattern(reg));
}

/// The first register of `mask` in which `got` differs from `expected`
/// (both standard format). Components `got`'s XSTATE_BV marks as init are
/// read as their init values.
pub fn compare(
    info: &XsaveInfo,
    mask: XfeatureMask,
    expected: &[u8],
    got: &[u8],
) -> Option<Mismatch> {
    let layout = info.layout(mask, Format::Standard).ok()?;
    let bv = {
        let mut b = [0u8; 8];
        b.copy_from_slice(&got[offsets::XSTATE_BV..offsets::XSTATE_BV + 8]);
        u64::from_le_bytes(b)
    };
    for (reg, comp, range) in registers(mask, &layout) {
        let init = comp != u32::MAX && bv & (1 << comp) == 0;
        for (k, at) in range.enumerate() {
            let g = if !init {
                got[at]
            } else if reg == Reg::Fcw {
                xstate::buffer::FCW_INIT.to_le_bytes()[k]
            } else {
                0
            };
            if g != expected[at] {
                return Some(Mismatch {
                    reg,
                    byte: k as u32,
                    expected: expected[at],
                    got: g,
                });
            }
        }
    }
    None
}
