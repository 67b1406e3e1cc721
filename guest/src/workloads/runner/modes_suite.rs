//! The XTS-AES-256 and AES-128-GCM rows: known answers first, then
//! throughput per message size, then at one 512-byte sector the same
//! message with the register borrow (XRSTOR + XSAVE) around it for XMM,
//! YMM and ZMM live state, and the portable implementation. Each timed
//! row but the portable one is the median of several samples taken round
//! the rows: the repetitions the VMM pairs with native ones, or
//! [`MODE_SAMPLES`] where nobody pairs them.

use core::fmt::Write;

use super::ctx::Ctx;
use super::sizes::{
    modes_scratch, AES_FIXED_BYTES, BORROW_SIZE, MAX_MODE_SAMPLES, MAX_MODE_SIZES, MODE_BUF,
    MODE_SAMPLES,
};
use crate::protocol::{RowKey, RowKind, WorkUnit, MAX_ROW_REPS};
use crate::workloads::aes::borrow::{Borrow, AREA_BYTES};
use crate::workloads::aes::gcm::{self, Gcm128, GcmKey, GcmVariant};
use crate::workloads::aes::kat_modes::{self, XTS_V10_KEY};
use crate::workloads::aes::xts::{self, Xts256, XtsKeys, XtsVariant};
use crate::workloads::aes::{kat, soft, BLOCK};
use crate::workloads::features::CpuFeatures;
use crate::workloads::live::Live;
use crate::workloads::scratch::Scratch;
use crate::workloads::selection::Selection;
use crate::workloads::text::Reason;
use crate::workloads::timing::median_rate;

const XTS: &str = RowKind::Xts.name();
const GCM: &str = RowKind::Gcm.name();
/// The GCM IV of every timed message.
const IV: [u8; 12] = [
    0xca, 0xfe, 0xba, 0xbe, 0xfa, 0xce, 0xdb, 0xad, 0xde, 0xca, 0xf8, 0x88,
];

/// `VARIANT +xsave/WIDTH`, the borrow rows' variant name.
fn borrowed(variant: &str, live: Live) -> Reason {
    let mut r = Reason::new();
    let _ = write!(r, "{variant} +xsave/{}", live.name());
    r
}

/// `not available: WHY`, the skip reason of a variant or borrow row this
/// CPU or XCR0 does not allow.
fn unavailable(why: &Reason) -> Reason {
    let mut r = Reason::new();
    let _ = write!(r, "not available: {}", why.as_str());
    r
}

fn bad_size(size: usize) -> Reason {
    let mut r = Reason::new();
    let _ = write!(
        r,
        "message size {size} unsupported: a multiple of 16 up to {MODE_BUF}"
    );
    r
}

/// One timed row: variant `v` (an index into the suite's list) on
/// `size`-byte messages, with the register borrow for `live` state around
/// each message, or without.
#[derive(Clone, Copy)]
struct Row {
    v: usize,
    size: usize,
    live: Option<Live>,
}

/// Most variants of one mode (XTS has four).
const MAX_VARIANTS: usize = 4;
/// Most timed rows of one mode: every variant at every size and with each
/// of the three borrows.
const MAX_ROWS: usize = MAX_VARIANTS * (MAX_MODE_SIZES + Live::ALL.len());
/// Most samples of one row: a paired run's repetitions, or the unpaired
/// samples.
const MAX_SAMPLES: usize = if MAX_ROW_REPS as usize > MAX_MODE_SAMPLES {
    MAX_ROW_REPS as usize
} else {
    MAX_MODE_SAMPLES
};

/// The [`RowKind`]s of one mode's rows: the plain rows (variants by their
/// index in the mode's `ALL`, the portable row after them) and the borrow
/// rows (`3 * variant + live`).
#[derive(Clone, Copy)]
struct Kinds {
    plain: RowKind,
    borrow: RowKind,
}

impl Kinds {
    const XTS: Kinds = Kinds {
        plain: RowKind::Xts,
        borrow: RowKind::XtsBorrow,
    };
    const GCM: Kinds = Kinds {
        plain: RowKind::Gcm,
        borrow: RowKind::GcmBorrow,
    };

