//! The report record round-trips and its decoder refuses what is invalid.

use super::*;
use crate::protocol::names::SWITCH_STRATEGIES;

#[test]
fn result_aux_follows_results() {
    let mut r = Report::new();
    let rec = Report::new().results[0];
    assert!(r.push_result(rec));
    assert!(r.push_result_aux(rec, 832));
    assert_eq!((r.aux(0), r.aux(1), r.aux(2)), (0, 832, 0));
    let back = Report::from_bytes(r.as_bytes()).unwrap();
    assert_eq!(back.aux(1), 832);
    r.switch_strategy = fixed_str("xsavec-xinuse");
    assert_eq!(field_str(&r.switch_strategy), "xsavec-xinuse");
    assert!(SWITCH_STRATEGIES
        .iter()
        .all(|s| s.len() + "-avx-initall".len() <= NAME_LEN));
}

#[test]
fn round_trip_and_validation() {
    let mut r = Report::new();
    r.xcr0 = 0x7;
    assert!(r.push_result(ResultRecord {
        name: fixed_str("aes-128-cbc"),
        variant: fixed_str("aesni-sse"),
        size: 8192,
        work: 8192 * 100,
        cycles: 12345,
        unit: WorkUnit::Bytes as u32,
        check: 1,
        residual: 0.0,
    }));
    let back = Report::from_bytes(r.as_bytes()).unwrap();
    assert_eq!(back.xcr0, 0x7);
    assert_eq!(field_str(&back.results()[0].name), "aes-128-cbc");

    let bytes = r.as_bytes();
    assert_eq!(
        Report::from_bytes(&bytes[..100]).err(),
        Some(ReportError::Truncated {
            got: 100,
            need: Report::SIZE
        })
    );
    let mut bad = bytes.to_vec();
    bad[0] ^= 1;
    assert!(matches!(
        Report::from_bytes(&bad),
        Err(ReportError::BadMagic(_))
    ));
    let mut r2 = r;
    r2.result_count = 1000;
    assert_eq!(
        Report::from_bytes(r2.as_bytes()).err(),
        Some(ReportError::TooManyResults(1000))
    );
}
