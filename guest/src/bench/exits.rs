//! Timed loops of VM exits at CPL3: what one exit of each kind costs the
//! guest, with the vector state above SSE clean or live at each width the
//! XCR0 enables (the VMM's xstate handling is part of the price when the
//! state is live, and how much state is live is what the sync policies
//! differ in).
//!
//! Each row is one assembly block: put every upper component back to its
//! init state, make the row's width live, read XINUSE, write the row's
//! start marker to [`MARK_PORT`], RDTSC, `count` exits, RDTSC, write the
//! end marker, store the tiles for the check, put the upper components back
//! to init. The markers let the VMM time the same row from its side; the
//! compiler cannot touch a vector register in between.
//!
//! | kind | instruction | exit |
//! |------|-------------|------|
//! | [`ExitKind::Pio`] | 32-bit `out` to [`BENCH_PIO_PORT`] | KVM_EXIT_IO |
//! | [`ExitKind::Mmio`] | 32-bit store to [`BENCH_MMIO_ADDR`] (unbacked) | KVM_EXIT_MMIO |
//! | [`ExitKind::Cpuid`] | CPUID leaf 0 | handled inside KVM; none at all where CPL3 runs natively (kvm_pvm) |
//!
//! | [`Upper`] | live on top of x87/SSE | how |
//! |-----------|------------------------|-----|
//! | `clean` | nothing | XRSTOR with XSTATE_BV = 0 for the upper components |
//! | `ymm` | AVX | YMM0-15 loaded |
//! | `zmm` | AVX, opmask, ZMM_Hi256, Hi16_ZMM | also ZMM0-31 and K1-K7 loaded |
//! | `tiles` | the above as XCR0 has them, XTILECFG, XTILEDATA | also LDTILECFG and TILELOADD into TMM0-7, stored back and checked after the exits |
//!
//! Why XRSTOR and not VZEROUPPER for `clean`: VZEROUPPER leaves ZMM16-31,
//! the opmask registers and the tiles live, so a clean row after a zmm row
//! would still carry 1.1 KB of AVX-512 state through every exit.

use core::arch::asm;

use xstate::{Xfeature, XfeatureMask};

use super::timed_asm::{exit_loops_asm, rdtsc_fenced_asm};
use crate::protocol::{BENCH_MMIO_ADDR, BENCH_PIO_PORT, MARK_END, MARK_PORT};

/// The exit a row provokes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// A 32-bit `out` to the benchmark port: KVM_EXIT_IO.
    Pio = 0,
    /// A 32-bit store to unbacked guest memory: KVM_EXIT_MMIO.
    Mmio = 1,
    /// CPUID leaf 0: handled inside KVM.
    Cpuid = 2,
}

impl ExitKind {
    /// Every kind, in row order.
    pub const ALL: [ExitKind; 3] = [ExitKind::Pio, ExitKind::Mmio, ExitKind::Cpuid];

    /// The result name: `exit-pio`, `exit-mmio`, `exit-cpuid`.
    pub fn row_name(self) -> &'static str {
        match self {
            ExitKind::Pio => "exit-pio",
            ExitKind::Mmio => "exit-mmio",
            ExitKind::Cpuid => "exit-cpuid",
        }
    }

    /// The kind of a result name (`exit-pio`: [`ExitKind::Pio`]).
    pub fn of_row_name(name: &str) -> Option<ExitKind> {
        ExitKind::ALL.into_iter().find(|k| k.row_name() == name)
    }

    /// Whether `KVM_RUN` returns to the VMM for this exit: PIO and MMIO
    /// do; CPUID is answered inside KVM, so nothing a VMM does per exit
    /// (its xstate sync policy included) runs for it.
    pub fn reaches_vmm(self) -> bool {
        !matches!(self, ExitKind::Cpuid)
    }
}

