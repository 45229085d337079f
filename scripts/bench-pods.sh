#!/usr/bin/env bash
# Pod start-up with vpcnet vs Debian's reference bridge + host-local plugins on the same kubelet
# (conflist swapped), one Kubernetes lab, one run: a burst Deployment of 30 replicas (apply →
# all Running, → all Ready) and 20 single pods (create → Running, → Ready; p50/p90), on one
# m5.xlarge node. Needs root. Release build.
#   scripts/bench-pods.sh [--replicas N] [--singles N] [--instance-type T] [--agent-env K=V]
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-pods.sh needs root (network namespaces)" >&2; exit 1; }
./scripts/install-deps.sh
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR
cargo build --release -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-bootstrap
exec target/release/vpcnet lab bench-pods --name "bench-pods-$$" "$@"
