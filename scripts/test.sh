#!/usr/bin/env bash
# Runs every check CI runs: format, clippy (warnings denied), and all tests
# (unit, emulator integration, namespace/containerd end-to-end). Needs root for the
# end-to-end tests (network namespaces); they create and delete their own namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check
echo "==> cargo clippy (deny warnings)" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo build (binaries used by end-to-end tests)" >&2
cargo build --workspace --bins
echo "==> tests" >&2
cargo nextest run --workspace --no-fail-fast "$@"
