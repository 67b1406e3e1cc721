//! Shared helpers for the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub mod cpio;
pub mod crafted;
pub mod linux;

/// Skip the rest of `test`, saying why: a `SKIPPED test: why` line on
/// stderr (the hardware-KVM harness runs with `--nocapture` and counts
/// those), and the same line appended to the file `VMM_SKIP_LOG` names,
/// when set (`.ci/run` sets it: libtest calls a test that returned early
/// `ok`, and CI counts the logged ones as skipped, not passed).
pub fn skip(test: &str, why: &str) {
    let line = format!("SKIPPED {test}: {why}");
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("VMM_SKIP_LOG") {
        use std::io::Write;
        // One write of a short line with O_APPEND: concurrent tests and
        // binaries do not interleave within a line.
        let logged = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = logged {
            panic!("{test}: cannot log the skip to VMM_SKIP_LOG {path:?}: {e}");
        }
    }
}

/// Whether KVM tests can run. Where `/dev/kvm` cannot be opened the test
/// skips and says why, unless `VMM_REQUIRE_KVM=1` (set by CI wherever
/// `/dev/kvm` exists), in which case the skip is a failure.
pub fn kvm_or_skip(test: &str) -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("{test}: VMM_REQUIRE_KVM=1 but /dev/kvm cannot be opened: {e}");
            }
            skip(test, &format!("/dev/kvm cannot be opened ({e})"));
            false
        }
    }
}

/// The `vmm` binary of this build (cargo builds it for the package's
/// integration tests and benchmarks, and names it here).
pub fn vmm_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vmm"))
}

/// Run `vmm` with arguments.
pub fn vmm(args: &[&str]) -> Output {
    Command::new(vmm_bin())
        .args(args)
        .output()
        .expect("cannot start the vmm binary")
}

/// The path a user names standard input by: `/dev/stdin`, or where a
/// system has no such link (the hardware-KVM harness's initramfs: only
/// udev or systemd makes it), `/proc/self/fd/0`, which it points to.
pub fn stdin_path() -> &'static str {
    if std::path::Path::new("/dev/stdin").exists() {
        "/dev/stdin"
    } else {
        "/proc/self/fd/0"
    }
}

