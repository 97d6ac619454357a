#!/usr/bin/env bash
# Static checks: formatting, clippy with warnings denied, docs, project greps.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

fail=0
# Layers: no import cycle between the files of a crate, no source file over
# 800 lines (tests aside).
python3 scripts/check-imports.py --quiet || fail=1
# No sleeping or blocking file I/O on reactor threads: library code of the
# core and the modules must not call thread::sleep (tests may).
if grep -rn --include=*.rs "thread::sleep" bdev/src lib/*/src modules/*/src \
        | grep -v -e "/tests\.rs:" -e "#\[cfg(test)\]" | grep -v "^bdev/src/clock.rs"; then
    echo "check: thread::sleep in reactor/module code" >&2
    fail=1
fi
# RPC method names follow bdev_<module>_<verb>. The file is read as one
# line: rustfmt puts the name of a long register(...) or
# register_decoded(...) call on the next line.
for f in modules/*/src/rpc.rs; do
    m=$(basename "$(dirname "$(dirname "$f")")")
    tr '\n' ' ' < "$f" | { grep -oE 'register(_decoded)?\( *"[a-z_]*"' || true; } \
        | sed -E 's/.*"([a-z_]*)"/\1/' | while read -r name; do
        case "$name" in
            bdev_"$m"_*) ;;
            *) echo "check: $f registers $name, expected bdev_${m}_<verb>" >&2; exit 1 ;;
        esac
    done || fail=1
done
# The NVMe-oF target's methods are SPDK's nvmf_<...> (lib/nvmf/src/rpc/).
tr '\n' ' ' < lib/nvmf/src/rpc/handlers.rs | grep -oE 'reg\( *r, *"[a-z_]*"' \
    | sed -E 's/.*"([a-z_]*)"/\1/' | while read -r name; do
    case "$name" in
        nvmf_*) ;;
        *) echo "check: lib/nvmf registers $name, expected nvmf_<...>" >&2; exit 1 ;;
    esac
done || fail=1
exit $fail
