//! Registers survive VM exits bit for bit, and a VMM-side edit is seen.
//!
//! One assembly block per check: XRSTOR a pattern image (every x87, SSE,
//! AVX and AVX-512 register and control word distinct and non-default),
//! XSAVE it back ("before": proves the CPU really holds the patterns), run
//! `count` exits (or one [`XSTATE_EDIT_PORT`] request), XSAVE ("after"),
//! XRSTOR the initial state for the compiled code that follows. No
//! compiled code runs between the two saves, so any difference is the
//! hypervisor's doing. [`compare`] names the first register that differs.
//!
//! Components checked: XCR0 & (x87 | SSE | AVX | opmask | ZMM_Hi256 |
//! Hi16_ZMM) ([`fill_mask`]). PKRU (it gates memory access), AMX (needs a
//! valid tile configuration) and MPX are left alone.
//!
//! The image is in the standard format; a component whose XSTATE_BV bit
//! the "after" save clears (the CPU or the VMM put it back to its init
//! state) is compared as its init value, so a lost component shows up as
//! its first register reading zero.

use core::arch::asm;
use core::fmt;
use core::mem::offset_of;

use xstate::buffer::offsets;
use xstate::{init_image, Format, InitMode, Layout, Xfeature, XfeatureMask, XsaveInfo, XsaveMut};

use super::exit_loop::exit_loops_asm;
use super::{carve, Env};
use crate::protocol::{
    xmm_edit_pattern, BENCH_MMIO_ADDR, BENCH_PIO_PORT, SNAPSHOT_PORT, XSTATE_EDIT_PORT,
};

/// What happens between the two saves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckExit {
    /// `count` 32-bit `out`s to [`BENCH_PIO_PORT`].
    Pio,
    /// `count` 32-bit stores to [`BENCH_MMIO_ADDR`].
    Mmio,
    /// `count` CPUIDs (leaf 0).
    Cpuid,
    /// One write of the register number to [`XSTATE_EDIT_PORT`]: the VMM is
    /// to set that XMM register to [`xmm_edit_pattern`].
    Edit(u32),
    /// Nothing (tests: the pattern round trip alone).
    Nothing,
    /// One write to [`SNAPSHOT_PORT`]: a VMM with a snapshot file saves the
    /// VM there and stops; the registers must come back after a restore.
    Snapshot,
}

impl CheckExit {
    fn code(self) -> u32 {
        match self {
            CheckExit::Pio => 0,
            CheckExit::Mmio => 1,
            CheckExit::Cpuid => 2,
            CheckExit::Edit(_) => 3,
            CheckExit::Snapshot => 5,
            CheckExit::Nothing => 4,
        }
    }
}

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
    Fcw,
    Fsw,
    Ftw,
    Fop,
    Fip,
    Fdp,
    Mxcsr,
    St(u8),
    Xmm(u8),
    YmmHi(u8),
    K(u8),
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
    pub reg: Reg,
    /// Byte within the register.
    pub byte: u32,
    pub expected: u8,
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

/// Writes the pattern image for `mask` (standard format, XSTATE_BV = mask)
/// into `img`; returns its length.
pub fn build_image(info: &XsaveInfo, mask: XfeatureMask, img: &mut [u8]) -> Option<usize> {
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
                mant |= u64::from(pattern_byte(0, i as u32, k)) << (8 * k);
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
            *b = pattern_byte(comp, u32::from(r), k);
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

/// Bytes [`run`] needs.
pub fn scratch_bytes(env: &Env) -> usize {
    let std = env
        .info
        .standard_size(fill_mask(env.xcr0))
        .unwrap_or(xstate::buffer::XSAVE_MIN_SIZE as u32) as usize;
    5 * std.next_multiple_of(64) + 64
}

/// Why a check could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckError {
    Scratch {
        need: usize,
        have: usize,
    },
    /// The xstate model has no layout for XCR0.
    Image,
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Scratch { need, have } => write!(f, "needs {need} bytes, got {have}"),
            CheckError::Image => f.write_str("no pattern image for XCR0"),
        }
    }
}

/// What one check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The components checked.
    pub mask: XfeatureMask,
    /// The first register that did not take the pattern (the CPU refused
    /// it: a guest-side problem, not the VMM's).
    pub load: Option<Mismatch>,
    /// The first register that differs after the exits from what it must
    /// hold (the pattern, with the edit applied for [`CheckExit::Edit`]).
    pub after: Option<Mismatch>,
    /// For [`CheckExit::Edit`]: the edited register still held its old
    /// pattern (the VMM did not apply the request at all).
    pub edit_ignored: bool,
    /// TSC cycles between the two saves.
    pub cycles: u64,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.load.is_none() && self.after.is_none()
    }
}

