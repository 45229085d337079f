#!/usr/bin/env bash
# Pod start-up with vpcnet vs Debian's reference bridge + host-local plugins on the same kubelet
# (conflist swapped), one Kubernetes lab, one run: a burst Deployment of 30 replicas (apply →
# all Running, → all Ready) and 20 single pods (create → Running, → Ready; p50/p90), on one
# m5.xlarge node. Needs root.
#   scripts/bench-pods.sh [--replicas N] [--singles N] [--instance-type T] [--agent-env K=V]
# Release build by default. BENCH_PROFILE=dev uses the debug build the tests already made
# (saves a release build of the AWS SDK, ~20 CPU-minutes; pod start-up is dominated by kubelet
# and containerd, not by vpcnet's code paths).
source "$(dirname "$0")/lib/bench.sh"
bench_need_root "network namespaces"
bench_lab_parts
bench_build "${LAB_PACKAGES[@]}"
exec "$out/vpcnet-bench" pods --name "bench-pods-$$" "$@"
