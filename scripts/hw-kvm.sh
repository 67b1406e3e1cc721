#!/usr/bin/env bash
# Run the KVM tests on a hardware-style KVM: kvm_amd inside a Linux that
# QEMU boots under TCG (`-cpu max` emulates AMD SVM).
#
# Our development hosts only have kvm_pvm, a software nested KVM that
# ignores the guest's CPUID for basic leaves and runs CPL3 on the host's
# XCR0. kvm_amd honours CPUID, loads the guest's XCR0 on every entry and
# intercepts XSETBV, as production KVMs do. This script gives every test
# that needs /dev/kvm that second KVM:
#
#   1. installs, from Debian only, QEMU >= 8 (bookworm-backports: 7.2's TCG
#      does not intercept XSETBV for an SVM guest, so KVM loses the guest's
#      XCR0), busybox-static and cpio, and downloads Debian's cloud kernel
#      package, whose modules include kvm.ko and kvm-amd.ko;
#   2. builds the test binaries and the vmm binary (`cargo test --no-run`);
#   3. packs an initramfs: busybox, the three modules, the test binaries and
#      the shared libraries they load, the source tree at its own absolute
#      path (tests read data through CARGO_MANIFEST_DIR);
#   4. boots it under TCG; its init loads kvm_amd and runs every test binary
#      that uses KVM with VMM_REQUIRE_KVM=1 and VMM_HW_KVM=1, on the
#      machine's first CPU alone (`one_cpu`);
#   5. prints one line per test and a closing `N passed, N failed, N
#      skipped` line, and exits non-zero if any test failed, the harness
#      itself failed, or nothing ran.
#
# Usage: scripts/hw-kvm.sh [TEST-BINARY-NAME...]
#        scripts/hw-kvm.sh --exec 'SHELL COMMAND'
#        scripts/hw-kvm.sh --install-only
#   With names (e.g. `run smp`), only those integration test binaries run.
#   With --exec, the command runs inside instead of the tests (`vmm` is on
#   its PATH) and its output is printed: for measuring on kvm_amd.
#   With --install-only, step 1 alone (.ci/run calls it first, so that the
#   tests that run QEMU on the host use the same QEMU).
# Environment:
#   HW_KVM_TIMEOUT   seconds for every boot of the machine together
#                    (default 3000: the tests took 1420-1600 s on two
#                    CPUs on a Zen 3 host, more on one; a restart after
#                    the machine stopped runs again what was left)
#   HW_KVM_MEM       guest RAM of the TCG machine (default 6G)
#   HW_KVM_FILTER    a libtest filter passed to every binary
#   HW_KVM_DIR       work directory (default target/hw-kvm)
#   HW_KVM_PANIC_IN  a binary's name: the machine's kernel panics once
#                    after that binary's tests, before its end (to try the
#                    restart after a machine that stopped, below)
#   HW_KVM_ONE_CPU   the binaries run on the machine's first CPU alone
#                    (default `all`; see `one_cpu` below)
#   HW_KVM_VMM       the vmm binary to carry (default target/debug/vmm, the
#                    one the tests run; e.g. target/release/vmm to measure)
set -euo pipefail
# One brace group, read whole before it runs: editing this file during a
# run cannot change the run.
{
cd "$(dirname "$0")/.."
root=$PWD
work=${HW_KVM_DIR:-$root/target/hw-kvm}
timeout_s=${HW_KVM_TIMEOUT:-3000}
mem=${HW_KVM_MEM:-6G}
filter=${HW_KVM_FILTER:-}
panic_in=${HW_KVM_PANIC_IN:-}
exec_cmd=
install_only=0
case "${1:-}" in
--exec)
    exec_cmd=${2:?--exec needs a command}
    set --
    ;;
--install-only)
    install_only=1
    set --
    ;;
