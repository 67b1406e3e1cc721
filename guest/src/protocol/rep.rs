//! Interleaved guest/native repetitions: the guest signals each repetition
//! of a workload row on [`REP_PORT`], and the VMM, while the vCPU is stopped
//! in that exit, times the same row natively before resuming the guest, so
//! guest and native repetitions alternate (guest, native, guest, native
//! ...) and both see the same machine noise.
//!
//! | port | width | direction | meaning |
//! |------|-------|-----------|---------|
//! | 0xe0 | 32 | in  | how many repetitions per row the VMM wants (1..=[`MAX_ROW_REPS`]), each signalled; all-ones where nothing decodes the port (or 0): one repetition, no signals |
//! | 0xe0 | 32 | out | guest-physical address of a [`RepRecord`]: "row `key`, repetition `rep` done" |
//! | 0xdc | 32 | in  | [`PARTS_WANTED`] when the VMM also wants each timed part signalled; anything else (all-ones where nothing decodes the port): no part signals |
//! | 0xdc | 32 | out | guest-physical address of a [`PartRecord`]: "part `part` of repetition `rep` of row `key` done" |
//!
//! Why parts too: a repetition is timed in parts
//! (`guest::workloads::timing::PARTS`, about 2 ms each in a quick run), and
//! the host's other work changes the machine's speed within milliseconds.
//! Signalled per part, the VMM alternates guest and native parts (guest
//! part 0, native part 0, guest part 1, ...), so the two halves of each
//! compared pair run ~2 ms apart instead of a whole repetition apart. A
//! DGEMM or Linpack call longer than a part is cut between its blocks or
//! panels (`guest::workloads::timing::Stages`), so a part can be less than
//! one call of the workload: [`PartRecord::work`] says how much.
//!
//! The native side runs the guest kernel's own machine code where it can:
//! the kernel exports [`NATIVE_ROW_SYMBOL`] with the `extern "C"` ABI
//! `fn(*const NativeRowArgs, *mut NativeRowOut)`, which runs one repetition
//! of one row exactly as the guest does, calling
//! [`NativeRowArgs::on_part`] after each timed part (where the VMM holds
//! it until the guest's next part is done).

/// The repetition port (see the module table).
pub const REP_PORT: u16 = 0xe0;
/// The most repetitions per row a guest runs, whatever the VMM answers.
pub const MAX_ROW_REPS: u32 = 15;
/// The symbol of the guest kernel's native entry point. The `2` is the
/// version of [`NativeRowArgs`]: a VMM looking for this name never calls a
/// kernel built for another layout (it falls back to its own build and
/// says so).
pub const NATIVE_ROW_SYMBOL: &str = "vmm_native_row2";
/// The part port (see the module table).
pub const PART_PORT: u16 = 0xdc;
/// What an `in` from [`PART_PORT`] returns when the VMM wants part signals.
pub const PARTS_WANTED: u32 = 1;

/// Which workload a [`RowKey`] names.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// `aes-128-cbc`.
    AesCbc = 1,
    /// `aes-128-ctr`.
    AesCtr = 2,
    /// `dgemm`.
    Dgemm = 3,
    /// `linpack`.
    Linpack = 4,
    /// `aes-256-xts`: variant `i < 4` is `XtsVariant::ALL[i]`, 4 the
    /// portable `soft` row.
    Xts = 5,
    /// `aes-128-gcm`: variant `i < 3` is `GcmVariant::ALL[i]`, 3 the
    /// portable `soft` row.
    Gcm = 6,
    /// `aes-256-xts` with the register borrow around each message
    /// (`VARIANT +xsave/LIVE`): variant `3 * v + l` is `XtsVariant::ALL[v]`
    /// with `Live::ALL[l]` state live.
    XtsBorrow = 7,
    /// `aes-128-gcm` with the register borrow, numbered like
    /// [`RowKind::XtsBorrow`] over `GcmVariant::ALL`.
    GcmBorrow = 8,
}

impl RowKind {
    /// Every kind, in their numbering's order.
    pub const ALL: [RowKind; 8] = [
        RowKind::AesCbc,
        RowKind::AesCtr,
        RowKind::Dgemm,
        RowKind::Linpack,
        RowKind::Xts,
        RowKind::Gcm,
        RowKind::XtsBorrow,
        RowKind::GcmBorrow,
    ];

    /// The row name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            RowKind::AesCbc => "aes-128-cbc",
            RowKind::AesCtr => "aes-128-ctr",
            RowKind::Dgemm => "dgemm",
            RowKind::Linpack => "linpack",
            RowKind::Xts | RowKind::XtsBorrow => "aes-256-xts",
            RowKind::Gcm | RowKind::GcmBorrow => "aes-128-gcm",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => RowKind::AesCbc,
            2 => RowKind::AesCtr,
            3 => RowKind::Dgemm,
            4 => RowKind::Linpack,
            5 => RowKind::Xts,
            6 => RowKind::Gcm,
            7 => RowKind::XtsBorrow,
            8 => RowKind::GcmBorrow,
            _ => return None,
        })
    }
}

/// One result row as a 32-bit word: kind (bits 28..32), variant index in
/// its family's `ALL` order, or as the [`RowKind`] numbers it (bits
/// 24..28), size (bits 0..24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowKey {
    /// The workload.
    pub kind: RowKind,
    /// Index into `AesVariant::ALL` or `GemmVariant::ALL`, or as the
    /// [`RowKind`] says for the XTS and GCM rows.
    pub variant: u8,
    /// Message bytes or matrix order.
    pub size: u32,
}

