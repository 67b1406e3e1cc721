//! The VMM's error type: every failure names what went wrong and where.

use std::path::PathBuf;

/// Everything that can stop a VMM operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `/dev/kvm` is missing or not accessible.
    #[error("cannot open /dev/kvm: {0} (KVM must be available and /dev/kvm readable and writable by this user)")]
    KvmUnavailable(#[source] kvm_ioctls::Error),
    /// A KVM ioctl failed.
    #[error("{what} failed: {source}")]
    Kvm {
        what: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    /// KVM lacks a capability this VMM needs.
    #[error("KVM lacks {0}")]
    KvmCapability(&'static str),
    /// KVM's supported CPUID leaf 0xD cannot be used.
    #[error("KVM's supported CPUID leaf 0xD is unusable: {0}")]
    KvmCpuid(String),
    /// The requested xfeature / CPUID policy is invalid for this host.
    #[error("invalid xstate policy: {0}")]
    Policy(String),
    /// Guest memory could not be set up or accessed.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The kernel image could not be read.
    #[error("cannot read kernel {path}: {source}")]
    KernelRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The kernel image is not a bootable PVH ELF.
    #[error("kernel image {image}: {reason}")]
    KernelImage { image: String, reason: String },
    /// An xsave image or XCR0 value was refused before KVM saw it.
    #[error("xstate: {0}")]
    Xstate(String),
    /// The guest did something this VMM does not accept.
    #[error("guest error: {0}")]
    Guest(String),
    /// Writing output failed.
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Wrap a failed KVM ioctl with what was being attempted.
    pub fn kvm(what: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> Error {
        move |source| Error::Kvm { what, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