    /// The rows' name in reports.
    fn name(self) -> &'static str {
        self.plain.name()
    }

    /// The key of variant `all` (its index in the mode's `ALL`) at `size`,
    /// with the borrow for `live` or without.
    fn key(self, all: usize, size: usize, live: Option<Live>) -> RowKey {
        let (kind, variant) = match live {
            None => (self.plain, all),
            Some(l) => (self.borrow, Live::ALL.len() * all + l.index()),
        };
        RowKey {
            kind,
            variant: variant as u8,
            size: size as u32,
        }
    }

    /// The variant column of the row `key` names, for variant names
    /// `names` (the mode's `ALL` order), or `None` for a key of another
    /// mode or out of range: the inverse of [`Kinds::key`].
    fn variant_name(self, names: &[&str], key: RowKey) -> Option<Reason> {
        let v = usize::from(key.variant);
        if key.kind == self.plain {
            let name = match names.get(v) {
                Some(name) => name,
                None if v == names.len() => SOFT,
                None => return None,
            };
            Some(Reason::of(name))
        } else if key.kind == self.borrow {
            let lives = Live::ALL.len();
            Some(borrowed(names.get(v / lives)?, Live::ALL[v % lives]))
        } else {
            None
        }
    }

    /// Whether variant `all` has a row this run times (the native entry
    /// point times one).
    fn wants(self, ctx: &Ctx, all: usize) -> bool {
        ctx.only.is_none_or(|k| {
            (k.kind == self.plain && usize::from(k.variant) == all)
                || (k.kind == self.borrow && usize::from(k.variant) / Live::ALL.len() == all)
        })
    }
}

/// The variant column of the XTS or GCM row `key` names (`None` for any
/// other key): how the VMM finds the row a signalled repetition belongs
/// to.
pub fn mode_row_variant(key: RowKey) -> Option<Reason> {
    match key.kind {
        RowKind::Xts | RowKind::XtsBorrow => {
            Kinds::XTS.variant_name(&XtsVariant::ALL.map(XtsVariant::name), key)
        }
        RowKind::Gcm | RowKind::GcmBorrow => {
            Kinds::GCM.variant_name(&GcmVariant::ALL.map(GcmVariant::name), key)
        }
        _ => None,
    }
}

/// The portable rows' variant column.
const SOFT: &str = "soft";

/// One mode's rows for the variants that passed their known answers
/// (`listed[v]`: variant `v`'s name and its index in the mode's `ALL`);
/// `enc(v, msg)` encrypts one message with variant `v` (and
/// advances whatever per-message state it has).
///
/// The samples go round the rows (every row's first sample, then every
/// row's second ...) and each row reports its median rate: the host's slow
/// spells last seconds here, and samples taken back to back could all fall
/// in one. Each sample is one repetition ([`Ctx::measure_rep`]): where the
/// VMM pairs repetitions with native ones, part by part, there are as many
/// as it asks for, each signalled, so these rows get a guest/native ratio
/// measured like every other row's. `enc` is generic, not `dyn`: the timed
/// loop calls the variant directly, as a caller of a cipher
/// library would (one indirect call is ~2% of a 512-byte XTS message here).
#[allow(clippy::too_many_arguments)]
fn rows<F: FnMut(usize, &mut [u8])>(
    ctx: &mut Ctx,
    kinds: Kinds,
    listed: &[(&str, usize)],
    sizes: &[usize],
    buf: &mut [u8],
    area: &mut [u8],
    usable: &CpuFeatures,
    enc: &mut F,
) {
    let mut rows = [Row {
        v: 0,
        size: 0,
        live: None,
    }; MAX_ROWS];
    let name = kinds.name();
    let mut n = 0;
    for (v, &(variant, _)) in listed.iter().enumerate().take(MAX_VARIANTS) {
        for &size in sizes.iter().take(MAX_MODE_SIZES) {
            if size > buf.len() || !size.is_multiple_of(BLOCK) {
                ctx.skip(name, variant, &bad_size(size));
                continue;
            }
            rows[n] = Row {
                v,
                size,
                live: None,
            };
            n += 1;
        }
        for live in Live::ALL {
            if let Err(why) = Borrow::new(area, live, usable) {
                ctx.skip(name, borrowed(variant, live).as_str(), &unavailable(&why));
                continue;
            }
            rows[n] = Row {
                v,
                size: BORROW_SIZE,
                live: Some(live),
            };
            n += 1;
        }
    }
    let key = |row: &Row| kinds.key(listed[row.v].1, row.size, row.live);
    // The native entry point times one row.
    let mut kept = 0;
    for i in 0..n {
        if ctx.only.is_none_or(|k| k == key(&rows[i])) {
            rows[kept] = rows[i];
            kept += 1;
        }
    }
    let rows = &rows[..kept];
    let fixed_bytes = AES_FIXED_BYTES[ctx.full];
    // Each sample is one repetition, signalled as such: where the VMM
    // pairs them, as many as it asks for.
    let samples = if ctx.only.is_some() {
        1
    } else if ctx.hook.paired() {
        ctx.hook.reps().clamp(1, MAX_ROW_REPS) as usize
    } else {
        // At most MAX_MODE_SAMPLES (checked where they are defined).
        MODE_SAMPLES[ctx.full]
    };
    let mut got = [[(0u64, 0u64); MAX_SAMPLES]; MAX_ROWS];
    for s in 0..samples {
        for (row, got) in rows.iter().zip(got.iter_mut()) {
            let msg = &mut buf[..row.size];
            let fixed = fixed_bytes / (row.size as u64 + 64);
            let (work, rep) = (row.size as u64, s as u32);
            got[s] = match row.live {
                None => ctx.measure_rep(key(row), rep, fixed, work, 0, |_| enc(row.v, msg)),
                // Available: `Borrow::new` succeeded for it above and
                // depends only on the live state and the features.
                Some(live) => match Borrow::new(area, live, usable) {
                    Ok(mut b) => ctx.measure_rep(key(row), rep, fixed, work, 0, |_| {
                        b.pair();
                        enc(row.v, msg)
                    }),
                    Err(_) => (0, 0),
                },
            };
        }
    }
    for (row, got) in rows.iter().zip(got.iter_mut()) {
        let (reps, cycles) = median_rate(&mut got[..samples]);
        let variant = listed[row.v].0;
        let with_borrow = row.live.map(|live| borrowed(variant, live));
        ctx.result(
            name,
            with_borrow.as_ref().map_or(variant, Reason::as_str),
            row.size,
            reps * row.size as u64,
            cycles,
            WorkUnit::Bytes,
            reps > 0,
            0.0,
        );
    }
}