#[repr(C)]
struct Params {
    image: u64,
    before: u64,
    after: u64,
    init: u64,
    rfbm: u64,
    count: u64,
    kind: u32,
    edit: u32,
}

/// Runs one check.
///
/// # Safety
/// As for [`super::exits::timed_loop`]: port access for `Pio`/`Edit`, an
/// unbacked writable [`BENCH_MMIO_ADDR`] for `Mmio`; and XCR0 as the
/// hardware applies it must include `env.xcr0`'s checked components.
pub unsafe fn run(
    env: &Env,
    exit: CheckExit,
    count: u64,
    scratch: &mut [u8],
) -> Result<Outcome, CheckError> {
    let mask = fill_mask(env.xcr0);
    let need = scratch_bytes(env);
    if scratch.len() < need {
        return Err(CheckError::Scratch {
            need,
            have: scratch.len(),
        });
    }
    let len = env
        .info
        .standard_size(mask)
        .map_err(|_| CheckError::Image)? as usize;
    let piece = len.next_multiple_of(64);
    let (bufs, _) = carve(scratch, 5 * piece).ok_or(CheckError::Image)?;
    bufs.fill(0);
    let (image, rest) = bufs.split_at_mut(piece);
    let (init, rest) = rest.split_at_mut(piece);
    let (before, rest) = rest.split_at_mut(piece);
    let (after, expected) = rest.split_at_mut(piece);
    build_image(&env.info, mask, image).ok_or(CheckError::Image)?;
    init_image(&env.info, mask, InitMode::Minimal, init).map_err(|_| CheckError::Image)?;
    expected.copy_from_slice(image);
    let edit = match exit {
        CheckExit::Edit(r) => {
            apply_edit(expected, r);
            r
        }
        _ => 0,
    };
    let p = Params {
        image: image.as_ptr() as u64,
        before: before.as_mut_ptr() as u64,
        after: after.as_mut_ptr() as u64,
        init: init.as_ptr() as u64,
        rfbm: mask.bits(),
        count: count.max(1),
        kind: exit.code(),
        edit,
    };
    let cycles: u64;
    // SAFETY: the caller grants ports/MMIO and the XCR0 components. Every
    // area is 64-byte aligned and `len` (the standard size of `mask`)
    // long; the images are valid standard-format images (reserved header
    // bytes zero, MXCSR within every CPU's MXCSR_MASK). Between the pattern
    // XRSTOR and the final XRSTOR of the initial image only this block's
    // integer instructions run, and the block ends with the architectural
    // initial state (empty x87 stack, default FCW/MXCSR, zeroed vector
    // registers) for `mask`; every vector register is declared clobbered.
    // RBX (CPUID) is kept in R9; R12 is only read.
    unsafe {
        asm!(
            "mov rax, [r12 + {rfbm}]",
            "mov rdx, rax",
            "shr rdx, 32",
            "mov rdi, [r12 + {image}]",
            "xrstor64 [rdi]",
            "mov rdi, [r12 + {before}]",
            "xsave64 [rdi]",
            "mov r8, [r12 + {count}]",
            "mov ecx, [r12 + {kind}]",
            "lfence",
            "rdtsc",
            "lfence",
            "shl rdx, 32",
            "or rax, rdx",
            "mov r10, rax",
            "cmp ecx, 1",
            "je 21f",
            "cmp ecx, 2",
            "je 22f",
            "cmp ecx, 3",
            "je 23f",
            "cmp ecx, 5",
            "je 25f",
            "cmp ecx, 4",
            "je 29f",
            exit_loops_asm!(),
            "jmp 29f",
            "25:",
            "xor eax, eax",
            "mov edx, {snap_port}",
            "out dx, eax",
            "jmp 29f",
            "23:",
            "mov eax, [r12 + {edit}]",
            "mov edx, {edit_port}",
            "out dx, eax",
            "29:",
            "lfence",
            "rdtsc",
            "lfence",
            "shl rdx, 32",
            "or rax, rdx",
            "sub rax, r10",
            "mov r10, rax",
            "mov rax, [r12 + {rfbm}]",
            "mov rdx, rax",
            "shr rdx, 32",
            "mov rdi, [r12 + {after}]",
            "xsave64 [rdi]",
            "mov rdi, [r12 + {init}]",
            "xrstor64 [rdi]",
            "mov rax, r10",
            rfbm = const offset_of!(Params, rfbm),
            image = const offset_of!(Params, image),
            before = const offset_of!(Params, before),
            after = const offset_of!(Params, after),
            init = const offset_of!(Params, init),
            count = const offset_of!(Params, count),
            kind = const offset_of!(Params, kind),
            edit = const offset_of!(Params, edit),
            pio = const BENCH_PIO_PORT,
            mmio = const BENCH_MMIO_ADDR,
            edit_port = const XSTATE_EDIT_PORT,
            snap_port = const SNAPSHOT_PORT,
            in("r12") &p,
            lateout("rax") cycles,
            clobber_abi("C"),
            options(nostack),
        );
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
    let load = compare(&env.info, mask, image, before);
    let after_m = compare(&env.info, mask, expected, after);
    let edit_ignored = match exit {
        CheckExit::Edit(r) => {
            let at = offsets::XMM0 + 16 * (r as usize & 15);
            after_m.is_some() && after[at..at + 16] == image[at..at + 16]
        }
        _ => false,
    };
    Ok(Outcome {
        mask,
        load,
        after: after_m,
        edit_ignored,
        cycles,
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::bench::test_scratch;

    #[test]
    fn patterns_are_distinct_and_not_the_edit() {
        let mut seen = std::collections::BTreeSet::new();
        for c in [1u32, 2, 5, 6, 7] {
            for r in 0..16 {
                let v: std::vec::Vec<u8> = (0..16).map(|k| pattern_byte(c, r, k)).collect();
                assert!(seen.insert(v), "component {c} register {r}");
            }
        }
        for r in 0..16 {
            let v: std::vec::Vec<u8> = (0..16).map(|k| pattern_byte(1, r, k)).collect();
            assert_ne!(v[..], xmm_edit_pattern(r)[..]);
        }
    }

    #[test]
    fn compare_names_the_first_changed_register() {
        let env = Env::host();
        let mask = fill_mask(env.xcr0);
        let len = env.info.standard_size(mask).unwrap() as usize;
        let mut s = test_scratch(2 * len.next_multiple_of(64));
        let (a, rest) = carve(&mut s, len.next_multiple_of(64)).unwrap();
        let b = &mut rest[..len.next_multiple_of(64)];
        build_image(&env.info, mask, a).unwrap();
        b.copy_from_slice(a);
        assert_eq!(compare(&env.info, mask, a, b), None);
        b[offsets::XMM0 + 16 * 3 + 2] ^= 0x40;
        let m = compare(&env.info, mask, a, b).unwrap();
        assert_eq!((m.reg, m.byte), (Reg::Xmm(3), 2));
        assert_eq!(std::format!("{m}").split(' ').next(), Some("xmm3"));
        b.copy_from_slice(a);
        b[offsets::MXCSR] = 0x80;
        assert_eq!(compare(&env.info, mask, a, b).unwrap().reg, Reg::Mxcsr);
        if env.has_avx() {
            // AVX marked init in "after": YMM0's upper half reads as zero.
            b.copy_from_slice(a);
            b[offsets::XSTATE_BV] &= !0x4;
            assert_eq!(compare(&env.info, mask, a, b).unwrap().reg, Reg::YmmHi(0));
        }
        if env.has_avx512() {
            b.copy_from_slice(a);
            let at = env
                .info
                .layout(mask, Format::Standard)
                .unwrap()
                .offset(Xfeature::Hi16Zmm)
                .unwrap() as usize;
            b[at + 64 * 15 + 63] ^= 1;
            let m = compare(&env.info, mask, a, b).unwrap();
            assert_eq!((m.reg, m.byte), (Reg::Zmm(31), 63));
        }
        // x87 marked init: FCW reads as 0x037f, which differs from 0x027f
        // in its high byte.
        b.copy_from_slice(a);
        b[offsets::XSTATE_BV] &= !0x1;
        let m = compare(&env.info, mask, a, b).unwrap();
        assert_eq!((m.reg, m.byte, m.got), (Reg::Fcw, 1, 0x03));
        // The edit changes exactly XMM5.
        b.copy_from_slice(a);
        apply_edit(b, 5);
        let m = compare(&env.info, mask, a, b).unwrap();
        assert_eq!(m.reg, Reg::Xmm(5));
        apply_edit(a, 5);
        assert_eq!(compare(&env.info, mask, a, b), None);
    }

    /// On the host: the patterns load (every register takes its value) and
    /// survive CPUIDs, and the check sees that nobody applied an edit.
    #[test]
    fn round_trip_on_host() {
        let env = Env::host();
        let mut s = test_scratch(scratch_bytes(&env));
        for exit in [CheckExit::Nothing, CheckExit::Cpuid] {
            // SAFETY: no ports or MMIO; the host's XCR0 is env.xcr0.
            let o = unsafe { run(&env, exit, 100, &mut s) }.unwrap();
            assert_eq!(o.load, None, "{exit:?}");
            assert_eq!(o.after, None, "{exit:?}");
            assert!(o.passed());
            assert_eq!(o.mask, fill_mask(env.xcr0));
        }
        // Rust floating point still works after the block restored the
        // initial MXCSR (round to nearest, no FZ).
        let x = core::hint::black_box(1.0f64) / core::hint::black_box(3.0f64);
        assert_eq!(x, 1.0 / 3.0);
    }
}