/// Run `vmm` with arguments and `input` written into its standard input
/// through a pipe (by a thread, so a reader that stops early cannot block
/// the test), for inputs named [`stdin_path`].
pub fn vmm_piped(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(vmm_bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the vmm binary");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = input.to_vec();
    // A reader that refuses the pipe closes it: EPIPE is not a failure.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("vmm output");
    writer.join().expect("the writer thread");
    out
}

/// Run `vmm ... --json` and parse stdout.
pub fn vmm_json(args: &[&str]) -> (Output, serde_json::Value) {
    let mut all: Vec<&str> = args.to_vec();
    all.push("--json");
    let out = vmm(&all);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "vmm {all:?} did not print JSON ({e}); status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, v)
}

/// `vmm run --json` of a guest that runs no workload and no native
/// comparison, stopped after `timeout_s` seconds, with `extra` arguments:
/// the run of tests that look at the VMM's own handling of the guest.
pub fn run_bare_json(timeout_s: &str, extra: &[&str]) -> (Output, serde_json::Value) {
    let mut args = vec![
        "run",
        "--workload",
        "none",
        "--no-native",
        "--timeout",
        timeout_s,
    ];
    args.extend_from_slice(extra);
    vmm_json(&args)
}

/// The `vmm run` arguments of the guest's snapshot self-check into `path`:
/// `bench=snapshot-check` loads every register of its XCR0, asks for a
/// snapshot there, and after a restore compares them byte for byte.
pub fn snapshot_check_args(path: &str) -> [&str; 7] {
    [
        "run",
        "--workload",
        "none",
        "--cmdline",
        "bench=snapshot-check",
        "--snapshot-file",
        path,
    ]
}

/// `vmm restore PATH` of a snapshot [`snapshot_check_args`] wrote, the
/// file removed after: it must exit 0 with its one `snapshot-check` row
/// passing. Returns the `--json` output.
pub fn restore_checked(path: &std::path::Path) -> serde_json::Value {
    let (out, v) = vmm_json(&["restore", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(path);
    assert!(out.status.success(), "{v:#}");
    assert_eq!(v["exit_status"], 0, "{v:#}");
    let rows = rows_named(&v, "snapshot-check");
    assert_eq!(rows.len(), 1, "{v:#}");
    assert_eq!(rows[0]["check"], "pass", "{v:#}");
    v
}

/// The snapshot at `path` still holds `before` (a restore must not modify
/// it); then it is removed.
pub fn assert_unchanged_then_remove(path: &std::path::Path, before: &[u8]) {
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "restore must not modify the snapshot"
    );
    let _ = std::fs::remove_file(path);
}

/// The section names of `vmm snapshot info --json` output `info`, in file
/// order.
pub fn section_names(info: &serde_json::Value) -> Vec<&str> {
    info["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

/// How many entries of `dir` end in `.json` (no recursion).
pub fn json_files_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count()
}

/// The rows of `--json` output `v` whose workload is `name`.
pub fn rows_named<'a>(v: &'a serde_json::Value, name: &str) -> Vec<&'a serde_json::Value> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name)
        .collect()
}

/// The path of `name` among the recorded CPUID tables of
/// `xstate/tests/data`, as a command-line argument.
pub fn data(name: &str) -> String {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("xstate/tests/data")
        .join(name)
        .display()
        .to_string()
}

/// The embedded guest kernel, written to a temporary file (for QEMU),
/// removed when the returned path is dropped.
pub fn guest_kernel_file() -> tempfile::TempPath {
    temp_file("guest-kernel.elf", vmm::GUEST_KERNEL)
}

/// A minimal ELF64 with one PT_LOAD segment of `code` at 1 MiB and,
/// optionally, a PVH entry note pointing at it.
pub fn tiny_pvh_elf(code: &[u8], with_pvh_note: bool) -> Vec<u8> {
    const LOAD: u64 = 0x10_0000;
    let ehsize = 64u64;
    let phentsize = 56u64;
    let phnum: u64 = if with_pvh_note { 2 } else { 1 };
    let note_off = ehsize + phentsize * phnum;
    // Note: namesz 4 "Xen\0", descsz 8, type 18 (XEN_ELFNOTE_PHYS32_ENTRY).
    let mut note = Vec::new();
    note.extend_from_slice(&4u32.to_le_bytes());
    note.extend_from_slice(&8u32.to_le_bytes());
    note.extend_from_slice(&18u32.to_le_bytes());
    note.extend_from_slice(b"Xen\0");
    note.extend_from_slice(&LOAD.to_le_bytes());
    let code_off = note_off + if with_pvh_note { note.len() as u64 } else { 0 };

    let mut e = Vec::new();
    e.extend_from_slice(b"\x7fELF");
    e.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little-endian, version 1, SysV
    e.extend_from_slice(&[0; 8]);
    e.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    e.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    e.extend_from_slice(&1u32.to_le_bytes());
    e.extend_from_slice(&LOAD.to_le_bytes()); // e_entry
    e.extend_from_slice(&ehsize.to_le_bytes()); // e_phoff
    e.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    e.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    e.extend_from_slice(&(ehsize as u16).to_le_bytes());
    e.extend_from_slice(&(phentsize as u16).to_le_bytes());
    e.extend_from_slice(&(phnum as u16).to_le_bytes());
    e.extend_from_slice(&64u16.to_le_bytes()); // e_shentsize
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shnum
    e.extend_from_slice(&0u16.to_le_bytes()); // e_shstrndx
    assert_eq!(e.len() as u64, ehsize);

    let phdr =
        |e: &mut Vec<u8>, ty: u32, flags: u32, off: u64, addr: u64, size: u64, align: u64| {
            e.extend_from_slice(&ty.to_le_bytes());
            e.extend_from_slice(&flags.to_le_bytes());
            e.extend_from_slice(&off.to_le_bytes());
            e.extend_from_slice(&addr.to_le_bytes());
            e.extend_from_slice(&addr.to_le_bytes());
            e.extend_from_slice(&size.to_le_bytes());
            e.extend_from_slice(&size.to_le_bytes());
            e.extend_from_slice(&align.to_le_bytes());
        };
    phdr(&mut e, 1, 5, code_off, LOAD, code.len() as u64, 0x1000);
    if with_pvh_note {
        phdr(&mut e, 4, 4, note_off, 0, note.len() as u64, 4);
        e.extend_from_slice(&note);
    }
    e.extend_from_slice(code);
    e
}

/// `bytes` in a new file of the temporary directory whose name ends in
/// `name`, removed when the returned path is dropped (so a test run leaves
/// nothing behind, and tests running at once never share a file).
pub fn temp_file(name: &str, bytes: &[u8]) -> tempfile::TempPath {
    let mut f = tempfile::Builder::new()
        .prefix("vmm-test-")
        .suffix(&format!("-{name}"))
        .tempfile()
        .expect("create temp file");
    std::io::Write::write_all(&mut f, bytes).expect("write temp file");
    f.into_temp_path()
}

/// 32-bit PVH entry code: load seven GPRs with distinct values, ask for a
/// snapshot (`out 0xf3, eax`), then check every one and exit with 0, or
/// with 10 + the index of the first register that changed.
pub fn snapshot_regs_kernel() -> Vec<u8> {
    // (mov opcode, cmp encoding, value)
    let regs: [(u8, &[u8], u32); 7] = [
        (0xb8, &[0x3d], 0x1122_3344),       // eax
        (0xbb, &[0x81, 0xfb], 0x5566_7788), // ebx
        (0xb9, &[0x81, 0xf9], 0x99aa_bbcc), // ecx
        (0xba, &[0x81, 0xfa], 0xddee_ff00), // edx
        (0xbe, &[0x81, 0xfe], 0xdead_f00d), // esi
        (0xbf, &[0x81, 0xff], 0xdead_beef), // edi
        (0xbd, &[0x81, 0xfd], 0x1234_5678), // ebp
    ];
    let mut c = Vec::new();
    for (mov, _, v) in regs {
        c.push(mov);
        c.extend_from_slice(&v.to_le_bytes());
    }
    c.extend_from_slice(&[0xe7, guest::protocol::SNAPSHOT_PORT as u8]); // out imm8, eax
                                                                        // Each check: cmp reg, imm32; je +7 (skip the failure exit);
                                                                        // mov eax, 10+i; out 0xf4, eax.
    for (i, (_, cmp, v)) in regs.iter().enumerate() {
        c.extend_from_slice(cmp);
        c.extend_from_slice(&v.to_le_bytes());
        c.extend_from_slice(&[0x74, 7]);
        c.push(0xb8);
        c.extend_from_slice(&(10 + i as u32).to_le_bytes());
        c.extend_from_slice(&[0xe7, guest::protocol::DEBUG_EXIT_PORT as u8]);
    }
    c.extend_from_slice(&[
        0x31,
        0xc0,
        0xe7,
        guest::protocol::DEBUG_EXIT_PORT as u8,
        0xf4,
    ]);
    c
}

/// A JSON hex string (`"0xe7"`) as a number.
pub fn hex(v: &serde_json::Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("expected a hex string, got {v}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// A process's stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether the test runs inside the hardware-KVM harness
/// (`scripts/hw-kvm.sh` sets `VMM_HW_KVM=1`).
pub fn in_hw_kvm_harness() -> bool {
    std::env::var("VMM_HW_KVM").as_deref() == Ok("1")
}

/// `workload` for `--workload`, with `quick` added (the small sizes, the
/// same rows) inside the hardware-KVM harness: TCG runs the full DGEMM
/// sizes for minutes (`aes,gemm` on two vCPUs took 267 s on a Zen 3
/// host), past the 120 s a restored guest is given to finish. For tests
/// that run a guest's workloads to their end.
pub fn harness_sized(workload: &str) -> String {
    if in_hw_kvm_harness() {
        format!("{workload},quick")
    } else {
        workload.to_string()
    }
}

/// Whether `qemu-system-x86_64` runs here (see [`tool_or_skip`]).
pub fn qemu_or_skip(test: &str) -> bool {
    tool_or_skip(test, "qemu-system-x86_64", "qemu-system-x86")
}

/// Whether `cc`, which compiles `vmm bench startup`'s floor program, runs
/// here (see [`tool_or_skip`]).
pub fn cc_or_skip(test: &str) -> bool {
    tool_or_skip(test, "cc", "gcc")
}

/// Whether `program --version` runs here. Where it does not, the test says
/// so and skips, unless `VMM_REQUIRE_KVM=1` (CI, whose machine has the
/// Debian `package`: `.ci/run` installs QEMU, the image ships gcc), in
/// which case a missing program is a failure. Inside the hardware-KVM
/// harness (`scripts/hw-kvm.sh` sets `VMM_HW_KVM=1`), which carries the
/// test binaries and `vmm` but no peers or compilers, the test skips,
/// saying so, whatever CI requires: the host runs it in the same CI run.
pub fn tool_or_skip(test: &str, program: &str, package: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if in_hw_kvm_harness() {
            skip(
                test,
                &format!("the hardware-KVM harness carries no {program}"),
            );
            return false;
        }
        if std::env::var("VMM_REQUIRE_KVM").as_deref() == Ok("1") {
            panic!("{test}: {program} is missing (Debian package {package})");
        }
        skip(test, &format!("{program} is not installed"));
    }
    ok
}

/// `qemu-system-x86_64 -M microvm -enable-kvm -cpu CPU,arch-capabilities=off`
/// (the nested KVM here refuses QEMU's IA32_ARCH_CAPABILITIES value, which
/// is not xstate): the start of every QEMU command line of the tests.
pub fn qemu_microvm(cpu: &str) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-M", "microvm", "-enable-kvm", "-cpu"])
        .arg(format!("{cpu},arch-capabilities=off"));
    c
}

/// Boot `kernel` under QEMU microvm with `-cpu CPU,arch-capabilities=off`
/// (the nested KVM here refuses QEMU's IA32_ARCH_CAPABILITIES value, which
/// is not xstate), the guest words `append`, and its serial console written
/// to `log`. QEMU's exit status is isa-debug-exit's `(status << 1) | 1`.
pub fn qemu_microvm_to_log(
    cpu: &str,
    append: &str,
    kernel: &std::path::Path,
    log: &std::path::Path,
) -> Output {
    qemu_microvm(cpu)
        .args(["-m", "64", "-display", "none", "-no-reboot", "-nodefaults"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=4"])
        .args(["-append", append])
        .arg("-kernel")
        .arg(kernel)
        .output()
        .expect("cannot start QEMU")
}

/// A finished `vmm` child: its exit status, what it printed, and its peak
/// resident set (`ru_maxrss` from `wait4`: the child's VmHWM, in KiB).
pub struct Peak {
    /// The exit status (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The most memory the child ever had resident, in KiB.
    pub peak_rss_kib: u64,
}

/// A finished `vmm` child whose standard output and error went to files
/// (so a child that prints much cannot block, nor fill the test's memory).
pub struct ToFiles {
    /// The raw wait status from `wait4`.
    pub status: libc::c_int,
    /// The most memory the child ever had resident, in KiB (`ru_maxrss`).
    pub peak_rss_kib: u64,
    /// The file that holds its standard output.
    pub out_path: PathBuf,
    /// The file that holds its standard error.
    pub err_path: PathBuf,
}

impl ToFiles {
    /// The exit status (`None`: killed by a signal).
    pub fn code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }

    /// Delete both files.
    pub fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.out_path);
        let _ = std::fs::remove_file(&self.err_path);
    }
}

