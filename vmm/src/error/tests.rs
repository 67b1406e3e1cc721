use super::*;

/// A source the message already spells out is not repeated; one the
/// message leaves out is appended; the result is one line.
#[test]
fn one_line_joins_the_chain_once() {
    let e = Error::SnapshotWrite {
        path: "/x/y.snap".into(),
        source: crate::output::WriteError::Io {
            what: "writing",
            path: "/x/.y.snap.tmp".into(),
            source: std::io::Error::other("disk full"),
        },
    };
    assert_eq!(
        one_line(&e),
        "output: cannot write snapshot /x/y.snap: writing /x/.y.snap.tmp: disk full"
    );
    let e = VcpuError::UartState("line one\nline two".into());
    assert_eq!(
        one_line(&e),
        "the saved UART state is invalid: line one; line two"
    );
    let e = Error::Vcpu(VcpuError::Spawn(std::io::Error::other("EAGAIN")));
    assert_eq!(one_line(&e), "cannot start the vCPU thread: EAGAIN");
    #[derive(Debug, thiserror::Error)]
    #[error("reading {0}")]
    struct Terse(&'static str, #[source] std::io::Error);
    let e = Terse("kernel.elf", std::io::Error::other("EIO"));
    assert_eq!(one_line(&e), "reading kernel.elf: EIO");
}

#[test]
fn kvm_hints_follow_the_errno() {
    let hint = |errno| {
        Error::KvmUnavailable(kvm_ioctls::Error::new(errno))
            .hint()
            .unwrap()
    };
    assert!(hint(libc::EACCES).contains("kvm group"));
    assert!(hint(libc::ENOENT).contains("modprobe kvm_intel"));
    assert!(hint(libc::EIO).contains("dmesg"));
    assert!(Error::Argument("x".into()).hint().is_none());
}

#[test]
fn xfeatures_hint_lists_every_user_component() {
    let h = xfeatures_hint();
    for name in ["x87", "sse", "avx", "zmm_hi256", "pkru", "xtiledata", "apx"] {
        assert!(h.contains(name), "{h}");
    }
    let e = Error::Policy(PolicyError::Parse {
        spec: "bogus".into(),
        source: XfeatureMask::parse("bogus", XfeatureMask::ALL_KNOWN).unwrap_err(),
    });
    assert_eq!(e.hint(), Some(h));
}
