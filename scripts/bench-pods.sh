#!/usr/bin/env bash
# Pod start-up with vpcnet vs Debian's reference bridge + host-local plugins on the same kubelet
# (conflist swapped), one Kubernetes lab, one run: a burst Deployment of 30 replicas (apply →
# all Running, → all Ready) and 20 single pods (create → Running, → Ready; p50/p90), on one
# m5.xlarge node. Needs root.
#   scripts/bench-pods.sh [--replicas N] [--singles N] [--instance-type T] [--agent-env K=V]
# Release build by default. BENCH_PROFILE=dev uses the debug build the tests already made
# (saves a release build of the AWS SDK, ~20 CPU-minutes; pod start-up is dominated by kubelet
# and containerd, not by vpcnet's code paths).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-pods.sh needs root (network namespaces)" >&2; exit 1; }
./scripts/install-deps.sh
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR
profile=${BENCH_PROFILE:-release}
case $profile in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "bench-pods.sh: BENCH_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
cargo build --profile "$profile" -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-bootstrap
echo "bench-pods: $profile build (target/$dir)" >&2
exec "target/$dir/vpcnet" lab bench-pods --name "bench-pods-$$" "$@"
