#!/usr/bin/env bash
# Run every cargo-fuzz target for SECONDS each (default 60) and print, per
# target, the executions libFuzzer made and whether it crashed. Exits 1 if
# any target crashed, or could not be built (`-` in the crashes column);
# the crashing input is in fuzz/artifacts/<target>/ (copy it to
# fuzz/regressions/<target>/ once fixed: see fuzz/README.md).
#
# Needs the nightly toolchain and cargo-fuzz. New inputs libFuzzer finds go
# to fuzz/target/fuzz-work/<target>/ (not committed). After each run the
# script asks libFuzzer (-merge=1) which of them add coverage to the
# committed corpus fuzz/corpus/<target>/ and prints that count ("new"):
# without --keep they are only counted (CI: a clean clone cannot commit),
# with --keep the smallest of them, at most FUZZ_KEEP_MAX (default 32) a
# target and run, are copied into fuzz/corpus/<target>/ as grown-<sha1>,
# to be committed (`cargo test` then replays them,
# vmm/tests/fuzz_replay.rs). The cap keeps the repository small: 20 s of
# every target finds about 7,000 such inputs, 30 MB.
#
# Usage: scripts/fuzz.sh [--keep] [SECONDS per target]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

keep=0
keep_max=${FUZZ_KEEP_MAX:-32}
if [ "${1:-}" = --keep ]; then
    keep=1
    shift
fi
secs=${1:-60}
case "$secs" in
    ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [--keep] [SECONDS per target]" >&2; exit 68 ;;
esac

cargo +nightly fuzz build -O
mapfile -t targets < <(cargo +nightly fuzz list)

logs=target/fuzz-logs
mkdir -p "$logs"
crashed=0
grew=0
printf '%-20s %12s %8s %8s %5s  %s\n' target executions exec/s crashes new artifact
for t in "${targets[@]}"; do
    work=target/fuzz-work/$t
    mkdir -p "$work" "corpus/$t" "artifacts/$t"
    log=$logs/$t.log
    rc=0
    cargo +nightly fuzz run -O "$t" "$work" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1 || rc=$?
    # libFuzzer's last status line: "#N DONE cov: ... exec/s: R ..." after a
    # clean run; after a crash it prints no DONE line, so fall back to the
    # final statistics.
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
    if [ -n "$done_line" ]; then
        execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")
        rate=$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$done_line")
    else
        execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -n 1)
        rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$log" | tail -n 1)
    fi
    artifact=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -n 1)
    crashes=0
    if ! grep -q '^INFO: Seed:' "$log"; then
        # libFuzzer never started. Usually a failed build: `cargo fuzz run`
        # rebuilds when a source changed since the build above. Not a crash.
        crashes=-
        crashed=1
        artifact="(libFuzzer did not start, exit $rc; a failed build? see fuzz/$log)"
    elif [ "$rc" -ne 0 ] || [ -n "$artifact" ]; then
        crashes=1
        crashed=1
        [ -n "$artifact" ] || artifact="(exit $rc, no artifact: see fuzz/$log)"
    fi
    new=-
    if [ "$crashes" = 0 ]; then
        # Merge what this run found into a scratch copy of the corpus,
        # counting the inputs that add coverage (libFuzzer names them by
        # their SHA-1; the committed ones have other names).
        into=target/fuzz-merge/$t
        rm -rf "$into"
        mkdir -p "$into"
        cp -r "corpus/$t/." "$into/"
        if cargo +nightly fuzz run -O "$t" "$into" "$work" -- -merge=1 \
            -timeout=10 -rss_limit_mb=2048 >"$logs/$t.merge.log" 2>&1; then
            mapfile -t found < <(cd "$into" && find . -maxdepth 1 -type f \
                -regextype posix-extended -regex './[0-9a-f]{40}' \
                -printf '%s %f\n' | sort -n | cut -d' ' -f2)
            new=${#found[@]}
            [ "$new" -eq 0 ] || grew=$((grew + 1))
            if [ "$keep" = 1 ]; then
                for f in "${found[@]:0:$keep_max}"; do
                    cp "$into/$f" "corpus/$t/grown-$f"
                done
            fi
        fi
    fi
    printf '%-20s %12s %8s %8s %5s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$crashes" "$new" "$artifact"
done
if [ "$grew" -gt 0 ]; then
    if [ "$keep" = 1 ]; then
        echo "$grew target(s) grew: up to $keep_max inputs each kept as fuzz/corpus/<target>/grown-*; commit them (cargo test replays them)"
    else
        echo "$grew target(s) found inputs that add coverage: scripts/fuzz.sh --keep SECONDS merges them into fuzz/corpus/ to commit"
    fi
fi
exit "$crashed"