esac
say() { printf 'hw-kvm: %s\n' "$*" >&2; }
die() { say "$*"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

mkdir -p "$work"
exec 9>"$work/.lock"
flock -n 9 || die "another hw-kvm run holds $work (set HW_KVM_DIR to run beside it)"
started=$(date +%s)

# --- 1. Debian packages --------------------------------------------------
qemu_major() {
    qemu-system-x86_64 --version 2>/dev/null | sed -n 's/.*version \([0-9]*\)\..*/\1/p' | head -1
}
need_apt=0
[ "$(qemu_major || echo 0)" -ge 8 ] 2>/dev/null || need_apt=1
# The initramfs needs busybox-static's /bin/busybox (Debian's busybox
# package is dynamically linked).
static_busybox() { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }
static_busybox || need_apt=1
command -v cpio >/dev/null || need_apt=1
# Debian's kernel payload is LZ4 (scripts/linux_guest.py).
command -v lz4 >/dev/null || need_apt=1
if [ "$need_apt" = 1 ]; then
    [ "$(id -u)" = 0 ] || die "QEMU >= 8, busybox-static and cpio are needed; run as root to install them"
    export DEBIAN_FRONTEND=noninteractive
    src=/etc/apt/sources.list.d/bookworm-backports.sources
    if . /etc/os-release && [ "${VERSION_CODENAME:-}" = bookworm ] && [ ! -e "$src" ]; then
        printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$src"
    fi
    apt-get update -qq
    target_release=()
    # Not `apt-cache policy | grep -q`: under pipefail grep's early exit
    # fails the pipeline (SIGPIPE, 141), and bookworm's 7.2 got installed.
    if [[ $(apt-cache policy qemu-system-x86) == *bookworm-backports* ]]; then
        target_release=(-t bookworm-backports)
    fi
    apt-get install -y -qq --no-install-recommends "${target_release[@]}" qemu-system-x86 >/dev/null
    apt-get install -y -qq --no-install-recommends busybox-static cpio lz4 >/dev/null
fi
major=$(qemu_major)
[ "${major:-0}" -ge 8 ] || die "QEMU $major is too old: TCG before 8 does not intercept XSETBV for an SVM guest"
static_busybox || die "/bin/busybox is not busybox-static's"

kdir=$work/kernel
if [ ! -d "$kdir/boot" ]; then
    pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
    [ -n "$pkg" ] || { apt-get update -qq; pkg=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-/ { print $2; exit }'); }
    [ -n "$pkg" ] || die "no linux-image-cloud-amd64 package in the apt lists"
    rm -rf "$work/deb" && mkdir -p "$work/deb"
    (cd "$work/deb" && apt-get download "$pkg" >/dev/null 2>&1) || die "cannot download $pkg"
    rm -rf "$kdir.tmp" && dpkg-deb -x "$work"/deb/*.deb "$kdir.tmp" && mv "$kdir.tmp" "$kdir"
    rm -rf "$work/deb"
fi
vmlinuz=$(ls "$kdir"/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}
kmods=$kdir/lib/modules/$kver/kernel
for m in virt/lib/irqbypass.ko arch/x86/kvm/kvm.ko arch/x86/kvm/kvm-amd.ko; do
    [ -f "$kmods/$m" ] || die "kernel $kver has no $m"
done
# The stock Linux guest vmm/tests/linux.rs boots on kvm_amd: the package's
# bzImage, the vmlinux inside it (for the PVH entry), and an initramfs
# whose init prints the CPU flags Linux shows and reboots.
linux=$work/linux
if [ ! -f "$linux/vmlinux" ] || [ "$vmlinuz" -nt "$linux/vmlinux" ]; then
    python3 "$root/scripts/linux_guest.py" "$vmlinuz" "$linux" >&2 ||
        die "cannot prepare the Linux guest from $vmlinuz"
fi
if [ ! -f "$linux/initrd.cpio" ] || [ "$0" -nt "$linux/initrd.cpio" ]; then
    ird=$(mktemp -d)
    mkdir -p "$ird/bin" "$ird/proc"
    cp /bin/busybox "$ird/bin/busybox"
    # The flags and the CPU count through the tty (COM1's IRQ 4), a line
    # through the kernel log that says the tty let them through, a second's
    # sleep (the timer's interrupts), then the interrupt counts again.
    printf '%s\n' '#!/bin/busybox sh' \
        '/bin/busybox mount -t proc proc /proc' \
        'echo "VMM-INITRD init runs: $(/bin/busybox grep -E "ttyS|timer|LOC|^ *4:" /proc/interrupts)" >/dev/kmsg' \
        'echo "VMM-INITRD $(/bin/busybox grep -m1 "^flags" /proc/cpuinfo)"' \
        'echo "VMM-INITRD cpus $(/bin/busybox grep -c "^processor" /proc/cpuinfo)"' \
        'echo "VMM-INITRD tty done: $(/bin/busybox grep ttyS /proc/interrupts)" >/dev/kmsg' \
        '/bin/busybox sleep 1' \
        'echo "VMM-INITRD slept: $(/bin/busybox grep -E "ttyS|LOC" /proc/interrupts)"' \
        '/bin/busybox reboot -f' >"$ird/init"
    chmod +x "$ird/init"
    (cd "$ird" && find . | cpio -o -H newc --quiet) >"$linux/initrd.cpio"
    rm -rf "$ird"
fi
say "QEMU $(qemu-system-x86_64 --version | head -1 | awk '{print $4}'), kernel $kver"
[ "$install_only" = 0 ] || exit 0

# --- 2. test binaries -----------------------------------------------------
say "building the test binaries"
cargo test --workspace --no-run --message-format=json 2>"$work/build.log" >"$work/build.json" ||
    { tail -40 "$work/build.log" >&2; die "cargo test --no-run failed"; }
# The binaries of test targets whose source opens /dev/kvm.
bins=()
names=()
# An integration test is its one file; a crate's unit tests are its src/.
while IFS=$'\t' read -r exe srcpath name kind; do
    where=$srcpath
    [ "$kind" = test ] || where=$(dirname "$srcpath")
    grep -rqE 'kvm_or_skip|/dev/kvm|VMM_REQUIRE_KVM' "$where" 2>/dev/null || continue
    [ "$kind" = test ] || name="$name-$kind"
    if [ $# -gt 0 ]; then
        keep=0
        for want in "$@"; do [ "$want" = "$name" ] && keep=1; done
        [ "$keep" = 1 ] || continue
    fi
    bins+=("$exe")
    names+=("$name")
done < <(python3 - "$work/build.json" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if not m["profile"]["test"]:
        continue
    kind = t["kind"][0]
    print(f'{m["executable"]}\t{t["src_path"]}\t{t["name"]}\t{kind}')
EOF
)
[ -z "$exec_cmd" ] || { bins=(); names=(); }
[ ${#bins[@]} -gt 0 ] || [ -n "$exec_cmd" ] || die "no test binary uses KVM (names: $*)"
say "${#bins[@]} test binaries: ${names[*]}"

# --- 3. initramfs ---------------------------------------------------------
rootfs=$work/rootfs
rm -rf "$rootfs"
mkdir -p "$rootfs"/{bin,sbin,proc,sys,dev,tmp,lib,lib64,root,mods,etc}
cp /bin/busybox "$rootfs/bin/busybox"
for m in virt/lib/irqbypass.ko arch/x86/kvm/kvm.ko arch/x86/kvm/kvm-amd.ko; do
    cp "$kmods/$m" "$rootfs/mods/"
done
mkdir -p "$rootfs$linux"
cp "$linux/bzImage" "$linux/vmlinux" "$linux/initrd.cpio" "$rootfs$linux/"
# The source tree at its own path, without build output.
(cd "$root" && git ls-files -z | cpio -0 -pdm --quiet "$rootfs$root")
# Binaries at their own paths, without debug info.
place() {
    mkdir -p "$rootfs$(dirname "$1")"
    objcopy --strip-debug "$1" "$rootfs$1" 2>/dev/null || cp "$1" "$rootfs$1"
}
vmm_bin=${HW_KVM_VMM:-$root/target/debug/vmm}
case "$vmm_bin" in /*) ;; *) vmm_bin=$root/$vmm_bin ;; esac
[ -x "$vmm_bin" ] || die "no vmm binary at $vmm_bin"
# The tests find target/debug/vmm beside their own binaries.
[ -n "$exec_cmd" ] || [ -z "${HW_KVM_VMM:-}" ] || die "HW_KVM_VMM is for --exec; the tests run target/debug/vmm"
place "$vmm_bin"
for b in "${bins[@]}"; do place "$b"; done
extra=()
command -v openssl >/dev/null && extra+=("$(command -v openssl)")
for e in "${extra[@]}"; do place "$e"; done
# Their shared libraries (and the loader).
for b in "$vmm_bin" "${bins[@]}" "${extra[@]}"; do
    ldd "$b" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
done | sort -u | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done
cat >"$rootfs/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Pseudo-terminals, as any Linux has them (bench peers' serial input).
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
# No tmpfs over /tmp: the initramfs is in RAM already, and the source tree
# may live under /tmp (a CI clone).
mkdir -p /tmp
exec 3>/dev/ttyS1
say() { echo "\$*" >&3; }
for m in irqbypass kvm kvm-amd; do
    insmod /mods/\$m.ko || say "HARNESS insmod \$m failed"
done
if [ ! -c /dev/kvm ]; then
    say "HARNESS no /dev/kvm: \$(dmesg | grep -i -E 'kvm|svm' | tail -3 | tr '\n' ' ')"
    poweroff -f
fi
say "HARNESS kvm \$(uname -r) \$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) cpus=\$(nproc)"
export VMM_REQUIRE_KVM=1 VMM_HW_KVM=1 RUST_BACKTRACE=0 HOME=/root TMPDIR=/tmp
export VMM_LINUX_DIR=$linux
cd $root
# After a restart (below) the machine starts at binary hwkvm_from.
from=\$(sed -n 's/.*hwkvm_from=\([0-9]*\).*/\1/p' /proc/cmdline)
from=\${from:-0}
restart=\$(sed -n 's/.*hwkvm_restart=\([0-9]*\).*/\1/p' /proc/cmdline)
EOF
if [ -n "$exec_cmd" ]; then
    mkdir -p "$rootfs/usr/bin"
    ln -s "$vmm_bin" "$rootfs/usr/bin/vmm"
    printf '%s\n' "$exec_cmd" >"$rootfs/exec.sh"
    cat >>"$rootfs/init" <<'EOF'
say "EXEC begin"
sh /exec.sh >&3 2>&3
say "EXEC end rc=$?"
EOF
fi
cat >>"$rootfs/init" <<EOF
HW_ROOT=$root
EOF
cat >>"$rootfs/init" <<'EOF'
# What a test binary left running: a program under the tree's target/
# (the test binaries, vmm) still alive after the binary exited; one line
# each, its pid and its command line. (busybox here has no pgrep.)
leftovers() {
    for d in /proc/[0-9]*; do
        c=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
        case "$c" in "$HW_ROOT/target/"*) echo "${d#/proc/} $c" ;; esac
    done
}
EOF
# The test binaries' processes stay on the machine's first CPU
# (`taskset 1`). Debian's Linux as a guest of kvm_amd, its vCPU threads
# free to run on both of the machine's CPUs, made the machine's own kernel
# overflow its stack (the panic below) within a minute: three boots of
# three on a Zen 3 host, with Debian's 6.1.176 and 6.1.192 kernels alike.
# Single-threaded TCG did not, but ran past the 600 s limit; on one CPU
# `linux` passed in 262-377 s. Our own guests triple-faulted there too,
# unpinned (`bench_ux`, `hostile`: 2 of 4 runs), and pinned they passed
# in about the same time (`bench_ux` 193 s against 119-230 s). A pinned
# binary gets 900 s: `linux`'s tests add up to 680 s, its two test
# threads sharing one CPU. HW_KVM_ONE_CPU names the binaries to pin
# instead of all of them.
one_cpu=" ${HW_KVM_ONE_CPU:-all} "
i=0
for b in "${bins[@]}"; do
    pin= limit=600
    case "$one_cpu" in " all "|*" ${names[$i]} "*) pin="taskset 1 " limit=900 ;; esac
    cat >>"$rootfs/init" <<EOF
