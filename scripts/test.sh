#!/usr/bin/env bash
# Everything CI runs, on a fresh machine: installs what the tests need
# (SPDK's Python RPC client in a venv; fio and the source of that fio, for
# the fio engine), checks formatting, lints and docs, runs every test of the
# workspace, the fio engine's end-to-end tests, the stress lane, then the VM
# lane (guest tests in QEMU with an emulated NVMe controller; it installs
# QEMU and a guest kernel itself, and fails when no VM can run) and the
# vhost-user-blk VM test.
set -euo pipefail
cd "$(dirname "$0")/.."

# SPDK's own RPC client drives our daemon in the wire-compatibility tests.
if [ ! -x .venv/bin/spdk-rpc ]; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check spdk==26.9
fi
export SPDK_RPC="$PWD/.venv/bin/spdk-rpc"
# The spdk-rpc tests must run here, never skip (doc/testing.md).
unset BDEVKIT_SKIP_SPDK_RPC
# The TLS interop tests against `openssl s_client`/`s_server` must run too
# (the `openssl` binary: Debian's package `openssl`).
export BDEVKIT_REQUIRE_OPENSSL_CLI=1

# Debian's fio and its configured source (cached per version): the fio
# engine (apps/fio) is built against the headers of the installed fio, so
# the workspace build below compiles its real shim and clippy sees it.
FIO_SRC=$(scripts/fetch-fio-src.sh)
export FIO_SRC

scripts/check.sh

# Bounded fuzzing of the JSON-RPC parser and param decoding (proptest).
export PROPTEST_CASES="${PROPTEST_CASES:-2000}"
if command -v cargo-nextest >/dev/null 2>&1; then
    cargo nextest run --workspace --no-fail-fast
    cargo test --workspace --doc
else
    cargo test --workspace --no-fail-fast
fi

# The fio engine end to end: fio on null, malloc and aio bdevs, several
# jobs and bdevs, verify, and every kind of bad input (test/fio/run.sh,
# under a minute).
test/fio/run.sh

# Long fuzzing: the NVMe/TCP PDU parser on arbitrary and mutated bytes,
# 100 000 cases (debug build, well under a minute; doc/testing.md).
PROPTEST_CASES=100000 cargo test -q -p bdevkit-nvme-spec --lib tcp::tests::arbitrary_bytes_never_panic
# And the DH-HMAC-CHAP message parser, 100 000 arbitrary messages.
PROPTEST_CASES=100000 cargo test -q -p bdevkit-nvme-auth --lib msg::tests::arbitrary_bytes_never_panic

# The stress lane: verify under RPC storms, member churn and connection
# abuse, with leak checks (scripts/stress.sh, under a minute).
scripts/stress.sh

# The VM lane (scripts/vm-test.sh; doc/testing.md): static release builds of
# the guest binaries, then one VM per test/vm/*.sh.
scripts/vm-test.sh

# The vhost-user-blk VM test: bdev_tgt on this host, QEMU guests of the
# harness on its vhost-user-blk controller (scripts/vhost-vm-test.sh, about
# a minute; doc/vhost.md, "Tests").
scripts/vhost-vm-test.sh