/// The components a row puts back to init before and after it: everything
/// above SSE that the rows make live.
pub const UPPER: XfeatureMask = XfeatureMask::from_bits(
    Xfeature::Avx.bit() | XfeatureMask::AVX512.bits() | XfeatureMask::AMX.bits(),
);

/// The vector state during a CPL3 row: which width is live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upper {
    /// Nothing above SSE live (every [`UPPER`] component in init state).
    Clean,
    /// YMM0-15 loaded with a nonzero pattern: AVX state live.
    Ymm,
    /// Also ZMM0-31 and K1-K7: the three AVX-512 components live.
    Zmm,
    /// Also TMM0-7 (palette 1, 16 rows of 64 bytes): both AMX components
    /// live, with whatever vector state XCR0 has below them.
    Tiles,
}

impl Upper {
    /// Every width, narrowest first: the rows' order.
    pub const ALL: [Upper; 4] = [Upper::Clean, Upper::Ymm, Upper::Zmm, Upper::Tiles];

    /// The row variant: `cpl3-clean`, `cpl3-ymm`, `cpl3-zmm`, `cpl3-tiles`.
    pub fn variant(self) -> &'static str {
        match self {
            Upper::Clean => "cpl3-clean",
            Upper::Ymm => "cpl3-ymm",
            Upper::Zmm => "cpl3-zmm",
            Upper::Tiles => "cpl3-tiles",
        }
    }

    /// The width of a CPL3 row variant (`cpl3-zmm`: [`Upper::Zmm`]); `None`
    /// for any other variant (`cpl0`).
    pub fn of_variant(variant: &str) -> Option<Upper> {
        Upper::ALL.into_iter().find(|u| u.variant() == variant)
    }

    /// The width's name in tables: `clean`, `ymm`, `zmm`, `tiles`.
    pub fn name(self) -> &'static str {
        let v = self.variant();
        v.strip_prefix("cpl3-").unwrap_or(v)
    }

    /// The components this width makes live, on top of x87/SSE.
    pub fn live(self) -> XfeatureMask {
        let avx = XfeatureMask::from_bits(Xfeature::Avx.bit());
        match self {
            Upper::Clean => XfeatureMask::EMPTY,
            Upper::Ymm => avx,
            Upper::Zmm => avx | XfeatureMask::AVX512,
            Upper::Tiles => XfeatureMask::AMX,
        }
    }

    /// Whether `xcr0` enables the state this width loads (`tiles` needs
    /// only the AMX components; it loads the vector widths XCR0 has too).
    pub fn available(self, xcr0: XfeatureMask) -> bool {
        xcr0.contains_all(self.live())
    }

    /// The components a row at this width under `xcr0` leaves live: its
    /// own and, for `tiles`, every vector width `xcr0` has.
    pub fn live_under(self, xcr0: XfeatureMask) -> XfeatureMask {
        match self {
            Upper::Tiles => {
                let below = if xcr0.contains_all(Upper::Zmm.live()) {
                    Upper::Zmm.live()
                } else if xcr0.contains(Xfeature::Avx) {
                    Upper::Ymm.live()
                } else {
                    XfeatureMask::EMPTY
                };
                (below | XfeatureMask::AMX) & xcr0
            }
            other => other.live() & xcr0,
        }
    }
}

/// Bits of the flags word the block reads (R10).
mod flag {
    pub const YMM: u64 = 1;
    pub const ZMM: u64 = 2;
    pub const TILES: u64 = 4;
    pub const XINUSE: u64 = 8;
}

/// What a row sets up, from the guest's XCR0 and CPUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The live width.
    pub upper: Upper,
    /// The XCR0 the guest kernel set.
    pub xcr0: XfeatureMask,
    /// Read XINUSE (XGETBV with ECX = 1, CPUID 0xD.1 EAX bit 2) once the
    /// width is live.
    pub read_xinuse: bool,
}

