#!/usr/bin/env python3
"""Snapshot time as issue 38 measured it: from the vCPU's last KVM_RUN (the
one that ran the guest up to its snapshot request) to the snapshot file's
rename, seen from outside with strace, per binary and guest RAM size.

Usage: python3 scripts/snapshot_strace.py VMM[,VMM...] MIB[,MIB...] [ROUNDS]

The guest is `--workload none --cmdline bench=snapshot-check` (it asks for
the snapshot itself; about 600 KB stored). Every binary and size runs once
per round, interleaved, so a slow spell of the host falls on all of them;
ROUNDS defaults to 31. Sizes above 3072 MiB are skipped for a binary whose
path contains "before" (vmm before RAM above 4 GiB refused them). The file
goes to $SNAPDIR (default: the system's temporary directory): put it on
tmpfs to leave the disk's fsync out. Needs strace with --seccomp-bpf.
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile

CALL = re.compile(r"^\d+\s+([\d.]+)\s+(.*?)\s+<([\d.]+)>$")


def one(vmm, mem, workdir):
    """Milliseconds from the last guest KVM_RUN to the rename, or None."""
    snap = os.path.join(workdir, "strace.snap")
    log = os.path.join(workdir, "strace.log")
    for p in (snap, log):
        if os.path.exists(p):
            os.remove(p)
    cmd = ["strace", "-f", "--seccomp-bpf", "-ttt", "-T",
           "-e", "trace=ioctl,renameat2,rename", "-o", log,
           vmm, "run", "--workload", "none", "--cmdline", "bench=snapshot-check",
           "--snapshot-file", snap, "--no-native", "--mem", str(mem)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(snap):
        print(f"{vmm} --mem {mem}: no snapshot: {out.stderr[-300:]}", file=sys.stderr)
        return None
    last_run = rename = None
    with open(log) as f:
        for line in f:
            m = CALL.match(line.strip())
            if not m or rename is not None:
                continue
            start, call, took = float(m.group(1)), m.group(2), float(m.group(3))
            if "KVM_RUN" in call and "= 0" in call:
                last_run = start + took
            elif call.startswith(("renameat2", "rename(")) and '"' + snap + '"' in call:
                rename = start + took
    if last_run is None or rename is None:
        return None
    return (rename - last_run) * 1e3


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binaries = sys.argv[1].split(",")
    sizes = [int(x) for x in sys.argv[2].split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 31
    workdir = tempfile.mkdtemp(prefix="vmm-snapshot-strace-", dir=os.environ.get("SNAPDIR"))
    combos = [(b, m) for b in binaries for m in sizes
              if not (m > 3072 and "before" in os.path.basename(b))]
    times = {c: [] for c in combos}
    for _ in range(rounds):
        for b, m in combos:
            t = one(b, m, workdir)
            if t is not None:
                times[(b, m)].append(t)
    for (b, m), ts in times.items():
        if not ts:
            continue
        ts.sort()
        q = lambda f: ts[int(f * (len(ts) - 1))]
        print(f"{os.path.basename(b):12} {m:>7} MiB  median {statistics.median(ts):6.2f} ms"
              f"  p25 {q(0.25):6.2f}  p75 {q(0.75):6.2f}  min {ts[0]:6.2f}  (n={len(ts)})")
    for name in os.listdir(workdir):
        os.remove(os.path.join(workdir, name))
    os.rmdir(workdir)


if __name__ == "__main__":
    main()
