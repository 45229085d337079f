#!/usr/bin/env bash
# Lab chaos run at a bigger size (issue 13 item 3): containers started and removed through
# the lab node's containerd while its vpcnet-agent is SIGKILLed at random points and
# restarted; then the invariants (no address held twice, checkpoint = running containers,
# agent = EC2, nothing held or left on the node after removal). Needs root.
# CI runs the same test at 36 operations and 4 kills.
#   scripts/chaos-lab.sh                                  # 150 operations, 15 kills, seed 13
#   CHAOS_LAB_OPS=300 CHAOS_LAB_KILLS=30 CHAOS_LAB_SEED=7 scripts/chaos-lab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_LAB_OPS="${CHAOS_LAB_OPS:-150}" CHAOS_LAB_KILLS="${CHAOS_LAB_KILLS:-15}" \
    CHAOS_LAB_SEED="${CHAOS_LAB_SEED:-13}"
cargo build --workspace --all-targets
exec cargo test -p vpcnet-lab --test chaos_lab -- --nocapture
