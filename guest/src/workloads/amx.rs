//! The AMX tile workload: one int8 matrix product on the tile unit
//! (LDTILECFG, TILELOADD, TDPBSSD, TILESTORED), checked against a scalar
//! reference, then timed.
//!
//! AMX is the state a VMM most easily loses: tile data is 8 KiB at offset
//! 0xb00 of the standard XSAVE area, past the 4 KiB `kvm_xsave`, and Linux
//! hands it to a guest only after `ARCH_REQ_XCOMP_GUEST_PERM`. A product
//! that comes out right after exits and snapshots shows the whole path
//! held.
//!
//! Shapes (palette 1, the largest tiles): `C[16x16] i32 += A[16x64] i8 .
//! B[64x16] i8`. TDPBSSD wants B in the VNNI layout: four consecutive K
//! values of one column side by side, `Bt[k/4][4n + k%4] = B[k][n]`
//! ([`pack_vnni`]). [`reference()`] is the plain triple loop;
//! [`tdpbssd_model`] computes the instruction's definition over the tile
//! layouts, so the packing is checked natively on any CPU.
//!
//! The rows run only when CPUID.(7,0):EDX reports AMX-TILE and AMX-INT8
//! and XCR0 enables XTILECFG and XTILEDATA ([`availability`]); otherwise
//! the skip record says `not available: <why>`. The rate is counted as two
//! operations (multiply, add) per int8 product and reported in the
//! protocol's floating-point unit, which the report shows as GFLOPS: the
//! protocol has no integer-operation unit.

use core::fmt::Write;

use super::rng::SplitMix64;
use super::text::Reason;

/// Rows of A and C.
pub const M: usize = 16;
/// Int8 values per row of A (the dot-product length).
pub const K: usize = 64;
/// Int32 columns of C.
pub const N: usize = 16;
/// Bytes per tile row (all three tiles).
pub const STRIDE: usize = 64;
/// The most TDPBSSDs accumulated into one C: |A.B| <= 64 * 128 * 128 = 2^20,
/// so 1024 of them stay below 2^31 and the expected value is exact.
pub const MAX_ACCUMULATE: u32 = 1024;
/// Operations of one TDPBSSD (a multiply and an add per int8 product).
pub const OPS_PER_TDPBSSD: u64 = 2 * (M * N * K) as u64;

/// CPUID.(EAX=7,ECX=0):EDX bit 24: AMX-TILE (tile registers, LDTILECFG, TILELOADD, ...).
pub const CPUID7_EDX_AMX_TILE: u32 = 1 << 24;
/// CPUID.(EAX=7,ECX=0):EDX bit 25: AMX-INT8 (TDPBSSD and friends).
pub const CPUID7_EDX_AMX_INT8: u32 = 1 << 25;
/// XCR0 bit 17: XTILECFG.
pub const XCR0_XTILECFG: u64 = 1 << 17;
/// XCR0 bit 18: XTILEDATA.
pub const XCR0_XTILEDATA: u64 = 1 << 18;
/// Both AMX components.
pub const XCR0_AMX: u64 = XCR0_XTILECFG | XCR0_XTILEDATA;

/// The workload's names in the report.
pub const NAME: &str = "amx-int8";
/// Its one variant.
pub const VARIANT: &str = "tdpbssd";

/// Whether the tile instructions may run, from CPUID.(7,0):EDX and the
/// XCR0 in force; the error is the skip reason (`not available: ...`).
pub fn availability(cpuid7_edx: u32, xcr0: u64) -> Result<(), Reason> {
    let mut r = Reason::new();
    if cpuid7_edx & CPUID7_EDX_AMX_TILE == 0 {
        let _ = write!(r, "not available: CPUID.7.0:EDX lacks AMX-TILE (bit 24)");
        return Err(r);
    }
    if cpuid7_edx & CPUID7_EDX_AMX_INT8 == 0 {
        let _ = write!(r, "not available: CPUID.7.0:EDX lacks AMX-INT8 (bit 25)");
        return Err(r);
    }
    if xcr0 & XCR0_AMX != XCR0_AMX {
        let _ = write!(
            r,
            "not available: XCR0 {xcr0:#x} lacks XTILECFG|XTILEDATA (0x60000)"
        );
        return Err(r);
    }
    Ok(())
}

