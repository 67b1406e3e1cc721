//! Which vector state is live when the registers are borrowed: the one
//! vocabulary the AES register-borrow rows (`aes::borrow`) and the copy
//! benchmark's borrowing price (`bench::copy`) measure in, and the VMM
//! reports. What a save costs depends on which components hold data
//! (XINUSE), so each case names exactly the components it makes live.

use xstate::{Xfeature, XfeatureMask};

/// Which vector registers hold data when the task's state is saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    /// XMM0-15 and MXCSR (SSE); everything above in its init state.
    Xmm,
    /// Plus the upper halves of YMM0-15 (AVX).
    Ymm,
    /// Plus the opmask registers, ZMM0-15's upper halves and ZMM16-31.
    Zmm,
}

impl Live {
    /// Every case, in report order.
    pub const ALL: [Live; 3] = [Live::Xmm, Live::Ymm, Live::Zmm];

    /// Its place in [`Live::ALL`].
    pub const fn index(self) -> usize {
        const {
            let mut i = 0;
            while i < Live::ALL.len() {
                assert!(Live::ALL[i] as usize == i, "ALL is in declaration order");
                i += 1;
            }
        }
        self as usize
    }

    /// The name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Live::Xmm => "xmm",
            Live::Ymm => "ymm",
            Live::Zmm => "zmm",
        }
    }

    /// The vector components holding data (x87 not among them).
    pub fn mask(self) -> XfeatureMask {
        let sse = XfeatureMask::EMPTY.with(Xfeature::Sse);
        match self {
            Live::Xmm => sse,
            Live::Ymm => sse.with(Xfeature::Avx),
            Live::Zmm => sse.with(Xfeature::Avx) | XfeatureMask::AVX512,
        }
    }
}