if [ $i -ge \$from ]; then
say "BINARY ${names[$i]}"
t0=\$(date +%s)
# --nocapture: a skipping test's SKIPPED line must reach the report. A
# binary that hangs is killed after $limit s and the next one runs.
timeout $limit $pin$b --test-threads=2 --nocapture $filter >/tmp/out 2>&1
rc=\$?
grep -E 'test .* \.\.\. |SKIPPED|^RETRY |^---- |panicked at|^test result:' /tmp/out >&3
[ \$rc = 0 ] || { say "FAILOUT ${names[$i]} rc=\$rc"; tail -c 20000 /tmp/out >&3; say "HARNESS memory: \$(grep -E '^(MemFree|MemAvailable|Shmem):' /proc/meminfo | tr -s ' \n' ' ')"; }
# busybox timeout kills the test binary alone: a vmm it started (a guest
# still running) would go on taking a core and memory from every binary
# after it. Whatever the binary left running is killed and named, and
# fails the binary: a test must reap what it starts.
left=\$(leftovers)
if [ -n "\$left" ]; then
    say "LEFTOVER ${names[$i]}: \$(echo "\$left" | cut -d' ' -f2- | cut -c1-200 | sort | uniq -c | tr -s ' \n' ' ')"
    kill -KILL \$(echo "\$left" | cut -d' ' -f1) 2>/dev/null
    rc=99
