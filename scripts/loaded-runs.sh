#!/usr/bin/env bash
# The host suite N times back to back (default 5) while every core is also
# kept busy by an unrelated CPU load (one spinning process per core): the
# proof that no test depends on timing. Each run's output is kept under
# target/loaded-runs/; the script fails if any run has a failure.
#
#   scripts/loaded-runs.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
out=target/loaded-runs
mkdir -p "$out"
cargo build --workspace --bins
cargo nextest run --workspace --no-run
pids=()
for _ in $(seq "$(nproc)"); do
    sh -c 'while :; do :; done' &
    pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
fails=0
for i in $(seq "$n"); do
    log="$out/run-$i.log"
    if cargo nextest run --workspace --no-fail-fast >"$log" 2>&1; then
        echo "run $i: $(grep -E '^ +Summary' "$log")"
    else
        echo "run $i FAILED: $(grep -E '^ +Summary' "$log" || echo 'no summary')"
        grep -E '^ +FAIL ' "$log" || true
        fails=$((fails + 1))
    fi
done
echo "loaded runs: $n, with failures: $fails"
[ "$fails" -eq 0 ]