/// The operands, row-major, 64-byte aligned (one tile row per line).
#[repr(C, align(64))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operands {
    /// A, `M x K`.
    pub a: [i8; M * K],
    /// B, `K x N`.
    pub b: [i8; K * N],
}

impl Operands {
    /// Random operands covering the whole int8 range (both signs, -128).
    pub fn random(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed);
        let mut o = Operands {
            a: [0; M * K],
            b: [0; K * N],
        };
        for v in o.a.iter_mut().chain(o.b.iter_mut()) {
            *v = rng.next_u64() as i8;
        }
        // The extremes, whatever the generator gives.
        o.a[0] = i8::MIN;
        o.b[0] = i8::MIN;
        o.a[1] = i8::MAX;
        o.b[N] = i8::MIN;
        o
    }
}

/// B in the VNNI layout TDPBSSD reads: `K/4` rows of `N` groups of four.
#[repr(C, align(64))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedB(pub [i8; K * N]);

/// `Bt[k/4][4n + k%4] = B[k][n]`.
pub fn pack_vnni(b: &[i8; K * N]) -> PackedB {
    let mut p = [0i8; K * N];
    for k in 0..K {
        for n in 0..N {
            p[(k / 4) * STRIDE + 4 * n + k % 4] = b[k * N + n];
        }
    }
    PackedB(p)
}

/// C, `M x N` int32, as TILESTORED writes it.
#[repr(C, align(64))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Product(pub [i32; M * N]);

/// The scalar reference: `C[m][n] = sum_k A[m][k] * B[k][n]`.
pub fn reference(o: &Operands) -> Product {
    let mut c = [0i32; M * N];
    for m in 0..M {
        for n in 0..N {
            c[m * N + n] = (0..K)
                .map(|k| i32::from(o.a[m * K + k]) * i32::from(o.b[k * N + n]))
                .sum();
        }
    }
    Product(c)
}

/// TDPBSSD as the SDM defines it, over the tile layouts: for each row `m`
/// and dword column `n`, add the four signed products of `A[m]`'s bytes
/// `4k..4k+4` with `Bt[k]`'s bytes `4n..4n+4`, for every `k < K/4`.
pub fn tdpbssd_model(c: &mut Product, a: &[i8; M * K], bt: &PackedB) {
    for m in 0..M {
        for n in 0..N {
            let mut acc = c.0[m * N + n];
            for k in 0..K / 4 {
                for i in 0..4 {
                    let x = i32::from(a[m * STRIDE + 4 * k + i]);
                    let y = i32::from(bt.0[k * STRIDE + 4 * n + i]);
                    acc = acc.wrapping_add(x * y);
                }
            }
            c.0[m * N + n] = acc;
        }
    }
}

/// `reference` times `times` (exact for `times <= MAX_ACCUMULATE`).
pub fn scaled(r: &Product, times: u32) -> Product {
    let mut c = r.clone();
    for v in c.0.iter_mut() {
        *v = v.wrapping_mul(times as i32);
    }
    c
}

/// The palette-1 tile configuration: tmm0 = C, tmm1 = A, tmm2 = Bt, each
/// 16 rows of 64 bytes.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileConfig(pub [u8; 64]);

impl TileConfig {
    /// The configuration [`tdpbssd_tiles`] loads.
    pub fn for_product() -> Self {
        let mut c = [0u8; 64];
        c[0] = 1; // palette 1
        for t in 0..3 {
            // colsb[t] (u16 at 16 + 2t) and rows[t] (u8 at 48 + t).
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(STRIDE as u16).to_le_bytes());
            c[48 + t] = 16;
        }
        TileConfig(c)
    }
}