impl Setup {
    /// The block's flags word.
    fn flags(&self) -> u64 {
        let live = self.upper.live_under(self.xcr0);
        let mut f = 0;
        if live.contains(Xfeature::Avx) {
            f |= flag::YMM;
        }
        if live.contains_all(XfeatureMask::AVX512) {
            f |= flag::ZMM;
        }
        if live.contains_all(XfeatureMask::AMX) {
            f |= flag::TILES;
        }
        if self.read_xinuse {
            f |= flag::XINUSE;
        }
        f
    }
}

/// What one timed loop measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopResult {
    /// TSC cycles of the exits alone.
    pub cycles: u64,
    /// XINUSE right before the first exit, when [`Setup::read_xinuse`].
    pub xinuse: Option<u64>,
    /// For a `tiles` row: whether TMM0-7 still held the pattern after the
    /// exits.
    pub tiles_ok: Option<bool>,
}

/// 64 nonzero bytes the live rows load into vector and tile registers.
#[repr(C, align(64))]
struct Pattern([u8; 64]);

static DIRTY: Pattern = {
    let mut p = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        p[i] = 0xa5 ^ (i as u8).wrapping_mul(37);
        if p[i] == 0 {
            p[i] = 1;
        }
        i += 1;
    }
    Pattern(p)
};

/// Palette 1, TMM0-7 each 16 rows of 64 bytes.
static TILE_CONFIG: Pattern = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64; // colsb[t], u16 little-endian
        c[48 + t] = 16; // rows[t]
        t += 1;
    }
    Pattern(c)
};

/// Bytes of TMM0-7 as a `tiles` row stores them for the check.
pub const TILE_STORE_BYTES: usize = 8 * 16 * 64;

/// The standard-format XRSTOR image that puts components to init: legacy
/// region and header, XSTATE_BV = 0 (MXCSR is copied in first: XRSTOR
/// loads it whenever the AVX bit is requested).
#[repr(C, align(64))]
struct InitImage([u8; 576]);

/// The marker word pair of row `index`: (`index`, `MARK_END | index`).
pub const fn markers(index: u32) -> (u32, u32) {
    (index & !MARK_END, MARK_END | index)
}