fi
[ "\$restart" = 0 ] && [ "${names[$i]}" = "$panic_in" ] && echo c >/proc/sysrq-trigger
say "BINEND ${names[$i]} rc=\$rc \$((\$(date +%s) - t0))s"
fi
EOF
    i=$((i + 1))
done
cat >>"$rootfs/init" <<'EOF'
say "HARNESS done"
sync
poweroff -f
EOF
chmod +x "$rootfs/init"
(cd "$rootfs" && find . | cpio -o -H newc --quiet) >"$work/initramfs.cpio"
say "initramfs $(du -h "$work/initramfs.cpio" | cut -f1)"

# --- 4. boot ---------------------------------------------------------------
results=$work/results.txt
console=$work/console.txt
: >"$results"
say "booting under TCG (timeout ${timeout_s}s; console in $console)"
boot0=$(date +%s)
# The TCG machine's own kernel (kvm_amd under QEMU's emulated SVM) has
# been seen to die under our guests: a stack overflow in its exception
# entry on a vCPU thread, then a panic, which -no-reboot turns into QEMU
# exiting 0. Nothing of ours can crash it, and it takes every binary after
# with it: the binaries that finished keep their results, the console's
# end is printed, and a fresh machine runs the rest from the interrupted
# binary on, at most three times (one CI run saw it die three times in a
# row in the same binary, `linux_probe`, which then passed alone and in the
# next run). The report counts the restarts.
from=0
restarts=0
while :; do
    part=$work/results.part
    : >"$part"
    left=$((timeout_s - ($(date +%s) - boot0)))
    set +e
    timeout "$left" qemu-system-x86_64 \
        -accel tcg,thread=multi -cpu max -smp 2 -m "$mem" \
        -kernel "$vmlinuz" -initrd "$work/initramfs.cpio" \
        -append "console=ttyS0 rdinit=/init panic=-1 quiet hwkvm_from=$from hwkvm_restart=$restarts" \
        -display none -no-reboot -monitor none \
        -serial "file:$console" -serial "file:$part" </dev/null
    qrc=$?
    set -e
    # The serial port is a tty: its lines end in CR LF.
    tr -d '\r' <"$part" >"$part.tmp" && mv "$part.tmp" "$part"
    running=$(sed -n 's/^BINARY //p' "$part" | tail -1)
    if [ -n "$exec_cmd" ] || grep -q '^HARNESS done$' "$part" || [ "$qrc" = 124 ] ||
        [ "$restarts" -ge 3 ] || [ -z "$running" ] || grep -q "^BINEND $running " "$part"; then
        cat "$part" >>"$results"
        break
    fi
    restarts=$((restarts + 1))
    say "the TCG machine stopped during $running (QEMU exited $qrc); its console's last lines:"
    tail -n 40 "$console" | tr -d '\r' | sed 's/^/console: /' >&2
    cp "$console" "$work/console.$restarts.txt"
    # The finished binaries' lines stay; the interrupted one runs again.
    sed "/^BINARY $running\$/,\$d" "$part" >>"$results"
    echo "HARNESS restart $restarts: the machine stopped during $running; a fresh one runs it again" >>"$results"
    # grep -c exits 1 when it counts none (the first binary stopped).
    finished=$(grep -c '^BINEND ' "$part" || true)
    from=$((from + finished))
    say "restart $restarts: a fresh machine from binary $from ($running)"
