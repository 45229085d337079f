#!/usr/bin/env bash
# NetworkPolicy enforcement at cluster scale (docs/benchmarks.md#network-policy): one m5.xlarge
# node with vpcnet installed by its chart (enableNetworkPolicy=true), the cluster filled with
# 5000 pods (API objects only, never scheduled) in 50 namespaces and 500 NetworkPolicies. Prints
# the agent's memory idle, with the whole cluster in its model and after churn rounds, and the
# time from a policy or peer pod change (kubectl) to the node's nftables rules. Needs root.
#   scripts/bench-policy.sh [--pods N] [--policies N] [--namespaces N] [--churn N] [--rounds N]
#                           [--samples N] [--agent-env K=V]
# Release build by default (the node image carries the built agent); BENCH_PROFILE=dev uses the
# debug build the tests already made.
source "$(dirname "$0")/lib/bench.sh"
bench_need_root "network namespaces"
bench_lab_parts
VPCNET_HELM_BIN_DIR=$(./scripts/build-helm.sh | tail -n 1)
export VPCNET_HELM_BIN_DIR
bench_build "${LAB_PACKAGES[@]}" vpcnet-init
exec "$out/vpcnet-bench" policy --name "bench-policy-$$" "$@"
