//! Timed loops of VM exits at CPL3: what one exit of each kind costs the
//! guest, with the upper vector state clean or dirty (the VMM's xstate
//! handling is part of the price when the state is live).
//!
//! Each row is one assembly block: set up the vector state, write the row's
//! start marker to [`MARK_PORT`], RDTSC, `count` exits, RDTSC, write the end
//! marker, clean up. The markers let the VMM time the same row from its
//! side; the compiler cannot touch a vector register in between.
//!
//! | kind | instruction | exit |
//! |------|-------------|------|
//! | [`ExitKind::Pio`] | 32-bit `out` to [`BENCH_PIO_PORT`] | KVM_EXIT_IO |
//! | [`ExitKind::Mmio`] | 32-bit store to [`BENCH_MMIO_ADDR`] (unbacked) | KVM_EXIT_MMIO |
//! | [`ExitKind::Cpuid`] | CPUID leaf 0 | handled inside KVM; none at all where CPL3 runs natively (kvm_pvm) |

use core::arch::asm;

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
}

/// The vector state during a CPL3 row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upper {
    /// Untouched (no AVX in XCR0: there are no upper halves).
    Untouched = 0,
    /// VZEROUPPER first: upper YMM halves clean (AVX not in XINUSE).
    Clean = 1,
    /// YMM0-15 loaded with a nonzero pattern: AVX state live.
    DirtyYmm = 2,
    /// Also ZMM0-31 and K1-K7 loaded: AVX-512 state live.
    DirtyZmm = 3,
}

/// 64 nonzero bytes the dirty rows load into vector registers.
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

/// The marker word pair of row `index`: (`index`, `MARK_END | index`).
pub const fn markers(index: u32) -> (u32, u32) {
    (index & !MARK_END, MARK_END | index)
}

/// Runs `count` exits of `kind` at the current privilege level with the
/// vector state set up per `upper`, bracketed by [`MARK_PORT`] writes of
/// [`markers`]`(index)` when `mark` is `Some(index)`. Returns the TSC
/// cycles of the exits alone. `count` 0 counts as 1.
///
/// # Safety
/// For [`ExitKind::Pio`] and markers the code must be allowed the ports
/// (the guest kernel's I/O bitmap); for [`ExitKind::Mmio`]
/// [`BENCH_MMIO_ADDR`] must be mapped writable and be unbacked guest memory
/// (or harmless to write). `upper` other than `Untouched` needs AVX enabled
/// in the XCR0 the hardware applies, `DirtyZmm` AVX-512.
pub unsafe fn timed_loop(kind: ExitKind, upper: Upper, count: u64, mark: Option<u32>) -> u64 {
    // Bit 32 says "write markers", the low half is the start marker.
    let mark_word = mark.map_or(0, |i| (1u64 << 32) | u64::from(markers(i).0));
    let cycles: u64;
    // SAFETY: the caller grants ports, the MMIO address and the vector
    // features per the contract above. CPUID clobbers RBX, which is kept
    // in R9 around the loop. The block declares every vector register and
    // the usual scratch registers clobbered (clobber_abi) and ends with
    // VZEROUPPER when it touched upper halves, so the compiled code after
    // it sees clean state. No stack use.
    unsafe {
        asm!(
            // Vector state.
            "test r10d, r10d",
            "jz 3f",
            "cmp r10d, 1",
            "jne 2f",
            "vzeroupper",
            "jmp 3f",
            "2:",
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
            "cmp r10d, 3",
            "jne 3f",
            "vmovdqu64 zmm0, [rsi]",
            "vmovdqu64 zmm7, [rsi]",
            "vmovdqu64 zmm15, [rsi]",
            "vmovdqu64 zmm16, [rsi]",
            "vmovdqu64 zmm23, [rsi]",
            "vmovdqu64 zmm31, [rsi]",
            "kmovq k1, [rsi]",
            "kmovq k7, [rsi + 8]",
            "3:",
            // Start marker.
            "bt r11, 32",
            "jnc 4f",
            "mov eax, r11d",
            "mov edx, {mark_port}",
            "out dx, eax",
            "4:",
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
            "jnc 5f",
            "mov eax, r11d",
            "or eax, {mark_end}",
            "mov edx, {mark_port}",
            "out dx, eax",
            "5:",
            "test r10d, r10d",
            "jz 6f",
            "vzeroupper",
            "6:",
            "mov rax, rsi",
            mark_port = const MARK_PORT,
            pio = const BENCH_PIO_PORT,
            mmio = const BENCH_MMIO_ADDR,
            mark_end = const MARK_END,
            in("rsi") DIRTY.0.as_ptr(),
            in("r8") count.max(1),
            in("r9") kind as u64,
            in("r10") upper as u64,
            in("r11") mark_word,
            lateout("rax") cycles,
            clobber_abi("C"),
            options(nostack),
        );
    }
    cycles
}

/// The upper-state setting for a `dirty` row under `xcr0`: `None` without
/// AVX (there is nothing to dirty).
pub fn dirty_upper(has_avx: bool, has_avx512: bool) -> Option<Upper> {
    match (has_avx, has_avx512) {
        (false, _) => None,
        (true, false) => Some(Upper::DirtyYmm),
        (true, true) => Some(Upper::DirtyZmm),
    }
}

/// The upper-state setting for a `clean` row.
pub fn clean_upper(has_avx: bool) -> Upper {
    if has_avx {
        Upper::Clean
    } else {
        Upper::Untouched
    }
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
        assert_eq!(dirty_upper(false, true), None);
        assert_eq!(dirty_upper(true, false), Some(Upper::DirtyYmm));
        assert_eq!(clean_upper(false), Upper::Untouched);
        assert!(DIRTY.0.iter().all(|&b| b != 0));
    }

    /// CPUID needs no privileges: the loop runs on the host too, in every
    /// vector-state setting the host allows.
    #[test]
    fn cpuid_loop_runs_on_host() {
        let env = Env::host();
        let mut uppers = std::vec![Upper::Untouched];
        uppers.push(clean_upper(env.has_avx()));
        uppers.extend(dirty_upper(env.has_avx(), env.has_avx512()));
        for upper in uppers {
            // SAFETY: CPUID is unprivileged; no ports, no MMIO, no markers;
            // the upper settings are those the host's XCR0 allows.
            let c = unsafe { timed_loop(ExitKind::Cpuid, upper, 50, None) };
            assert!(c > 0, "{upper:?}");
        }
    }
}