/// On the tile unit: C = `times` x (A . B), one LDTILECFG, TILEZERO, two
/// TILELOADDs, `times` TDPBSSDs, TILESTORED, TILERELEASE. `times` is
/// clamped to 1..=[`MAX_ACCUMULATE`].
///
/// The instructions are spelled as bytes (the encodings are in the
/// comments, checked against `objdump -d`), so no assembler AMX support
/// is assumed.
///
/// # Safety
/// The CPU must have AMX-TILE and AMX-INT8 and the OS must have enabled
/// XTILECFG and XTILEDATA in XCR0 and not armed XFD for them
/// ([`availability`], plus on Linux `ARCH_REQ_XCOMP_PERM`); otherwise
/// the first instruction raises #UD or #NM.
#[cfg(target_arch = "x86_64")]
pub unsafe fn tdpbssd_tiles(o: &Operands, bt: &PackedB, times: u32) -> Product {
    let cfg = TileConfig::for_product();
    let mut c = Product([0; M * N]);
    let times = u64::from(times.clamp(1, MAX_ACCUMULATE));
    // SAFETY: the caller guarantees AMX is usable. Every memory operand is
    // a live, 64-byte aligned buffer of this frame: cfg 64 bytes, A, Bt
    // and C 16 rows of STRIDE bytes each. The tiles are released before
    // returning, so no tile state outlives the block.
    unsafe {
        core::arch::asm!(
            // ldtilecfg [rdi]
            ".byte 0xc4, 0xe2, 0x78, 0x49, 0x07",
            // tilezero tmm0
            ".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0",
            // tileloadd tmm1, [rsi + r8*1]
            ".byte 0xc4, 0xa2, 0x7b, 0x4b, 0x0c, 0x06",
            // tileloadd tmm2, [rdx + r8*1]
            ".byte 0xc4, 0xa2, 0x7b, 0x4b, 0x14, 0x02",
            "2:",
            // tdpbssd tmm0, tmm1, tmm2
            ".byte 0xc4, 0xe2, 0x6b, 0x5e, 0xc1",
            "dec r9",
            "jnz 2b",
            // tilestored [rcx + r8*1], tmm0
            ".byte 0xc4, 0xa2, 0x7a, 0x4b, 0x04, 0x01",
            // tilerelease
            ".byte 0xc4, 0xe2, 0x78, 0x49, 0xc0",
            in("rdi") cfg.0.as_ptr(),
            in("rsi") o.a.as_ptr(),
            in("rdx") bt.0.as_ptr(),
            in("rcx") c.0.as_mut_ptr(),
            in("r8") STRIDE,
            inout("r9") times => _,
            options(nostack),
        );
    }
    c
}