/// The buffers both suites carve: the message and the XSAVE area; `None`
/// after skip records when the scratch is too small.
fn buffers<'a>(
    ctx: &mut Ctx,
    name: &str,
    variants: &[&str],
    scratch: &'a mut [u8],
) -> Option<(&'a mut [u8], &'a mut [u8])> {
    let mut s = Scratch::new(scratch);
    let have = s.remaining();
    match (s.take::<u8>(MODE_BUF), s.take::<u8>(AREA_BYTES)) {
        (Some(buf), Some(area)) => {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = i as u8;
            }
            Some((buf, area))
        }
        _ => {
            for v in variants {
                ctx.skip_for_scratch(name, v, MODE_BUF, modes_scratch(), have);
            }
            None
        }
    }
}

/// A variant that failed its known answers: an unchecked, untimed result
/// per size and a skip record naming the vector.
fn failed(ctx: &mut Ctx, name: &str, variant: &str, sizes: &[usize], why: &Reason) {
    for &size in sizes {
        ctx.result(name, variant, size, 0, 0, WorkUnit::Bytes, false, 0.0);
    }
    ctx.skip(name, variant, why);
}

pub(super) fn xts_suite(
    ctx: &mut Ctx,
    usable: &CpuFeatures,
    sel: &Selection,
    sizes: &[usize],
    scratch: &mut [u8],
) {
    let names = XtsVariant::ALL.map(XtsVariant::name);
    let Some((buf, area)) = buffers(ctx, XTS, &names, scratch) else {
        return;
    };
    let keys = XtsKeys::new(&XTS_V10_KEY);
    let mut timed: [Option<Xts256>; MAX_VARIANTS] = [None; MAX_VARIANTS];
    let mut listed = [("", 0); MAX_VARIANTS];
    let mut n = 0;
    for (all, v) in XtsVariant::ALL.into_iter().enumerate() {
        if !Kinds::XTS.wants(ctx, all) {
            continue;
        }
        let x = match Xts256::with_detected(v, usable) {
            Ok(x) => x,
            Err(why) => {
                ctx.skip(XTS, v.name(), &unavailable(&why));
                continue;
            }
        };
        if let Err(why) = kat_modes::verify_xts(&x, sel.corrupt_aes_key) {
            failed(ctx, XTS, v.name(), sizes, &why);
            continue;
        }
        timed[n] = Some(x);
        listed[n] = (v.name(), all);
        n += 1;
    }
    // Consecutive sectors per variant, as a disk writes them.
    let mut units = [0u128; MAX_VARIANTS];
    let mut enc = |v: usize, m: &mut [u8]| {
        if let Some(x) = &timed[v] {
            // Whole blocks by construction (`rows` checks): cannot fail.
            let _ = x.encrypt_unit(&keys, units[v], m);
            units[v] += 1;
        }
    };
    let passed = &listed[..n];
    rows(ctx, Kinds::XTS, passed, sizes, buf, area, usable, &mut enc);
    // The portable row ("generic C" in the seed): vector 10 first.
    let soft = XtsVariant::ALL.len();
    if !Kinds::XTS.wants(ctx, soft) {
        return;
    }
    let mut d = kat_modes::XTS_V10_PLAINTEXT;
    let kat_keys = kat_modes::xts_keys(&XTS_V10_KEY, sel.corrupt_aes_key);
    let ok = xts::soft_encrypt_unit(&kat_keys, kat_modes::XTS_V10_UNIT, &mut d).is_ok()
        && d == kat_modes::XTS_V10_CIPHERTEXT;
    soft_row(
        ctx,
        Kinds::XTS.key(soft, BORROW_SIZE, None),
        ok,
        buf,
        &mut |m| {
            let _ = xts::soft_encrypt_unit(&keys, 7, m);
        },
    );
}

