//! The four user-mode save strategies a context switch can use, each paired
//! with XRSTOR: the one list of their names and what each needs.
//!
//! This is the vocabulary shared by the native chooser
//! (`native::choose_save_strategy`), the guest's in-guest switch benchmark and
//! the VMM's report, so a strategy has exactly one name everywhere.

use core::fmt;

use crate::info::XsaveInfo;
use crate::layout::Format;

/// A save instruction (each restores with XRSTOR).
///
/// # Examples
/// ```
/// use xstate::{CpuidRegs, Format, SaveStrategy, XsaveInfo};
/// // A CPU whose 0xD.1 EAX is 0x1: XSAVEOPT, but no XSAVEC or XGETBV(1).
/// let info = XsaveInfo::from_leaf_0xd(|subleaf| match subleaf {
///     0 => CpuidRegs::new(0x7, 832, 832, 0),
///     1 => CpuidRegs::new(0x1, 0, 0, 0),
///     2 => CpuidRegs::new(256, 576, 0, 0),
///     _ => CpuidRegs::default(),
/// })?;
/// let usable: Vec<_> = SaveStrategy::ALL.into_iter().filter(|s| s.supported(&info)).collect();
/// assert_eq!(usable, [SaveStrategy::Xsave, SaveStrategy::Xsaveopt]);
/// let s = SaveStrategy::from_name("xsavec-xinuse").unwrap();
/// assert_eq!((s, s.format()), (SaveStrategy::XsavecXinuse, Format::Compacted));
/// # Ok::<(), xstate::InfoError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SaveStrategy {
    /// XSAVE: standard format, every requested component written.
    Xsave = 0,
    /// XSAVEOPT: standard format, skips components in init state or
    /// unmodified since the last XRSTOR from the same area.
    Xsaveopt = 1,
    /// XSAVEC: compacted format with XCOMP_BV = requested, init components
    /// skipped.
    Xsavec = 2,
    /// XSAVEC with the requested mask narrowed by XGETBV(1) (XINUSE), so the
    /// image is dense in the components in use (Linux's choice).
    XsavecXinuse = 3,
}

impl SaveStrategy {
    /// Every strategy, in [`SaveStrategy::NAMES`] order.
    pub const ALL: [SaveStrategy; 4] = [
        SaveStrategy::Xsave,
        SaveStrategy::Xsaveopt,
        SaveStrategy::Xsavec,
        SaveStrategy::XsavecXinuse,
    ];

    /// The names used in reports, command lines and JSON, indexed by
    /// `strategy as usize`.
    pub const NAMES: [&'static str; 4] = ["xsave", "xsaveopt", "xsavec", "xsavec-xinuse"];

    /// The strategy's name (one of [`SaveStrategy::NAMES`]).
    pub const fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The strategy of a name, `None` if it names none.
    pub fn from_name(name: &str) -> Option<SaveStrategy> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The format the strategy writes.
    pub const fn format(self) -> Format {
        match self {
            SaveStrategy::Xsave | SaveStrategy::Xsaveopt => Format::Standard,
            SaveStrategy::Xsavec | SaveStrategy::XsavecXinuse => Format::Compacted,
        }
    }

    /// Whether CPUID leaf 0xD.1 lists the instructions it needs.
    pub fn supported(self, info: &XsaveInfo) -> bool {
        match self {
            SaveStrategy::Xsave => true,
            SaveStrategy::Xsaveopt => info.has_xsaveopt(),
            SaveStrategy::Xsavec => info.has_xsavec(),
            SaveStrategy::XsavecXinuse => info.has_xsavec() && info.has_xgetbv1(),
        }
    }
}

impl fmt::Display for SaveStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::SaveStrategy;

    #[test]
    fn names_round_trip_in_order() {
        for (i, s) in SaveStrategy::ALL.into_iter().enumerate() {
            assert_eq!(s as usize, i);
            assert_eq!(SaveStrategy::from_name(s.name()), Some(s));
        }
        assert_eq!(SaveStrategy::from_name("xsavec+xgetbv1"), None);
    }
}