/// Run `vmm` with `args`, its standard output and error going to temporary
/// files named after `tag`, wait for it with `wait4` and return its status
/// and peak RSS. The caller reads the files and removes them
/// ([`ToFiles::remove_files`]).
///
/// `ru_maxrss` also counts the address space the child had before its
/// `exec` (std spawns with vfork: the test process's), so the figure is
/// at least the test process's own peak: about 5 MiB here, some 100 MiB
/// once a failed test has symbolised a backtrace.
pub fn vmm_to_files(tag: &str, args: &[&str]) -> ToFiles {
    use std::fs::File;
    use std::process::Stdio;
    let dir = std::env::temp_dir();
    let base = format!("vmm-{}-{tag}", std::process::id());
    let (out_path, err_path) = (
        dir.join(format!("{base}.out")),
        dir.join(format!("{base}.err")),
    );
    let child = Command::new(vmm_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("cannot start the vmm binary");
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our child, not yet reaped (std's `Child` is never
        // waited on here); `status` and `usage` are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EINTR), "wait4: {e}");
    }
    drop(child);
    ToFiles {
        status,
        peak_rss_kib: usage.ru_maxrss as u64,
        out_path,
        err_path,
    }
}

/// Run `vmm` with `args` and measure its peak RSS (see [`vmm_to_files`]).
pub fn vmm_peak(tag: &str, args: &[&str]) -> Peak {
    let done = vmm_to_files(&format!("peak-{tag}"), args);
    let read =
        |p: &std::path::Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let peak = Peak {
        code: done.code(),
        stdout: read(&done.out_path),
        stderr: read(&done.err_path),
        peak_rss_kib: done.peak_rss_kib,
    };
    done.remove_files();
    peak
}
