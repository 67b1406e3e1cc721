//! (doc-hidden) What the `vmm` binary, the integration tests, the benches
//! and the fuzz targets reach that the library's API does not expose, in
//! one place. Nothing here is meant for a library user: the public API is
//! the rest of the crate (`ARCHITECTURE.md`, "Public API").

/// The binary's command line: each subcommand's arguments and entry point,
/// and the pieces of the foundation it prints and exits through.
pub mod cli {
    pub use crate::bench::{main as bench, BenchArgs};
    pub use crate::features::cli::{main as features, FeaturesArgs};
    pub use crate::input::{parse_in_place, parse_seconds, parse_whole, SecondsError, WholeError};
    pub use crate::native::interleave::DEFAULT_REPS;
    pub use crate::output::stdout::{self, StdoutError, EXIT_CLOSED_PIPE};
    pub use crate::output::terminal;
    pub use crate::output::{create_dir, parse_destination, write_set};

    /// `--plot`: the SVG charts of a run.
    pub mod plot {
        pub use crate::report::plot::{check_target, run_charts, write_svg};
    }
    pub use crate::report::snapshot_info::{main as snapshot, SnapshotArgs};
}

// What the integration tests, the benches and the fuzz bodies reach inside
// the machine, under the paths the crate gives it (`vmm::internal::arch::…`
// for `crate::arch::…`): crafting inputs byte by byte, the limits a test
// asserts, the ioctls a test drives a vCPU with.

/// `crate::arch`: the kernel loaders, the MP table, the AMX permission.
pub mod arch {
    /// `crate::arch::acpi`.
    pub mod acpi {
        pub use crate::arch::acpi::{build, RSDP_ADDR};
    }
    /// `crate::arch::amx`.
    pub mod amx {
        pub use crate::arch::amx::{permit_guest, permit_policy, Permit};
    }
    /// `crate::arch::boot`.
    pub mod boot {
        pub use crate::arch::boot::{load_kernel, KernelPlan};
    }
    /// `crate::arch::elf`.
    pub mod elf {
        pub use crate::arch::elf::check_image;
    }
    /// `crate::arch::layout`.
    pub mod layout {
        pub use crate::arch::layout::{ram_pieces, ram_regions, RamRegion};
    }
    /// `crate::arch::linux`.
    pub mod linux {
        pub use crate::arch::linux::{check_bzimage, initrd_address, load_bzimage};
    }
    /// `crate::arch::mptable`.
    pub mod mptable {
        pub use crate::arch::mptable::{build, CpuSignature};
    }
}

/// `crate::bench`: the openssl yardstick and its statistics.
pub mod bench {
    /// `crate::bench::openssl`.
    pub mod openssl {
        pub use crate::bench::openssl::openssl_speed;
    }
    /// `crate::bench::stats`.
    pub mod stats {
        pub use crate::bench::stats::Spread;
    }
}

/// `crate::devices`: the bounds on what a guest can make `vmm` keep.
pub mod devices {
    pub use crate::devices::{
        GUEST_RETAINED_MAX, MAX_MARKS, MAX_REPORT_ERRORS, SERIAL_CAPTURE_MAX,
    };
}

/// `crate::output`: the temporary files a write leaves while it runs.
pub mod output {
    pub use crate::output::{temp_name, write_with, TEMP_MARKER};
}

/// `crate::report`: `vmm snapshot info`'s model.
pub mod report {
    /// `crate::report::snapshot_info`.
    pub mod snapshot_info {
        pub use crate::report::snapshot_info::info;
    }
}

/// `crate::run`: a Linux guest's `x86/fpu:` lines.
pub mod run {
    /// `crate::run::linux_xstate`.
    pub mod linux_xstate {
        pub use crate::run::linux_xstate::LinuxXstate;
    }
}

/// `crate::snapshot`: the two ways a snapshot finds the populated pages.
pub mod snapshot {
    /// `crate::snapshot::save`.
    pub mod save {
        pub use crate::snapshot::save::scan;
    }
}

/// `crate::vstate`: the xsave and XFD ioctls of one vCPU.
pub mod vstate {
    /// `crate::vstate::vcpu`.
    pub mod vcpu {
        pub use crate::vstate::vcpu::{get_xsave, set_xcr0};
    }
    /// `crate::vstate::xfd`.
    pub mod xfd {
        pub use crate::vstate::xfd::{supported, XfdMsrs};
    }
}
