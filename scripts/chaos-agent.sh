#!/usr/bin/env bash
# Agent chaos test at full size (issue 13): 1,000 pod ADD/DEL operations against a real
# vpcnet-agent process and the in-process emulator, the agent killed with SIGKILL 12 times at
# random points, EC2 throttling 30 % of calls, failing 5 % and losing 5 % of replies, and
# ~5 % of checkpoint writes failing. CI runs the same test at 150 operations and 4 kills.
# The figures (operations, kills, faults injected, invariant checks) are printed at the end.
#   scripts/chaos-agent.sh                     # seed 13
#   CHAOS_SEED=7 CHAOS_OPS=2000 CHAOS_KILLS=20 scripts/chaos-agent.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_OPS="${CHAOS_OPS:-1000}" CHAOS_KILLS="${CHAOS_KILLS:-12}" CHAOS_SEED="${CHAOS_SEED:-13}"
exec cargo test -p vpcnet-agent --test chaos -- --nocapture