/// Runs `count` exits of `kind` at the current privilege level with the
/// vector state of `setup`, bracketed by [`MARK_PORT`] writes of
/// [`markers`]`(index)` when `mark` is `Some(index)`; a `count` of 0
/// counts as one. A `tiles` row stores TMM0-7 into `tile_store` after the
/// exits and checks them; without it the tiles are not loaded.
///
/// # Safety
/// For [`ExitKind::Pio`] and markers the code must be allowed the ports
/// (the guest kernel's I/O bitmap); for [`ExitKind::Mmio`]
/// [`BENCH_MMIO_ADDR`] must be mapped writable and be unbacked guest memory
/// (or harmless to write). `setup.xcr0` must be enabled in the XCR0 the
/// hardware applies (with XSAVE enabled when it is not empty), `tiles`
/// needs AMX-TILE with XFD not armed for XTILEDATA, and `read_xinuse`
/// XGETBV1 support.
pub unsafe fn timed_loop(
    kind: ExitKind,
    setup: &Setup,
    count: u64,
    mark: Option<u32>,
    tile_store: Option<&mut [u8; TILE_STORE_BYTES]>,
) -> LoopResult {
    // Bit 32 says "write markers", the low half is the start marker.
    let mark_word = mark.map_or(0, |i| (1u64 << 32) | u64::from(markers(i).0));
    let mut flags = setup.flags();
    let store = match tile_store {
        Some(s) => s.as_mut_ptr(),
        None => {
            flags &= !flag::TILES;
            core::ptr::null_mut()
        }
    };
    let init_mask = (setup.xcr0 & UPPER).bits();
    let mut init = InitImage([0; 576]);
    let cycles: u64;
    let xinuse: u64;
    // SAFETY: the caller grants ports, the MMIO address and the components
    // per the contract above; `flags` loads only components in
    // `setup.xcr0`. R12 points at a 64-byte aligned 576-byte standard
    // image of this frame with XSTATE_BV = 0 and reserved header bytes 0;
    // XRSTOR from it touches only the components in R13 (never x87/SSE)
    // and loads the MXCSR stored into it just before. R15 is either null
    // with TILES clear or 8 KiB of the caller's. CPUID clobbers RBX, kept
    // in R9 around the loop. Every vector register and the usual scratch
    // registers are declared clobbered (clobber_abi); the block leaves the
    // upper components in init state. No stack use.
    unsafe {
        asm!(
            // Every upper component to init.
            "test r13, r13",
            "jz 38f",
            "stmxcsr [r12 + 24]",
            "mov eax, r13d",
            "mov rdx, r13",
            "shr rdx, 32",
            "xrstor64 [r12]",
            "38:",
            "test r10d, {ymm}",
            "jz 2f",
            "vmovdqu ymm0, [rsi]",
            "vmovdqu ymm1, [rsi + 32]",
            "vmovdqu ymm2, [rsi]",
            "vmovdqu ymm3, [rsi + 32]",
            "vmovdqu ymm4, [rsi]",
            "vmovdqu ymm5, [rsi + 32]",
            "vmovdqu ymm6, [rsi]",
            "vmovdqu ymm7, [rsi + 32]",
            "vmovdqu ymm8, [rsi]",
            "vmovdqu ymm9, [rsi + 32]",
            "vmovdqu ymm10, [rsi]",
            "vmovdqu ymm11, [rsi + 32]",
            "vmovdqu ymm12, [rsi]",
            "vmovdqu ymm13, [rsi + 32]",
            "vmovdqu ymm14, [rsi]",
            "vmovdqu ymm15, [rsi + 32]",
            "2:",
            "test r10d, {zmm}",
            "jz 3f",
            "vmovdqu64 zmm0, [rsi]",
            "vmovdqu64 zmm3, [rsi]",
            "vmovdqu64 zmm7, [rsi]",
            "vmovdqu64 zmm11, [rsi]",
            "vmovdqu64 zmm15, [rsi]",
            "vmovdqu64 zmm16, [rsi]",
            "vmovdqu64 zmm19, [rsi]",
            "vmovdqu64 zmm23, [rsi]",
            "vmovdqu64 zmm27, [rsi]",
            "vmovdqu64 zmm31, [rsi]",
            "kmovq k1, [rsi]",
            "kmovq k4, [rsi + 16]",
            "kmovq k7, [rsi + 8]",
            "3:",
            "test r10d, {tiles}",
            "jz 4f",
            // ldtilecfg [rdi]
            ".byte 0xc4, 0xe2, 0x78, 0x49, 0x07",
            // tileloadd tmmN, [rsi + rax*1], stride 0: every row the pattern.
            "xor eax, eax",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x0c, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x14, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x1c, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x24, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x2c, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x34, 0x06",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x3c, 0x06",
            "4:",
            "xor r14d, r14d",
            "test r10d, {xinuse}",
            "jz 5f",
            "mov ecx, 1",
            "xgetbv",
            "shl rdx, 32",
            "or rax, rdx",
            "mov r14, rax",
            "5:",
            // Start marker.
            "bt r11, 32",
            "jnc 6f",
            "mov eax, r11d",
            "mov edx, {mark_port}",
            "out dx, eax",
            "6:",
            rdtsc_fenced_asm!(),
            "mov rsi, rax",
            "cmp r9d, 1",
            "je 21f",
            "cmp r9d, 2",
            "je 22f",
            exit_loops_asm!(),
            "29:",
            rdtsc_fenced_asm!(),
            "sub rax, rsi",
            "mov rsi, rax",
            // End marker.
            "bt r11, 32",
            "jnc 7f",
            "mov eax, r11d",
            "or eax, {mark_end}",
            "mov edx, {mark_port}",
            "out dx, eax",
            "7:",
            "test r10d, {tiles}",
            "jz 8f",
            // tilestored [r15 + rax*1], tmmN, 64-byte rows, 1 KiB apart.
            "mov eax, 64",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x04, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x0c, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x14, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x1c, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x24, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x2c, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x34, 0x07",
            "add r15, 1024",
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x3c, 0x07",
            "8:",
            // Every upper component back to init for the compiled code.
            "test r13, r13",
            "jz 9f",
            "stmxcsr [r12 + 24]",
            "mov eax, r13d",
            "mov rdx, r13",
            "shr rdx, 32",
            "xrstor64 [r12]",
            "9:",
            "mov rax, rsi",
            ymm = const flag::YMM,
            zmm = const flag::ZMM,
            tiles = const flag::TILES,
            xinuse = const flag::XINUSE,
            mark_port = const MARK_PORT,
            pio = const BENCH_PIO_PORT,
            mmio = const BENCH_MMIO_ADDR,
            mark_end = const MARK_END,
            inout("rsi") DIRTY.0.as_ptr() => _,
            inout("rdi") TILE_CONFIG.0.as_ptr() => _,
            inout("r8") count.max(1) => _,
            inout("r9") kind as u64 => _,
            in("r10") flags,
            in("r11") mark_word,
            in("r12") init.0.as_mut_ptr(),
            in("r13") init_mask,
            out("r14") xinuse,
            inout("r15") store => _,
            lateout("rax") cycles,
            clobber_abi("C"),
            options(nostack),
        );
    }
    let tiles_ok = (flags & flag::TILES != 0).then(|| {
        // SAFETY: TILES is set only when `store` came from the caller's
        // 8 KiB array, which the block filled and nothing else borrows.
        let stored = unsafe { core::slice::from_raw_parts(store, TILE_STORE_BYTES) };
        tiles_hold_pattern(stored)
    });
    LoopResult {
        cycles,
        xinuse: setup.read_xinuse.then_some(xinuse),
        tiles_ok,
    }
}

