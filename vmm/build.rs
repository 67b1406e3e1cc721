//! Builds the guest kernel (`guest/`, binary `guest-kernel`) and embeds it in
//! the `vmm` binary, so a bare `vmm run` boots our own guest.
//!
//! The guest is a `#![no_std]` `#![no_main]` ELF for the host target: it only
//! needs `-C relocation-model=static` for its own crate (passed with
//! `cargo rustc`) and the link arguments and linker script that
//! `guest/build.rs` adds. It is always built optimised: an unoptimised guest
//! measures nothing useful. A separate target directory keeps the nested
//! cargo from waiting on the lock of the outer one.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out_dir.join("guest-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    static_unwinder(&out_dir);
    test_environment();

    // A prebuilt guest (e.g. one under development) can stand in for the
    // embedded one.
    println!("cargo:rerun-if-env-changed=VMM_GUEST_KERNEL_PREBUILT");
    if let Some(prebuilt) = env::var_os("VMM_GUEST_KERNEL_PREBUILT") {
        println!(
            "cargo:rustc-env=VMM_GUEST_KERNEL={}",
            PathBuf::from(prebuilt).display()
        );
        return;
    }

    for dir in ["guest", "xstate/src", "xstate/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );

    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args(["rustc", "--release", "--offline", "-p", "guest"])
        // Bare metal has no unwinder; one codegen unit with LTO keeps the
        // image small and lets the workloads inline across crates.
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.lto=true"])
        .args(["--config", "profile.release.codegen-units=1"])
        .args(["--bin", "guest-kernel", "--features", "kernel"])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--", "-C", "relocation-model=static"]);
    // The outer build's flags and wrappers (clippy, coverage, a host-tuned
    // target-cpu) are for host code, not for the guest.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CLIPPY_ARGS",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the guest kernel: {e}"));
    if !status.success() {
        panic!("building the guest kernel (guest/, bin guest-kernel) failed: {status}");
    }
    let kernel = target_dir.join("release").join("guest-kernel");
    if !kernel.is_file() {
        panic!("guest kernel not found at {}", kernel.display());
    }
    println!("cargo:rustc-env=VMM_GUEST_KERNEL={}", kernel.display());
}

/// Link GCC's unwinder into `vmm` statically (`libgcc_eh.a`) instead of
/// loading `libgcc_s.so.1` at every start.
///
/// Why: `vmm run` is measured from process start, and here loading one
/// more shared library (open, map, relocate, and the page faults that
/// follow, each a trap to a nested hypervisor) costs ~0.1 ms of a ~3 ms
/// run. Rust's standard library asks for `-lgcc_s` unless the whole binary
/// is static (`crt-static`, which the host target cannot apply to one
/// binary only); a linker script named `libgcc_s.so` in a directory
/// searched first answers that request with the static archive the C
/// compiler reports, the way `gcc -static-libgcc` links C programs. The
/// unwinder is the same code (panics and `catch_unwind` work as before);
/// libc and libm stay shared. Without the archive (another C toolchain)
/// nothing changes.
fn static_unwinder(out_dir: &std::path::Path) {
    println!("cargo:rerun-if-env-changed=CC");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let Ok(out) = Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // `-print-file-name` echoes the bare name when it finds nothing.
    if !out.status.success() || !path.is_absolute() || !path.is_file() {
        return;
    }
    let dir = out_dir.join("static-unwinder");
    let script = format!("INPUT({})\n", path.display());
    if std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("libgcc_s.so"), script))
        .is_err()
    {
        return;
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}

/// What the tests need that this machine may lack, as cfgs: a test that
/// needs KVM (`no_kvm`), QEMU (`no_qemu`) or a C compiler (`no_cc`) is
/// compiled `#[ignore]`d where it is missing, so `cargo test`'s summary
/// counts it as ignored rather than passing a test that ran nothing. With
/// `VMM_REQUIRE_KVM=1` (CI wherever `/dev/kvm` exists) nothing is ignored:
/// the tests run and a missing piece fails them. Probed when this script
/// runs: after `/dev` changes, `PATH` or `VMM_REQUIRE_KVM` changes, or a
/// rebuild of the package.
///
/// The peer VMMs are the exception (`no_peers`): no CI builds them, so a
/// test of them is ignored unless both `VMM_PEER_CLOUD_HYPERVISOR` and
/// `VMM_PEER_FIRECRACKER` name executable files, whatever
/// `VMM_REQUIRE_KVM` says.
fn test_environment() {
    for cfg in ["no_kvm", "no_qemu", "no_cc", "no_peers"] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    println!("cargo:rerun-if-env-changed=VMM_REQUIRE_KVM");
    println!("cargo:rerun-if-env-changed=PATH");
    let mut peers = true;
    for var in ["VMM_PEER_CLOUD_HYPERVISOR", "VMM_PEER_FIRECRACKER"] {
        println!("cargo:rerun-if-env-changed={var}");
        peers &= env::var_os(var).is_some_and(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
    }
    if !peers {
        println!("cargo:rustc-cfg=no_peers");
    }
    let kvm = std::path::Path::new("/dev/kvm");
    // A missing path would rerun this script on every build: watch /dev
    // for the node to appear instead.
    let watched = if kvm.exists() {
        kvm
    } else {
        std::path::Path::new("/dev")
    };
    println!("cargo:rerun-if-changed={}", watched.display());
    if env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
        return;
    }
    let opens = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(kvm)
        .is_ok();
    let runs = |program: &str| {
        Command::new(program)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for (cfg, present) in [
        ("no_kvm", opens),
        ("no_qemu", runs("qemu-system-x86_64")),
        ("no_cc", runs("cc")),
    ] {
        if !present {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
