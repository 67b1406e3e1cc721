//! The checksum of `linux-probe`, the static Linux user program the tests
//! run as `/init` of a stock Linux guest (`src/probe/main.rs`, feature
//! `linux-probe`; docs/run.md).
//!
//! The program proves that a snapshot taken in the middle of a vector loop
//! carries the loop's live registers: the loop's accumulators stay in
//! vector registers (`ymm0`-`ymm1` under AVX2, `xmm0`-`xmm3` under SSE2)
//! from the first pass to the last, and half-way through it writes a plain
//! snapshot request to [`SNAPSHOT_PORT`] from inside the same `asm!` block,
//! so nothing is spilled to memory across the write: a VMM that saves the
//! guest in that exit must save those registers, or the restored program
//! finishes with another checksum.
//!
//! The checksum is a Fletcher-style pair of sums in eight 32-bit lanes
//! (word `i` of every block goes to lane `i`: `s1 += w; s2 += s1`, both
//! wrapping), over [`PROBE_ROUNDS`] passes of [`PROBE_BLOCKS`] blocks of
//! xorshift data, folded into 64 bits. [`scalar`] is the reference; the
//! AVX2 and SSE2 loops compute the same lanes, so all three agree (the
//! host's unit tests check it, and the guest's result is compared with
//! [`scalar`] by `vmm/tests/linux_probe.rs`).

use crate::protocol::SNAPSHOT_PORT;
use crate::workloads::CpuFeatures;

/// Lanes of the checksum: one 32-bit word of each per lane.
pub const LANES: usize = 8;
/// One block: a word for each lane (32 bytes, one `ymm` load).
pub type Block = [u32; LANES];
/// Blocks of data: 64 KiB, which stays in the L2 cache of every host.
pub const PROBE_BLOCKS: usize = 2048;
/// Passes over the data: long enough that the request half-way is well
/// inside the run. On kvm_amd under QEMU TCG (`-cpu max`, Zen 4 host) the
/// 4096 passes took 94 ms through AVX2 and 142 ms through SSE2
/// (docs/hw-kvm.md); natively, milliseconds.
pub const PROBE_ROUNDS: u32 = 4096;
/// The first state of the xorshift generator of [`fill`].
pub const PROBE_SEED: u32 = 0x9e37_79b9;
/// What the program writes to [`SNAPSHOT_PORT`] half-way: a plain
/// snapshot request ("LNXP"), not a snapshot point's
/// ([`point_of`](crate::protocol::snapshot::point_of) is `None`).
pub const PROBE_REQUEST: u32 = u32::from_le_bytes(*b"LNXP");

/// Which loop computes the checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// 256-bit `vpaddd` on `ymm0` (s1) and `ymm1` (s2).
    Avx2,
    /// 128-bit `paddd` on `xmm0`-`xmm1` (s1) and `xmm2`-`xmm3` (s2).
    Sse2,
}

impl Path {
    /// The widest loop `f` allows: AVX2 when CPUID offers AVX and AVX2 and
    /// XCR0 enables the SSE and AVX state (bits 1 and 2), else SSE2
    /// (baseline x86-64).
    pub fn for_cpu(f: &CpuFeatures) -> Self {
        if f.avx2 {
            Path::Avx2
        } else {
            Path::Sse2
        }
    }

    /// Its word in the program's `checksum` line.
    pub fn name(self) -> &'static str {
        match self {
            Path::Avx2 => "avx2",
            Path::Sse2 => "sse2",
        }
    }
}

/// A port write made half-way through the loop, before the pass of round
/// `rounds / 2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The I/O port (32-bit `out`).
    pub port: u16,
    /// The value written.
    pub value: u32,
}

impl Request {
    /// The probe's snapshot request: [`PROBE_REQUEST`] to [`SNAPSHOT_PORT`].
    pub const SNAPSHOT: Request = Request {
        port: SNAPSHOT_PORT,
        value: PROBE_REQUEST,
    };
}

/// Fill `data` with the probe's deterministic words (xorshift32 from
/// [`PROBE_SEED`]).
pub fn fill(data: &mut [Block]) {
    let mut x = PROBE_SEED;
    for w in data.iter_mut().flatten() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *w = x;
    }
}

/// The checksum of `rounds` passes over `data`, one lane at a time: the
/// reference the vector loops must match.
///
/// # Examples
///
/// ```
/// use guest::linux_probe::{scalar, Block};
/// let data: [Block; 1] = [[1, 2, 3, 4, 5, 6, 7, 8]];
/// assert_ne!(scalar(&data, 2), scalar(&data, 1));
/// ```
pub fn scalar(data: &[Block], rounds: u32) -> u64 {
    let (mut s1, mut s2) = ([0u32; LANES], [0u32; LANES]);
    for _ in 0..rounds {
        for block in data {
            for l in 0..LANES {
                s1[l] = s1[l].wrapping_add(block[l]);
                s2[l] = s2[l].wrapping_add(s1[l]);
            }
        }
    }
    fold(&s1, &s2)
}

