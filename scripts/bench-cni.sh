#!/usr/bin/env bash
# ADD/DEL latency of vpcnet-cni (warm pool from a fake agent) against Debian's reference
# ptp + host-local plugins, same namespaces, same run, interleaved; prints p50/p90/p99 and the ratio.
# A third row, "(veth floor)", times the kernel alone creating and deleting one veth pair over
# netlink inside the driver process: both plugins pay it, and deleting a veth waits for an RCU
# grace period (~20-30 ms on a loaded 2-core VM), which bounds DEL for any plugin.
# Needs root (creates and deletes its own network namespaces; never touches the root namespace).
#
# Usage: scripts/bench-cni.sh [ITERATIONS]   (default 50)
set -euo pipefail
cd "$(dirname "$0")/.."
iterations="${1:-50}"
[ "$(id -u)" = 0 ] || { echo "bench-cni.sh: run as root (it creates network namespaces)" >&2; exit 1; }
[ -x /usr/lib/cni/ptp ] || { echo "bench-cni.sh: /usr/lib/cni/ptp missing: apt-get install containernetworking-plugins" >&2; exit 1; }
# Release build of the plugin only (what a runtime executes).
cargo build --release -p vpcnet-cni
# The driver (not timed) stays in the dev profile.
cargo build -p vpcnet-cni-harness --bin vpcnet-cni-bench
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
exec "$target_dir/debug/vpcnet-cni-bench" --plugin "$target_dir/release/vpcnet-cni" --iterations "$iterations"