/// CPUID.(EAX=7,ECX=0):EDX of the running CPU.
#[cfg(target_arch = "x86_64")]
pub fn cpuid7_edx() -> u32 {
    use xstate::info::cpuid;
    // Leaf 0 says whether leaf 7 exists.
    if cpuid(0, 0).eax < 7 {
        return 0;
    }
    cpuid(7, 0).edx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known answer by hand: A = all 1 in row 0, B = column n holds n.
    #[test]
    fn reference_known_answer() {
        let mut o = Operands {
            a: [0; M * K],
            b: [0; K * N],
        };
        for k in 0..K {
            o.a[k] = 1; // row 0
            o.a[K + k] = -2; // row 1
            o.a[2 * K + k] = i8::MIN; // row 2
        }
        for k in 0..K {
            for n in 0..N {
                o.b[k * N + n] = if n == 15 { i8::MIN } else { n as i8 };
            }
        }
        let c = reference(&o);
        for n in 0..15 {
            assert_eq!(c.0[n], 64 * n as i32);
            assert_eq!(c.0[N + n], -128 * n as i32);
            assert_eq!(c.0[2 * N + n], -128 * 64 * n as i32);
        }
        // The extreme product: 64 * (-128) * (-128) = 2^20.
        assert_eq!(c.0[2 * N + 15], 1 << 20);
        assert_eq!(c.0[15], 64 * -128);
        assert!(c.0[3 * N..].iter().all(|&v| v == 0));
    }

    #[test]
    fn vnni_packing_matches_the_instruction_definition() {
        for seed in [1u64, 2, 0xdead_beef] {
            let o = Operands::random(seed);
            let bt = pack_vnni(&o.b);
            let mut c = Product([0; M * N]);
            tdpbssd_model(&mut c, &o.a, &bt);
            assert_eq!(c, reference(&o), "seed {seed}");
            // Accumulating: the model twice is the reference doubled.
            tdpbssd_model(&mut c, &o.a, &bt);
            assert_eq!(c, scaled(&reference(&o), 2), "seed {seed}");
        }
        // B[k][n] lands at row k/4, byte 4n + k%4.
        let mut b = [0i8; K * N];
        b[5 * N + 3] = 7; // k = 5, n = 3
        assert_eq!(pack_vnni(&b).0[STRIDE + 12 + 1], 7);
    }

    #[test]
    fn accumulation_bound_is_exact() {
        let o = Operands {
            a: [i8::MIN; M * K],
            b: [i8::MIN; K * N],
        };
        let r = reference(&o);
        assert!(r.0.iter().all(|&v| v == 1 << 20));
        let s = scaled(&r, MAX_ACCUMULATE);
        assert!(s.0.iter().all(|&v| v == 1 << 30));
    }

    #[test]
    fn tile_config_bytes() {
        let c = TileConfig::for_product().0;
        assert_eq!(c[0], 1);
        assert_eq!(&c[16..22], &[64, 0, 64, 0, 64, 0]);
        assert_eq!(&c[48..51], &[16, 16, 16]);
        assert!(c[1..16].iter().all(|&b| b == 0));
        assert!(c[22..48].iter().all(|&b| b == 0) && c[51..].iter().all(|&b| b == 0));
    }

    #[test]
    fn availability_names_what_is_missing() {
        let tile_int8 = CPUID7_EDX_AMX_TILE | CPUID7_EDX_AMX_INT8;
        assert!(availability(tile_int8, 0x602e7).is_ok());
        assert_eq!(
            availability(0, 0x602e7).unwrap_err().as_str(),
            "not available: CPUID.7.0:EDX lacks AMX-TILE (bit 24)"
        );
        assert_eq!(
            availability(CPUID7_EDX_AMX_TILE, 0x602e7)
                .unwrap_err()
                .as_str(),
            "not available: CPUID.7.0:EDX lacks AMX-INT8 (bit 25)"
        );
        assert_eq!(
            availability(tile_int8, 0x2e7).unwrap_err().as_str(),
            "not available: XCR0 0x2e7 lacks XTILECFG|XTILEDATA (0x60000)"
        );
    }

    /// On a CPU whose OS lets this thread use AMX the tile unit must give
    /// the reference's answer. The test process has not asked Linux for
    /// the permission (ARCH_REQ_XCOMP_PERM), so natively this runs only
    /// where the CPU has AMX and the permission can be had; elsewhere
    /// (this project's CI host: no AMX) it checks nothing, as it says.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn tiles_native_where_amx_exists() {
        extern crate std;
        let xcr0 = if cpuid7_edx() != 0 {
            // SAFETY: XGETBV(0) is valid whenever the OS set CR4.OSXSAVE,
            // which Linux does on every CPU with leaf 7.
            unsafe { core::arch::x86_64::_xgetbv(0) }
        } else {
            0
        };
        if availability(cpuid7_edx(), xcr0).is_err() {
            std::eprintln!("no AMX on this CPU/XCR0: the tile unit is not exercised here");
            return;
        }
        // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, 18) takes an integer.
        let r = unsafe { libc_arch_prctl(0x1023, 18) };
        if r != 0 {
            std::eprintln!("the kernel refused ARCH_REQ_XCOMP_PERM: tiles not exercised");
            return;
        }
        let o = Operands::random(7);
        let bt = pack_vnni(&o.b);
        // SAFETY: AMX available and permitted (checked above).
        let c = unsafe { tdpbssd_tiles(&o, &bt, 3) };
        assert_eq!(c, scaled(&reference(&o), 3));
    }

    /// The raw `arch_prctl` system call (no libc dependency in this crate).
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    unsafe fn libc_arch_prctl(code: u64, arg: u64) -> i64 {
        let ret: i64;
        // SAFETY: syscall 158 (arch_prctl) with an integer argument; the
        // kernel clobbers rcx and r11 only.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") 158i64 => ret,
                in("rdi") code,
                in("rsi") arg,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }
}