/// The 64-bit checksum of the lanes' two sums (FNV-1a over the lanes).
fn fold(s1: &[u32; LANES], s2: &[u32; LANES]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for l in 0..LANES {
        h ^= u64::from(s1[l]) | u64::from(s2[l]) << 32;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The checksum through `path`'s loop, with no port write; `None` when
/// this CPU cannot run that loop ([`Path::for_cpu`] of
/// [`CpuFeatures::detect`] is not AVX2).
///
/// # Examples
///
/// ```
/// use guest::linux_probe::{checksum, fill, scalar, Block, Path};
/// let mut data = [[0u32; 8]; 16];
/// fill(&mut data);
/// assert_eq!(checksum(Path::Sse2, &data, 3), Some(scalar(&data, 3)));
/// ```
pub fn checksum(path: Path, data: &[Block], rounds: u32) -> Option<u64> {
    // SAFETY: no request, so no port is written.
    unsafe { run(path, data, rounds, None) }
}

/// [`checksum`] with `request` written half-way, from inside the loop's
/// `asm!` block (the accumulators live in vector registers across it).
/// With no data or no rounds there is no loop and no write.
///
/// # Safety
///
/// The process must have the right to write `request.port` (`ioperm`, or
/// CPL0), and writing `request.value` there must be harmless: a VMM's
/// port, not a device's.
pub unsafe fn checksum_with_request(
    path: Path,
    data: &[Block],
    rounds: u32,
    request: Request,
) -> Option<u64> {
    // SAFETY: the caller upholds the port's contract.
    unsafe { run(path, data, rounds, Some(request)) }
}

/// The loops' common entry: checks the CPU and the sizes.
///
/// # Safety
///
/// As [`checksum_with_request`] when `request` is `Some`.
unsafe fn run(path: Path, data: &[Block], rounds: u32, request: Option<Request>) -> Option<u64> {
    if path == Path::Avx2 && Path::for_cpu(&CpuFeatures::detect()) != Path::Avx2 {
        return None;
    }
    if data.is_empty() || rounds == 0 {
        return Some(fold(&[0; LANES], &[0; LANES]));
    }
    let lanes = match path {
        // SAFETY: AVX2 and its state are enabled (checked above); `data`
        // is non-empty and `rounds` non-zero; the request's contract is
        // the caller's.
        Path::Avx2 => unsafe { sums_avx2(data, rounds, request) },
        // SAFETY: SSE2 is baseline x86-64; sizes and request as above.
        Path::Sse2 => unsafe { sums_sse2(data, rounds, request) },
    };
    Some(fold(&lanes[0], &lanes[1]))
}

/// The register operands of the half-way write: port, value, and 1 when
/// there is one.
fn request_operands(request: Option<Request>) -> (u16, u32, u64) {
    match request {
        Some(r) => (r.port, r.value, 1),
        None => (0, 0, 0),
    }
}

/// The AVX2 loop: `[s1, s2]` lanes.
///
/// # Safety
///
/// AVX2 usable; `data` non-empty; `rounds` > 0; the request as in
/// [`checksum_with_request`].
#[target_feature(enable = "avx2")]
unsafe fn sums_avx2(data: &[Block], rounds: u32, request: Option<Request>) -> [[u32; LANES]; 2] {
    let mut lanes = [[0u32; LANES]; 2];
    let (port, value, on) = request_operands(request);
    // SAFETY: reads `data.len()` blocks from `data` and writes 64 bytes to
    // `lanes`; `out` only when a request was given, under the caller's
    // contract. The accumulators are ymm0 and ymm1 from the first pass to
    // the store at the end: nothing spills them across the `out`.
    unsafe {
        core::arch::asm!(
            "vpxor ymm0, ymm0, ymm0",
            "vpxor ymm1, ymm1, ymm1",
            "xor {r:e}, {r:e}",
            "2:",
            "cmp {r}, {half}",
            "jne 3f",
            "test {on}, {on}",
            "jz 3f",
            "out dx, eax",
            "3:",
            "mov {p}, {data}",
            "mov {n}, {blocks}",
            "4:",
            "vpaddd ymm0, ymm0, ymmword ptr [{p}]",
            "vpaddd ymm1, ymm1, ymm0",
            "add {p}, 32",
            "dec {n}",
            "jnz 4b",
            "inc {r}",
            "cmp {r}, {rounds}",
            "jb 2b",
            "vmovdqu ymmword ptr [{lanes}], ymm0",
            "vmovdqu ymmword ptr [{lanes} + 32], ymm1",
            data = in(reg) data.as_ptr(),
            blocks = in(reg) data.len(),
            rounds = in(reg) u64::from(rounds),
            half = in(reg) u64::from(rounds / 2),
            on = in(reg) on,
            lanes = in(reg) lanes.as_mut_ptr(),
            r = out(reg) _,
            p = out(reg) _,
            n = out(reg) _,
            in("dx") port,
            in("eax") value,
            out("ymm0") _,
            out("ymm1") _,
            options(nostack),
        );
    }
    lanes
}

/// The SSE2 loop: `[s1, s2]` lanes.
///
/// # Safety
///
/// `data` non-empty; `rounds` > 0; the request as in
/// [`checksum_with_request`].
unsafe fn sums_sse2(data: &[Block], rounds: u32, request: Option<Request>) -> [[u32; LANES]; 2] {
    let mut lanes = [[0u32; LANES]; 2];
    let (port, value, on) = request_operands(request);
    // SAFETY: as in `sums_avx2`; the accumulators are xmm0-xmm3 (lanes
    // 0-3 and 4-7 of s1, then of s2), loads go through xmm4-xmm5.
    unsafe {
        core::arch::asm!(
            "pxor xmm0, xmm0",
            "pxor xmm1, xmm1",
            "pxor xmm2, xmm2",
            "pxor xmm3, xmm3",
            "xor {r:e}, {r:e}",
            "2:",
            "cmp {r}, {half}",
            "jne 3f",
            "test {on}, {on}",
            "jz 3f",
            "out dx, eax",
            "3:",
            "mov {p}, {data}",
            "mov {n}, {blocks}",
            "4:",
            "movdqu xmm4, xmmword ptr [{p}]",
            "movdqu xmm5, xmmword ptr [{p} + 16]",
            "paddd xmm0, xmm4",
            "paddd xmm1, xmm5",
            "paddd xmm2, xmm0",
            "paddd xmm3, xmm1",
            "add {p}, 32",
            "dec {n}",
            "jnz 4b",
            "inc {r}",
            "cmp {r}, {rounds}",
            "jb 2b",
            "movdqu xmmword ptr [{lanes}], xmm0",
            "movdqu xmmword ptr [{lanes} + 16], xmm1",
            "movdqu xmmword ptr [{lanes} + 32], xmm2",
            "movdqu xmmword ptr [{lanes} + 48], xmm3",
            data = in(reg) data.as_ptr(),
            blocks = in(reg) data.len(),
            rounds = in(reg) u64::from(rounds),
            half = in(reg) u64::from(rounds / 2),
            on = in(reg) on,
            lanes = in(reg) lanes.as_mut_ptr(),
            r = out(reg) _,
            p = out(reg) _,
            n = out(reg) _,
            in("dx") port,
            in("eax") value,
            out("xmm0") _,
            out("xmm1") _,
            out("xmm2") _,
            out("xmm3") _,
            out("xmm4") _,
            out("xmm5") _,
            options(nostack),
        );
    }
    lanes
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::protocol::snapshot::point_of;
    use std::vec;

    fn probe_data() -> std::vec::Vec<Block> {
        let mut data = vec![[0u32; LANES]; PROBE_BLOCKS];
        fill(&mut data);
        data
    }

    #[test]
    fn sse2_and_scalar_agree_on_the_probe_run() {
        let data = probe_data();
        let want = scalar(&data, PROBE_ROUNDS);
        assert_eq!(checksum(Path::Sse2, &data, PROBE_ROUNDS), Some(want));
    }

    #[test]
    fn avx2_agrees_where_the_host_has_it_and_is_refused_elsewhere() {
        let data = probe_data();
        let got = checksum(Path::Avx2, &data, PROBE_ROUNDS);
        if std::is_x86_feature_detected!("avx2") {
            assert_eq!(got, Some(scalar(&data, PROBE_ROUNDS)));
        } else {
            assert_eq!(got, None);
        }
    }

    #[test]
    fn loops_agree_on_odd_sizes_and_count_rounds_and_order() {
        let data = probe_data();
        for (blocks, rounds) in [(1, 1), (1, 2), (3, 5), (7, 1), (2048, 3)] {
            let d = &data[..blocks];
            let want = scalar(d, rounds);
            assert_eq!(checksum(Path::Sse2, d, rounds), Some(want));
            if std::is_x86_feature_detected!("avx2") {
                assert_eq!(checksum(Path::Avx2, d, rounds), Some(want));
            }
        }
        assert_ne!(scalar(&data[..4], 2), scalar(&data[..4], 3));
        let mut swapped = data[..4].to_vec();
        swapped.swap(1, 2);
        assert_ne!(scalar(&swapped, 1), scalar(&data[..4], 1));
    }

    #[test]
    fn no_data_or_no_rounds_is_the_empty_checksum() {
        let data = probe_data();
        let empty = scalar(&[], 0);
        assert_eq!(checksum(Path::Sse2, &[], 5), Some(empty));
        assert_eq!(checksum(Path::Sse2, &data, 0), Some(empty));
        assert_eq!(scalar(&data, 0), empty);
    }

    #[test]
    fn the_request_is_a_plain_one_to_the_snapshot_port() {
        assert_eq!(Request::SNAPSHOT.port, 0xe4);
        assert_eq!(point_of(PROBE_REQUEST), None);
    }
}