/// Whether every 64-byte row of TMM0-7 as stored is the pattern.
fn tiles_hold_pattern(stored: &[u8]) -> bool {
    stored.len() == TILE_STORE_BYTES && stored.chunks_exact(64).all(|row| row == DIRTY.0)
}

/// XINUSE now (XGETBV with ECX = 1): for the rows timed behind a system
/// call, read at CPL3 before it.
///
/// # Safety
/// The CPU must support XGETBV1 (CPUID 0xD.1 EAX bit 2) with XSAVE
/// enabled.
pub unsafe fn xinuse() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller guarantees XGETBV1; it only reads.
    unsafe {
        asm!("xgetbv", in("ecx") 1, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::bench::Env;

    #[test]
    fn markers_and_names() {
        assert_eq!(markers(5), (5, 0x8000_0005));
        assert_eq!(ExitKind::Mmio.row_name(), "exit-mmio");
        assert_eq!(ExitKind::of_row_name("exit-cpuid"), Some(ExitKind::Cpuid));
        assert_eq!(ExitKind::of_row_name("cpuid"), None);
        assert!(ExitKind::Pio.reaches_vmm() && !ExitKind::Cpuid.reaches_vmm());
        assert!(DIRTY.0.iter().all(|&b| b != 0));
        let names: std::vec::Vec<_> = Upper::ALL.iter().map(|u| u.variant()).collect();
        assert_eq!(names, ["cpl3-clean", "cpl3-ymm", "cpl3-zmm", "cpl3-tiles"]);
        for u in Upper::ALL {
            assert_eq!(Upper::of_variant(u.variant()), Some(u));
        }
        assert_eq!(Upper::of_variant("cpl0"), None);
        assert_eq!(Upper::Tiles.name(), "tiles");
    }

    /// Which widths each XCR0 has, and what each leaves live.
    #[test]
    fn widths_per_xcr0() {
        let x = XfeatureMask::from_bits;
        let avail = |xcr0: u64| {
            Upper::ALL
                .iter()
                .filter(|u| u.available(x(xcr0)))
                .map(|u| u.variant())
                .collect::<std::vec::Vec<_>>()
        };
        assert_eq!(avail(0x3), ["cpl3-clean"]);
        assert_eq!(avail(0x207), ["cpl3-clean", "cpl3-ymm"]);
        assert_eq!(avail(0xe7), ["cpl3-clean", "cpl3-ymm", "cpl3-zmm"]);
        assert_eq!(avail(0x602e7), Upper::ALL.map(Upper::variant));
        assert_eq!(Upper::Clean.live_under(x(0xe7)), XfeatureMask::EMPTY);
        assert_eq!(Upper::Zmm.live_under(x(0x2e7)).bits(), 0xe4);
        assert_eq!(Upper::Tiles.live_under(x(0x602e7)).bits(), 0x600e4);
        assert_eq!(Upper::Tiles.live_under(x(0x60007)).bits(), 0x60004);
        let s = |upper, xcr0| Setup {
            upper,
            xcr0: x(xcr0),
            read_xinuse: false,
        };
        assert_eq!(s(Upper::Zmm, 0xe7).flags(), flag::YMM | flag::ZMM);
        assert_eq!(
            s(Upper::Tiles, 0x602e7).flags(),
            flag::YMM | flag::ZMM | flag::TILES
        );
        assert_eq!(s(Upper::Clean, 0xe7).flags(), 0);
        assert_eq!((x(0x602e7) & UPPER).bits(), 0x600e4);
    }

    #[test]
    fn tile_config_and_check() {
        assert_eq!(TILE_CONFIG.0[0], 1);
        assert_eq!(&TILE_CONFIG.0[16..32], &[64, 0].repeat(8)[..]);
        assert_eq!(&TILE_CONFIG.0[48..56], &[16; 8]);
        let mut stored = DIRTY.0.repeat(8 * 16);
        assert!(tiles_hold_pattern(&stored));
        stored[5000] ^= 1;
        assert!(!tiles_hold_pattern(&stored));
    }

    /// CPUID needs no privileges: the loop runs on the host too, at every
    /// width the host's XCR0 has but tiles (Linux wants a permission
    /// first), and each width is what XINUSE says is live.
    #[test]
    fn cpuid_loop_runs_on_host() {
        let env = Env::host();
        // Without the tile components: Linux arms XFD for them until the
        // process asks, and the block's XRSTOR would then touch them.
        let xcr0 = env.xcr0 - XfeatureMask::AMX;
        let read_xinuse = env.info.has_xgetbv1();
        for upper in [Upper::Clean, Upper::Ymm, Upper::Zmm] {
            if !upper.available(xcr0) {
                continue;
            }
            let setup = Setup {
                upper,
                xcr0,
                read_xinuse,
            };
            // SAFETY: CPUID is unprivileged; no ports, no MMIO, no markers;
            // the width is one the host's XCR0 enables; XGETBV1 checked.
            let r = unsafe { timed_loop(ExitKind::Cpuid, &setup, 50, None, None) };
            assert!(r.cycles > 0, "{upper:?}");
            assert_eq!(r.tiles_ok, None);
            if let Some(inuse) = r.xinuse {
                let inuse = XfeatureMask::from_bits(inuse) & UPPER;
                assert_eq!(inuse, upper.live_under(xcr0), "{upper:?}");
            }
            if read_xinuse {
                // SAFETY: XGETBV1 checked. The block left the upper state
                // in init.
                let after = XfeatureMask::from_bits(unsafe { xinuse() });
                assert_eq!(after & UPPER, XfeatureMask::EMPTY, "{upper:?}");
            }
        }
    }
}