pub(super) fn gcm_suite(
    ctx: &mut Ctx,
    usable: &CpuFeatures,
    sel: &Selection,
    sizes: &[usize],
    scratch: &mut [u8],
) {
    let names = GcmVariant::ALL.map(GcmVariant::name);
    let Some((buf, area)) = buffers(ctx, GCM, &names, scratch) else {
        return;
    };
    let mut timed: [Option<(Gcm128, GcmKey)>; MAX_VARIANTS] = [None, None, None, None];
    let mut listed = [("", 0); MAX_VARIANTS];
    let mut n = 0;
    for (all, v) in GcmVariant::ALL.into_iter().enumerate() {
        if !Kinds::GCM.wants(ctx, all) {
            continue;
        }
        let g = match Gcm128::with_detected(v, usable) {
            Ok(g) => g,
            Err(why) => {
                ctx.skip(GCM, v.name(), &unavailable(&why));
                continue;
            }
        };
        if let Err(why) = kat_modes::verify_gcm(&g, sel.corrupt_aes_key) {
            failed(ctx, GCM, v.name(), sizes, &why);
            continue;
        }
        timed[n] = Some((g, GcmKey::new(g.expand_key(&kat::KEY_2B7E))));
        listed[n] = (v.name(), all);
        n += 1;
    }
    let mut enc = |v: usize, m: &mut [u8]| {
        if let Some((g, key)) = &timed[v] {
            // At most 64 KiB: far below GCM's limit, cannot fail.
            let _ = g.encrypt(key, &IV, &[], m);
        }
    };
    let passed = &listed[..n];
    rows(ctx, Kinds::GCM, passed, sizes, buf, area, usable, &mut enc);
    let soft = GcmVariant::ALL.len();
    if !Kinds::GCM.wants(ctx, soft) {
        return;
    }
    let v = &kat_modes::GCM_VECTORS[1];
    let mut rk = soft::expand_key(&v.key);
    if sel.corrupt_aes_key {
        kat::corrupt(&mut rk);
    }
    let mut d = [0u8; 64];
    d.copy_from_slice(v.plaintext);
    let ok = gcm::soft_encrypt(&GcmKey::new(rk), &v.iv, v.aad, &mut d) == Ok(v.tag)
        && d == *v.ciphertext;
    let key = GcmKey::new(soft::expand_key(&kat::KEY_2B7E));
    soft_row(
        ctx,
        Kinds::GCM.key(soft, BORROW_SIZE, None),
        ok,
        buf,
        &mut |m| {
            let _ = gcm::soft_encrypt(&key, &IV, &[], m);
        },
    );
}

/// The `soft` row (`key`) at one sector, or a failed check when its known
/// answer (`ok`) did not hold.
fn soft_row(ctx: &mut Ctx, key: RowKey, ok: bool, buf: &mut [u8], enc: &mut dyn FnMut(&mut [u8])) {
    let (name, size) = (key.kind.name(), key.size as usize);
    if !ok {
        let mut why = Reason::new();
        let _ = write!(why, "KAT failed: portable reference");
        failed(ctx, name, SOFT, &[size], &why);
        return;
    }
    let msg = &mut buf[..size];
    // The portable code is ~100x slower: a smaller fixed amount of work.
    let fixed = AES_FIXED_BYTES[ctx.full] / 64 / (size as u64 + 64);
    let (reps, cycles) = ctx.measure(key, fixed.max(1), size as u64, 0, |_| enc(msg));
    ctx.bytes_result(name, SOFT, size, reps, cycles);
}
