//! Link arguments for the bare-metal guest kernel (bin `guest-kernel`) and
//! the static Linux user program (bin `linux-probe`).
//!
//! The kernel is a `#![no_std]` `#![no_main]` ELF for the host target: no C
//! runtime, no libc, statically linked at the addresses `linker.ld` gives
//! (load address 1 MiB, the PVH convention). The arguments are added for the
//! bin only, so the library half of the crate (shared with the VMM) builds
//! and tests like any other crate.

use std::env;
use std::path::PathBuf;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = manifest_dir.join("linker.ld");

    for arg in [
        // No crt0: the entry is the PVH 32-bit entry point in kernel/boot.rs.
        "-nostartfiles".to_string(),
        "-nostdlib".to_string(),
        "-static".to_string(),
        // Position-dependent: the boot code and the static page tables and
        // descriptor tables use absolute addresses.
        "-no-pie".to_string(),
        format!("-Wl,-T,{}", script.display()),
        "-Wl,--build-id=none".to_string(),
        "-Wl,--gc-sections".to_string(),
        "-Wl,-z,noexecstack".to_string(),
        // The VMM's native entry point: a root for --gc-sections (nothing in
        // the kernel calls it; see `vmm_native_row2` in main.rs).
        "-Wl,-u,vmm_native_row2".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin=guest-kernel={arg}");
    }
    // The Linux user program: no crt0 (its `_start` is in src/probe/),
    // no libc, a static position-dependent ELF that Linux loads as is.
    for arg in [
        "-nostartfiles",
        "-nostdlib",
        "-static",
        "-no-pie",
        "-Wl,--build-id=none",
        "-Wl,--gc-sections",
        "-Wl,-z,noexecstack",
    ] {
        println!("cargo:rustc-link-arg-bin=linux-probe={arg}");
    }
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-changed=build.rs");
}