done
boot_s=$(($(date +%s) - boot0))

# --- 5. report ---------------------------------------------------------------
if [ -n "$exec_cmd" ]; then
    sed -n '/^EXEC begin$/,/^EXEC end/p' "$results"
    grep -q '^EXEC end rc=0$' "$results"
    exit
fi
python3 - "$results" "$qrc" "$boot_s" "$(($(date +%s) - started))" "$console" <<'EOF'
import re, sys
path, qrc, boot_s, total_s, console = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
text = open(path, errors="replace").read()
passed = failed = skipped = retried = 0
# Per binary: its test lines, and the tests that said SKIPPED (a test that
# skips returns early and libtest calls it ok: it counts as skipped here).
blocks = re.split(r"^BINARY (\S+)$", text, flags=re.M)
for line in blocks[0].splitlines():
    if line.startswith("HARNESS"):
        print(line)
for binary, body in zip(blocks[1::2], blocks[2::2]):
    said_skip = {}
    # With --nocapture a test's own output can share a line with
    # libtest's: nothing here is anchored at the start of a line.
    for m in re.finditer(r"SKIPPED (\S+?): (.*)$", body, re.M):
        said_skip[m.group(1)] = m.group(2)
    seen = set()
    named = {"ok": 0, "FAILED": 0, "ignored": 0}
    for m in re.finditer(r"test (\S+)(?: - should panic)? \.\.\. (ok|FAILED|ignored)", body):
        name, res = m.groups()
        if (name, res) in seen:
            continue  # repeated in a failing binary's tail
        seen.add((name, res))
        named[res] += 1
        if res == "ok" and name in said_skip:
            print(f"{binary}::{name} skipped: {said_skip[name]}")
            skipped += 1
        elif res == "ignored":
            print(f"{binary}::{name} skipped (ignored)")
            skipped += 1
        else:
            print(f"{binary}::{name} {res}")
            passed += res == "ok"
            failed += res == "FAILED"
    # libtest's own totals are the count; a test whose line was garbled
    # by another's output is counted without its name.
    total = re.search(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", body, re.M)
    if total:
        for res, n in zip(("ok", "FAILED", "ignored"), map(int, total.groups())):
            if n > named[res]:
                print(f"{binary}: {n - named[res]} test(s) {res} whose line was garbled")
                passed += (n - named[res]) if res == "ok" else 0
                failed += (n - named[res]) if res == "FAILED" else 0
                skipped += (n - named[res]) if res == "ignored" else 0
    for line in body.splitlines():
        if line.startswith(("BINEND", "FAILOUT", "HARNESS", "LEFTOVER")):
            print(line)
    # A Linux run retried after a known end (tests/common/linux.rs), with
    # where its vCPUs were and its console's last lines: said even when
    # the retry passed, so that CI counts them and keeps the evidence.
    retries = list(dict.fromkeys(l for l in body.splitlines() if l.startswith("RETRY ")))
    for line in retries:
        print(f"{binary}: {line[:300]}")
    retried += sum(": the first run ended with " in l for l in retries)
    # Why a binary failed, where CI keeps no results file: each panic in
    # its output's tail with the 47 lines after it (a failing boot's
    # message leads with its console's last 40), 200 lines at most.
    tail = body.split("\nFAILOUT ", 1)[1] if "\nFAILOUT " in body else ""
    tail = tail.split("\nBINEND ", 1)[0].splitlines()
    shown = 0
    for i, line in enumerate(tail):
        if "panicked at" in line and shown < 200:
            for l in tail[i:i + 48]:
                print(f"{binary}| {l[:300]}")
            shown += 48
    # A binary that failed with no failing test (it did not start, crashed
    # or hung) is one failure of its own.
    if re.search(r"^BINEND \S+ rc=[1-9]", body, re.M) and not any(
        r == "FAILED" for _, r in seen
    ):
        print(f"{binary}: the binary failed without a failing test")
        failed += 1
if not "HARNESS done" in text:
    why = "timed out" if qrc == 124 else f"QEMU exited {qrc}"
    print(f"hw-kvm: the TCG machine did not finish ({why}); the console's last lines:")
    # Where a CI run keeps no files, the console's end is the only record
    # of why the machine stopped (a panic, the OOM killer, a reset).
    try:
        tail = open(console, errors="replace").read().replace("\r", "").splitlines()[-40:]
    except OSError as e:
        tail = [f"(no console: {e})"]
    for line in tail:
        print(f"console: {line}")
    failed += 1
if retried:
    print(f"hw-kvm: {retried} Linux run(s) ended in a triple fault or at their time and were run again")
restarts = text.count("\nHARNESS restart ")
if restarts:
    print(f"hw-kvm: the TCG machine's kernel stopped {restarts} time(s) (its console above); "
          "the interrupted binary ran again on a fresh machine")
print(f"hw-kvm: boot and tests {boot_s}s, whole harness {total_s}s")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
EOF
exit
}
