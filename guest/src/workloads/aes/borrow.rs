//! The price of borrowing the vector registers for one message: what a
//! kernel pays around in-kernel SIMD (Linux's `kernel_fpu_begin`/`end`),
//! modelled as an XRSTOR + XSAVE pair of the task's live extended state
//! per message, with XMM, YMM or ZMM state live.
//!
//! The live state is made exact, not left to whatever the compiler last
//! touched: [`Borrow::new`] writes non-zero values into the registers of
//! the chosen width, saves them with XSAVE and sets the saved XSTATE_BV to
//! just those components, so every [`Borrow::pair`] first restores that
//! state (XINUSE = those components) and then saves it, as a kernel saves a
//! task's dirty registers. XSAVE and XRSTOR work at CPL3 once CR4.OSXSAVE
//! is set; XSAVES (the kernel's compacted, supervisor form) is CPL0-only,
//! so it cannot be timed where the workloads run.

use core::arch::asm;
use core::fmt::Write;

use crate::workloads::features::{CpuFeatures, XCR0_AVX512_STATE};
use crate::workloads::live::Live;
use crate::workloads::text::Reason;
use xstate::Xfeature;

/// The XSAVE area [`Borrow`] needs at most: XCR0's whole standard-format
/// area (CPUID.(EAX=0DH,ECX=0):EBX) must fit.
pub const AREA_BYTES: usize = 16 << 10;

/// The vector state components a kernel would save for a SIMD borrower:
/// x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM.
const VECTOR_COMPONENTS: u64 = 0b11 | XCR0_AVX512_STATE;

/// Offset of the XSAVE header's XSTATE_BV in a standard-format area.
const XSTATE_BV: usize = 512;

/// The XSTATE_BV the saved state carries for `live`: its vector
/// components and x87, which a task that has run any code holds too.
fn components(live: Live) -> u64 {
    live.mask().with(Xfeature::X87).bits()
}

/// A task's live vector state, saved in a 64-byte-aligned XSAVE area, and
/// the XRSTOR + XSAVE pair that borrowing the registers costs.
pub struct Borrow<'a> {
    area: &'a mut [u8],
    rfbm: u64,
}

impl<'a> Borrow<'a> {
    /// Prepare `live` state in `area` (64-byte aligned, at least the size
    /// CPUID reports for XCR0), or say why this CPU or XCR0 cannot. Never
    /// inlined, so its register clobbers are judged in its own context.
    #[inline(never)]
    pub fn new(area: &'a mut [u8], live: Live, feat: &CpuFeatures) -> Result<Self, Reason> {
        let mut r = Reason::new();
        let x = feat.xcr0;
        if x == 0 {
            let _ = write!(r, "needs XSAVE: CR4.OSXSAVE clear");
            return Err(r);
        }
        let usable = match live {
            Live::Xmm => feat.sse2,
            Live::Ymm => feat.avx,
            Live::Zmm => feat.avx512f,
        };
        if x & components(live) != components(live) || !usable {
            let _ = write!(r, "{} state not usable: XCR0 {x:#x}", live.name());
            return Err(r);
        }
        // CPUID leaf 0xD exists whenever XSAVE is enabled (XCR0 != 0).
        let size = xstate::info::cpuid(0xd, 0).ebx as usize;
        if size > area.len() || area.as_ptr().align_offset(64) != 0 {
            let _ = write!(
                r,
                "XSAVE area of {size} bytes does not fit {} (64-aligned)",
                area.len()
            );
            return Err(r);
        }
        let rfbm = x & VECTOR_COMPONENTS;
        area.fill(0);
        let p = area.as_mut_ptr();
        let (lo, hi) = (rfbm as u32, (rfbm >> 32) as u32);
        // SAFETY: XSAVE is enabled (XCR0 != 0) and `area` is 64-byte aligned
        // and at least the standard-format size for XCR0, so the save stays
        // inside it. The dirtying instructions touch only registers whose
        // state XCR0 enables (checked above) and which are declared
        // clobbered through the C ABI's caller-saved set.
        unsafe {
            match live {
                Live::Xmm => asm!(
                    "pcmpeqd xmm15, xmm15",
                    "xsave64 [{p}]",
                    p = in(reg) p, in("eax") lo, in("edx") hi,
                    clobber_abi("C"), options(nostack),
                ),
                Live::Ymm => asm!(
                    "vpcmpeqd ymm15, ymm15, ymm15",
                    "xsave64 [{p}]",
                    p = in(reg) p, in("eax") lo, in("edx") hi,
                    clobber_abi("C"), options(nostack),
                ),
                Live::Zmm => asm!(
                    "vpternlogd zmm15, zmm15, zmm15, 0xff",
                    "vpternlogd zmm31, zmm31, zmm31, 0xff",
                    "kxnorw k1, k1, k1",
                    "xsave64 [{p}]",
                    p = in(reg) p, in("eax") lo, in("edx") hi,
                    clobber_abi("C"), options(nostack),
                ),
            }
        }
        let bv = components(live) & rfbm;
        area[XSTATE_BV..XSTATE_BV + 8].copy_from_slice(&bv.to_le_bytes());
        Ok(Borrow { area, rfbm })
    }

    /// The XSAVE area's XSTATE_BV: which components the saved state holds.
    pub fn saved_components(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.area[XSTATE_BV..XSTATE_BV + 8]);
        u64::from_le_bytes(b)
    }

    /// Restore the task's state, then save it again: the register state
    /// one borrow costs (begin + end around the borrower's use).
    #[inline(never)]
    pub fn pair(&mut self) {
        let p = self.area.as_mut_ptr();
        let (lo, hi) = (self.rfbm as u32, (self.rfbm >> 32) as u32);
        // SAFETY: `new` checked XSAVE is enabled and the area is aligned and
        // large enough, and filled it with a valid XSAVE image whose
        // XSTATE_BV is a subset of XCR0 (XRSTOR cannot fault on it). Every
        // register the restore overwrites is caller-saved in the C ABI.
        unsafe {
            asm!(
                "xrstor64 [{p}]",
                "xsave64 [{p}]",
                p = in(reg) p, in("eax") lo, in("edx") hi,
                clobber_abi("C"), options(nostack),
            );
        }
    }
}
