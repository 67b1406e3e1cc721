//! Snapshot files crafted from a real one: the guest's own snapshot (its
//! `bench=snapshot-check` write), where a section is listed in the file's
//! table, and what `vmm snapshot info` and `vmm restore` say of a file.

use std::path::PathBuf;
use std::sync::OnceLock;

use vmm::snapshot::format::read_table;

use super::{snapshot_check_args, vmm};

/// A path for a snapshot file named after `name`, in the temporary
/// directory and private to this test process.
pub fn temp_snapshot(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vmm-crafted-{}-{name}.snap", std::process::id()))
}

/// The bytes of a snapshot of the guest (its `bench=snapshot-check`
/// write), `vmm run` given `extra` arguments; the file is removed.
pub fn take_snapshot(name: &str, extra: &[&str]) -> Vec<u8> {
    let path = temp_snapshot(name);
    let mut args = snapshot_check_args(path.to_str().unwrap()).to_vec();
    args.extend(extra);
    args.extend(["--no-native", "--json"]);
    let out = vmm(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    bytes
}

/// One real snapshot of the guest, taken once per test process.
pub fn real_snapshot() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| take_snapshot("real", &[]))
}

/// Section `name` of the snapshot `b`: the byte offset of its entry in the
/// section table (64 bytes each, after the 64-byte header; the section's
/// offset is at +40, its length at +48), its offset and its length.
pub fn entry_at(b: &[u8], name: &str) -> (usize, u64, u64) {
    let t = read_table(b).unwrap();
    let i = t.iter().position(|e| e.name == name).unwrap();
    (64 + 64 * i, t[i].offset, t[i].length)
}

/// The arguments of `vmm snapshot info PATH`.
pub fn info_args(path: &str) -> [&str; 3] {
    ["snapshot", "info", path]
}

/// The arguments of `vmm restore PATH` without the native comparison,
/// stopped after `timeout` seconds.
pub fn restore_args<'a>(path: &'a str, timeout: &'a str) -> [&'a str; 5] {
    ["restore", path, "--no-native", "--timeout", timeout]
}

/// What `vmm` said on `stderr`: its `vmm: ` lines, the prefix cut.
pub fn said(stderr: &str) -> impl Iterator<Item = &str> {
    stderr.lines().filter_map(|l| l.strip_prefix("vmm: "))
}

/// The refusal `vmm` printed on `stderr`: its first `vmm: ` line past any
/// warning (a dynamic xfeature refused, say).
pub fn refusal(stderr: &str) -> Option<&str> {
    said(stderr).find(|l| !l.starts_with("warning: "))
}
