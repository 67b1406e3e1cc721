//! The guest's exit and xstate benchmarks (`bench=`), as library code so
//! that what can run natively is tested on the host with `cargo test -p
//! guest`.
//!
//! - [`exits`]: timed loops of VM exits (PIO, MMIO, CPUID) at CPL3 with the
//!   upper vector state clean or dirty; the rows `exit-*`.
//! - [`xcheck`]: every x87, SSE, AVX and AVX-512 register loaded with a
//!   distinct pattern, then exits, then a bit-for-bit comparison; and the
//!   VMM-side XMM edit (`xstate-check` rows).
//! - [`parallel`]: the SMP scaling set (`bench=parallel`): AES-CTR and
//!   DGEMM on one CPU, then on every CPU at once.
//! - [`ctxsw`]: user-level context switches between CPL3 contexts with each
//!   XSAVE strategy, and the boot-time strategy chooser (`ctxsw` rows and
//!   [`crate::protocol::Report::switch_strategy`]).
//!
//! Everything here runs at CPL3. The kernel (`src/kernel/bench.rs`) owns
//! the parts that need it: port access (its TSS I/O bitmap), the mapping of
//! [`crate::protocol::BENCH_MMIO_ADDR`], the CPL0 loops behind system calls,
//! and memory from its arena. Code here never allocates: callers hand in
//! scratch bytes, sized by each module's `scratch_bytes`.

#[cfg(test)]
extern crate std;

pub mod copy;
pub mod ctxsw;
pub mod exits;
pub mod parallel;
mod timed_asm;
pub mod xcheck;

use xstate::{Format, Xfeature, XfeatureMask, XsaveInfo};

/// What the benchmarks need to know about the CPU as the guest runs it.
#[derive(Clone, Copy, Debug)]
pub struct Env {
    /// CPUID leaf 0xD as the guest sees it.
    pub info: XsaveInfo,
    /// The XCR0 the guest kernel set (its record, not XGETBV at CPL3: on
    /// kvm_pvm CPL3 code runs on the host's XCR0, a superset).
    pub xcr0: XfeatureMask,
}

impl Env {
    /// True when XCR0 enables AVX state (YMM upper halves).
    pub fn has_avx(&self) -> bool {
        self.xcr0.contains(Xfeature::Avx)
    }

    /// True when XCR0 enables all three AVX-512 components.
    pub fn has_avx512(&self) -> bool {
        self.xcr0.contains_all(XfeatureMask::AVX512)
    }

    /// Bytes of one XSAVE area that holds either format of XCR0, rounded up
    /// to the 64-byte alignment.
    pub fn area_len(&self) -> usize {
        let std = self.info.layout(self.xcr0, Format::Standard);
        let cmp = self.info.layout(self.xcr0, Format::Compacted);
        let len = match (std, cmp) {
            (Ok(s), Ok(c)) => s.total_size().max(c.total_size()),
            (Ok(s), Err(_)) => s.total_size(),
            _ => xstate::buffer::XSAVE_MIN_SIZE as u32,
        };
        (len as usize).next_multiple_of(64)
    }

    /// The host CPU's view (tests): CPUID leaf 0xD and XGETBV(0).
    #[cfg(test)]
    pub fn host() -> Env {
        let info = XsaveInfo::from_leaf_0xd(|sub| xstate::info::cpuid(0xd, sub))
            .expect("host CPUID leaf 0xD");
        let (lo, hi): (u32, u32);
        // SAFETY: every x86-64 Linux host the tests run on enables XSAVE
        // (OSXSAVE); XGETBV(0) only reads XCR0.
        unsafe {
            core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi,
                options(nomem, nostack, preserves_flags));
        }
        Env {
            info,
            xcr0: XfeatureMask::from_bits((u64::from(hi) << 32) | u64::from(lo)),
        }
    }
}

/// Splits a 64-byte-aligned piece of `len` bytes off the front of `scratch`
/// (skipping bytes up to the alignment); `None` when it does not fit.
pub fn carve(scratch: &mut [u8], len: usize) -> Option<(&mut [u8], &mut [u8])> {
    let skip = (scratch.as_ptr() as usize).wrapping_neg() & 63;
    if scratch.len() < skip.checked_add(len)? {
        return None;
    }
    let (_, rest) = scratch.split_at_mut(skip);
    Some(rest.split_at_mut(len))
}

/// A 64-byte-aligned, zeroed scratch buffer for tests.
#[cfg(test)]
pub(crate) fn test_scratch(len: usize) -> std::vec::Vec<u8> {
    std::vec![0u8; len + 64]
}
