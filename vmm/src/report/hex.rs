//! Masks as JSON: the models keep [`XfeatureMask`] typed and only their
//! serialised form is the `0x`-prefixed hex string the JSON documents
//! promise (`"0x207"`), through `#[serde(serialize_with = ...)]`.

use serde::Serializer;
use xstate::XfeatureMask;

/// Serialises a mask as `"0x..."`.
pub fn mask<S: Serializer>(m: &XfeatureMask, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{m:#x}"))
}

/// Serialises an optional mask as `"0x..."` or null.
pub fn opt_mask<S: Serializer>(m: &Option<XfeatureMask>, s: S) -> Result<S::Ok, S::Error> {
    match m {
        Some(m) => mask(m, s),
        None => s.serialize_none(),
    }
}

/// `"0x..."` of a mask, or `-` when there is none: the text-table cell.
pub fn or_dash(m: Option<XfeatureMask>) -> String {
    m.map_or_else(|| "-".to_string(), |m| format!("{m:#x}"))
}
