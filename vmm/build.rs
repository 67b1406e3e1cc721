//! Builds the guest kernel (`guest/`, binary `guest-kernel`) and embeds it in
//! the `vmm` binary, so a bare `vmm run` boots our own guest; and the static
//! Linux user program `linux-probe` (same crate), whose path the tests get
//! as `VMM_LINUX_PROBE` to embed it in the initramfs they build.
//!
//! The guest is a `#![no_std]` `#![no_main]` ELF for the host target: it only
//! needs `-C relocation-model=static` for its own crate (passed with
//! `cargo rustc`) and the link arguments and linker script that
//! `guest/build.rs` adds. It is always built optimised: an unoptimised guest
//! measures nothing useful. A separate target directory keeps the nested
//! cargo from waiting on the lock of the outer one.

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out_dir.join("guest-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    println!("cargo:rerun-if-env-changed=CC");
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        static_unwinder(&out_dir, &cc);
        static_pie(&out_dir, &cc);
    } else {
        println!("cargo::rustc-check-cfg=cfg(dynamic_vmm)");
        println!("cargo:rustc-cfg=dynamic_vmm");
        println!("cargo:rustc-env=VMM_LINK=dynamic: not linux-gnu");
    }
    test_environment();

    for dir in ["guest", "xstate/src", "xstate/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );

    // A prebuilt guest (e.g. one under development) can stand in for the
    // embedded one.
    println!("cargo:rerun-if-env-changed=VMM_GUEST_KERNEL_PREBUILT");
    let kernel = match env::var_os("VMM_GUEST_KERNEL_PREBUILT") {
        Some(prebuilt) => PathBuf::from(prebuilt),
        None => build_guest_bin(&cargo, &root, &target_dir, "guest-kernel"),
    };
    println!("cargo:rustc-env=VMM_GUEST_KERNEL={}", kernel.display());
    // The static Linux user program the stock-Linux tests run as /init
    // (vmm/tests/linux_probe.rs embeds it). The guest library is shared
    // with the kernel's build (same features and profile): only the small
    // binary is compiled and linked again.
    let probe = build_guest_bin(&cargo, &root, &target_dir, "linux-probe");
    println!("cargo:rustc-env=VMM_LINUX_PROBE={}", probe.display());
}

/// Builds the guest crate's binary `bin` (`guest-kernel` or `linux-probe`)
/// in `target_dir` and returns its path.
///
/// Both binaries are built with both features, so the second build reuses
/// the first one's guest library; each binary's own link arguments come
/// from `guest/build.rs` (`cargo:rustc-link-arg-bin`).
fn build_guest_bin(cargo: &OsStr, root: &Path, target_dir: &Path, bin: &str) -> PathBuf {
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["rustc", "--release", "--offline", "-p", "guest"])
        // Bare metal has no unwinder; one codegen unit with LTO keeps the
        // image small and lets the workloads inline across crates.
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.lto=true"])
        .args(["--config", "profile.release.codegen-units=1"])
        .args(["--bin", bin, "--features", "kernel,linux-probe"])
        .arg("--target-dir")
        .arg(target_dir)
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
        .unwrap_or_else(|e| panic!("cannot run cargo to build the guest's {bin}: {e}"));
    if !status.success() {
        panic!("building the guest's {bin} (guest/, bin {bin}) failed: {status}");
    }
    let path = target_dir.join("release").join(bin);
    if !path.is_file() {
        panic!("guest binary {bin} not found at {}", path.display());
    }
    path
}