impl RowKey {
    /// The largest size a key holds.
    pub const MAX_SIZE: u32 = (1 << 24) - 1;

    /// The word for this key (sizes above [`RowKey::MAX_SIZE`] are cut to it).
    pub fn encode(self) -> u32 {
        (self.kind as u32) << 28
            | u32::from(self.variant & 15) << 24
            | self.size.min(Self::MAX_SIZE)
    }

    /// The key of a word, or `None` for an unknown kind.
    pub fn decode(word: u32) -> Option<Self> {
        Some(RowKey {
            kind: RowKind::from_u8((word >> 28) as u8)?,
            variant: ((word >> 24) & 15) as u8,
            size: word & Self::MAX_SIZE,
        })
    }
}

/// What the guest hands over for one repetition (at the address written to
/// [`REP_PORT`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepRecord {
    /// [`RowKey::encode`] of the row.
    pub key: u32,
    /// Repetition index, from 0.
    pub rep: u32,
    /// Work units of the repetition's median part (bytes or flops): a
    /// measurement is timed in parts, and the part with the median rate
    /// stands for it (`guest::workloads::timing::Measured`). The VMM
    /// compares these only when no [`PartRecord`]s were signalled;
    /// otherwise the part pairs decide.
    pub work: u64,
    /// TSC cycles that part took.
    pub cycles: u64,
    /// A digest of the row's checked result (DGEMM: the product's bits;
    /// Linpack: the solution's bits; AES: 0), to show that guest and native
    /// computed bit for bit the same thing.
    pub digest: u64,
}

impl RepRecord {
    /// Size in guest memory.
    pub const SIZE: usize = core::mem::size_of::<RepRecord>();
}

/// What the guest hands over for one timed part of a repetition (at the
/// address written to [`PART_PORT`]), and what the native side passes to
/// [`NativeRowArgs::on_part`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartRecord {
    /// [`RowKey::encode`] of the row.
    pub key: u32,
    /// Repetition index, from 0.
    pub rep: u32,
    /// Part index within the repetition, from 0 (top-ups after the
    /// calibrated parts count on).
    pub part: u32,
    /// Zero.
    pub reserved: u32,
    /// Work units of the part (bytes or flops).
    pub work: u64,
    /// TSC cycles the part took.
    pub cycles: u64,
}

impl PartRecord {
    /// Size in guest memory.
    pub const SIZE: usize = core::mem::size_of::<PartRecord>();
}

/// Called by the native entry point after each timed part: the record and
/// [`NativeRowArgs::on_part_ctx`].
pub type OnPart = unsafe extern "C" fn(ctx: *mut core::ffi::c_void, part: *const PartRecord);

/// The arguments of [`NATIVE_ROW_SYMBOL`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NativeRowArgs {
    /// [`RowKey::encode`] of the row to run.
    pub key: u32,
    /// Nonzero: quick-run measurement targets.
    pub quick: u32,
    /// TSC rate for the measurement target (0 = fixed work).
    pub tsc_khz: u64,
    /// Scratch memory for the row's buffers.
    pub scratch: *mut u8,
    /// Its length in bytes.
    pub scratch_len: usize,
    /// Told about each timed part (`None`: nobody).
    pub on_part: Option<OnPart>,
    /// Passed to `on_part`.
    pub on_part_ctx: *mut core::ffi::c_void,
}

/// What [`NATIVE_ROW_SYMBOL`] returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NativeRowOut {
    /// 1 when the row ran (0: the host cannot run the variant, or the
    /// scratch was too small).
    pub ran: u32,
    /// 1 when its check passed.
    pub check: u32,
    /// Work units timed.
    pub work: u64,
    /// TSC cycles they took.
    pub cycles: u64,
    /// The same digest as [`RepRecord::digest`].
    pub digest: u64,
}

/// FNV-1a over the bits of `values`: the digest of [`RepRecord::digest`].
pub fn digest_f64(values: &[f64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_kinds_are_listed_in_their_numbering() {
        for (i, k) in RowKind::ALL.iter().enumerate() {
            assert_eq!(RowKind::from_u8(i as u8 + 1), Some(*k));
        }
        assert_eq!(RowKind::from_u8(RowKind::ALL.len() as u8 + 1), None);
    }

    #[test]
    fn keys_round_trip() {
        let k = RowKey {
            kind: RowKind::Linpack,
            variant: 2,
            size: 1000,
        };
        assert_eq!(k.encode(), 0x4200_03e8);
        assert_eq!(RowKey::decode(k.encode()), Some(k));
        assert_eq!(RowKey::decode(0x0200_0010), None);
        let k = RowKey {
            kind: RowKind::XtsBorrow,
            variant: 11,
            size: 512,
        };
        assert_eq!(k.encode(), 0x7b00_0200);
        assert_eq!(RowKey::decode(k.encode()), Some(k));
        for (kind, word) in [
            (RowKind::Xts, 5),
            (RowKind::Gcm, 6),
            (RowKind::GcmBorrow, 8),
        ] {
            assert_eq!(RowKey::decode(word << 28).map(|k| k.kind), Some(kind));
        }
        assert_eq!(RowKey::decode(9 << 28), None);
        assert_eq!(RepRecord::SIZE, 32);
        assert_eq!(PartRecord::SIZE, 32);
        assert_eq!(digest_f64(&[]), 0xcbf2_9ce4_8422_2325);
        assert_ne!(digest_f64(&[0.0]), digest_f64(&[-0.0]));
    }
}
