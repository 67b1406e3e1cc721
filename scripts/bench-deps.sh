#!/usr/bin/env bash
# What the benchmarks compare against but the tests do not need: Debian's
# OpenBLAS (vmm/benches/workloads.rs loads libopenblas.so.0 at run time) and the
# openssl command (the AES yardsticks). `.ci/run` does not call this: no test
# needs either, and each benchmark says so and skips its comparison when
# they are missing.
set -euo pipefail
missing=()
# Not `ldconfig -p | grep -q`: under pipefail grep's early exit fails the
# pipeline (SIGPIPE), which read as "missing".
[[ $(ldconfig -p) == *libopenblas.so.0* ]] || missing+=(libopenblas-dev)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ ${#missing[@]} -eq 0 ]; then
    echo "bench-deps: nothing to install"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bench-deps: installed ${missing[*]}"