/// Link GCC's unwinder into everything this package links statically
/// (`libgcc_eh.a`) instead of loading `libgcc_s.so.1` at every start.
///
/// Why: `vmm run` is measured from process start, and loading one more
/// shared library (open, map, relocate, and the page faults that follow,
/// each a trap to a nested hypervisor) cost ~0.1 ms of a ~3 ms run. Rust's
/// standard library asks for `-lgcc_s` unless the whole build is
/// `crt-static`; a linker script named `libgcc_s.so` in a directory
/// searched first answers that request with the static archive the C
/// compiler reports, the way `gcc -static-libgcc` links C programs. The
/// unwinder is the same code (panics and `catch_unwind` work as before).
/// This covers the tests and benchmarks too, which stay dynamic
/// executables (the benchmarks load OpenBLAS with `dlopen`); the `vmm`
/// binary itself goes further ([`static_pie`]). Without the archive
/// (another C toolchain) nothing changes.
fn static_unwinder(out_dir: &Path, cc: &OsStr) {
    let Some(archive) = cc_file(cc, "libgcc_eh.a") else {
        return;
    };
    let dir = out_dir.join("static-unwinder");
    if write_scripts(&dir, &[("gcc_s", archive)]).is_ok() {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
}

/// The libraries rustc names for the standard library and the `libc`
/// crate on linux-gnu (`-lgcc_s` is the unwinder, [`static_unwinder`]).
const LIBC_LIBS: [&str; 6] = ["c", "m", "pthread", "dl", "rt", "util"];

/// Link the `vmm` binary (and only it) as a static PIE: no dynamic loader,
/// no shared libraries, and still loaded at a random address (ASLR), with
/// its relocation-read-only segment (RELRO) and non-executable stack.
///
/// Why: a dynamically linked `vmm` starts by mapping and relocating
/// `libc.so.6` and `libm.so.6` and resolving every symbol it imports
/// (BIND_NOW), a few hundred microseconds under a nested hypervisor where
/// each page fault and system call traps: the largest part of the gap to
/// the floor before `vmm run` reaches its own code (`vmm bench startup`;
/// the figures are in docs/measurements.md). A static PIE relocates itself
/// (glibc's `_dl_relocate_static_pie`) and keeps ASLR; a static non-PIE
/// would save only those relocations' page faults, measured as noise.
///
/// How: `crt-static` cannot be set for one binary of a package through
/// `cargo build` or `cargo install` (it is a `RUSTFLAGS` setting, which
/// would also apply to build scripts, proc-macros and the benchmarks). The
/// link of the binary alone gets `-static-pie`, and a directory, searched
/// by the binary's link alone, in which linker scripts named `libc.so`,
/// `libm.so`, ... stand for the C library's static archives: the link
/// rustc asks for with `-lc -lm ...` becomes the one `crt-static` would
/// give. glibc's static library warns about NSS and `dlopen`: `vmm` uses
/// neither (no user or host lookups; `HOME` is read from the
/// environment).
///
/// The C compiler is asked first, by linking an empty program with
/// `-static-pie`: where it cannot (no `libc.a`, as on Fedora without
/// `glibc-static`, or a compiler without `-static-pie`), `vmm` is linked
/// dynamically and the build says why. `VMM_LINK=dynamic` asks for the
/// dynamic link (for tools that need a dynamic loader, e.g. `LD_PRELOAD`).
/// The test `vmm/tests/startup.rs` checks the binary's ELF headers.
fn static_pie(out_dir: &Path, cc: &OsStr) {
    println!("cargo::rustc-check-cfg=cfg(dynamic_vmm)");
    println!("cargo:rerun-if-env-changed=VMM_LINK");
    let dynamic = |why: &str| {
        println!("cargo:rustc-cfg=dynamic_vmm");
        println!("cargo:rustc-env=VMM_LINK=dynamic: {why}");
    };
    match env::var("VMM_LINK").as_deref() {
        Ok("dynamic") => return dynamic("VMM_LINK=dynamic"),
        Ok("static-pie") | Err(_) => {}
        Ok(other) => panic!("VMM_LINK={other:?}: expected `static-pie` (the default) or `dynamic`"),
    }
    if env::var("TARGET").ok() != env::var("HOST").ok() {
        return dynamic("cross-compiled: the host's C library is not the target's");
    }
    let mut scripts = Vec::new();
    for lib in LIBC_LIBS {
        match cc_file(cc, &format!("lib{lib}.a")) {
            Some(archive) => scripts.push((lib, archive)),
            None => {
                println!(
                    "cargo:warning=vmm is linked dynamically: the C compiler has no lib{lib}.a \
                     (Debian: libc6-dev; Fedora: glibc-static)"
                );
                return dynamic(&format!("no lib{lib}.a"));
            }
        }
    }
    if let Err(why) = probe_static_pie(out_dir, cc) {
        println!("cargo:warning=vmm is linked dynamically: {why}");
        return dynamic(&why);
    }
    let dir = out_dir.join("static-libc");
    if let Err(e) = write_scripts(&dir, &scripts) {
        panic!(
            "cannot write the static link's scripts in {}: {e}",
            dir.display()
        );
    }
    // Search paths apply to every `-l` wherever they stand on the command
    // line; this one comes after the unwinder's and rustc's own, and before
    // the C compiler's system directories, where the shared objects are.
    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
    println!("cargo:rustc-link-arg-bins=-static-pie");
    println!("cargo:rustc-env=VMM_LINK=static-pie");
}

/// Can `cc` link a static PIE? An empty C program, linked as `vmm` is.
fn probe_static_pie(out_dir: &Path, cc: &OsStr) -> Result<(), String> {
    let src = out_dir.join("static-pie-probe.c");
    let exe = out_dir.join("static-pie-probe");
    std::fs::write(&src, "int main(void) { return 0; }\n")
        .map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let out = Command::new(cc)
        .args(["-static-pie", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| format!("`{}` did not start: {e}", cc.to_string_lossy()))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").trim();
        Err(format!(
            "`{} -static-pie` cannot link a C program ({first})",
            cc.to_string_lossy()
        ))
    }
}

/// The absolute path `cc -print-file-name=NAME` gives, if it finds the
/// file (it echoes the bare name when it does not).
fn cc_file(cc: &OsStr, name: &str) -> Option<PathBuf> {
    let out = Command::new(cc)
        .arg(format!("-print-file-name={name}"))
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}

/// In `dir`, one linker script `libNAME.so` per `(NAME, archive)` that
/// names the archive: `-lNAME` then links the archive's members.
fn write_scripts(dir: &Path, libs: &[(&str, PathBuf)]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, archive) in libs {
        let script = format!("INPUT({})\n", archive.display());
        std::fs::write(dir.join(format!("lib{name}.so")), script)?;
    }
    Ok(())
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
