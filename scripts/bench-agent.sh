#!/usr/bin/env bash
# Agent benchmarks (issue 3): start-up to first servable IP under an EC2 latency profile,
# AddNetwork+DelNetwork latency over the socket, RSS with 250 assigned IPs, EC2 calls per
# pod roll. Runs the emulator in-process and the real vpcnet-agent binary as a child.
#   scripts/bench-agent.sh                 # all scenarios, release profile
#   scripts/bench-agent.sh latency         # one of: startup latency rss rolls
#   PROFILE=dev scripts/bench-agent.sh     # dev profile (slower, no release build needed)
source "$(dirname "$0")/lib/bench.sh"
if [ "$profile" = release ]; then
  exec cargo bench -p vpcnet-agent --bench agent -- "$@"
else
  exec cargo bench -p vpcnet-agent --bench agent --profile "$profile" -- "$@"
fi
