#!/usr/bin/env bash
# ADD/DEL latency of vpcnet-cni (warm pool from a fake agent) against Debian's reference
# ptp + host-local plugins, same namespaces, same run, interleaved; prints p50/p90/p99 and the ratio.
# A third row, "(veth floor)", times the kernel alone creating and deleting one veth pair over
# netlink inside the driver process: both plugins pay it, and deleting a veth waits for an RCU
# grace period (~20-30 ms on a loaded 2-core VM), which bounds DEL for any plugin.
# Needs root (creates and deletes its own network namespaces; never touches the root namespace).
#
# Usage: scripts/bench-cni.sh [ITERATIONS]   (default 50)
source "$(dirname "$0")/lib/bench.sh"
iterations="${1:-50}"
bench_need_root "it creates network namespaces"
[ -x /usr/lib/cni/ptp ] || { echo "bench-cni.sh: /usr/lib/cni/ptp missing: apt-get install containernetworking-plugins" >&2; exit 1; }
# The plugin in $profile (release by default: what a runtime executes); the driver (not timed)
# in the dev profile.
bench_build vpcnet-cni
cargo build -p vpcnet-bench >&2
exec "$target_dir/debug/vpcnet-bench" cni --plugin "$out/vpcnet-cni" --iterations "$iterations"
