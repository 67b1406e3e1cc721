//! The kernel half of the guest: everything that only the bare-metal binary
//! needs. CPL0 code lives in [`boot`] (assembly only); everything else runs
//! at CPL3.
//!
//! # Adding a CPL3 task
//!
//! Tasks are ordinary Rust functions called from `run_workloads` in
//! `main.rs`: the kernel has a single CPL3 context (IOPL=3, interrupts off),
//! so a "task" needs no scheduler. It may use SSE/AVX/AVX-512 as far as
//! [`xcr0::xcr0`] allows, large buffers from [`arena`], direct port I/O, and
//! the [`syscall`] gate for what needs CPL0. A fault anywhere in it ends the
//! run with a report (see [`fault`]); a result goes into the
//! [`guest::protocol::Report`] with `push_result`, a skipped variant with
//! `push_skipped`.

pub mod arena;
pub mod bench;
pub mod boot;
pub mod cpu;
pub mod fault;
pub mod hostile;
pub mod libc;
pub mod percpu;
pub mod pvh;
pub mod report;
pub mod selftest;
pub mod serial;
pub mod shared;
pub mod smp;
pub mod snapshot;
pub mod syscall;
pub mod xcr0;
