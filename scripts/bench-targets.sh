#!/usr/bin/env bash
# vpcnet-targets against aws-load-balancer-controller (unmodified, built by
# scripts/build-aws-lbc.sh), one Kubernetes lab (two nodes), one run, one controller at a time.
# Each gets its own network load balancer and the same gated httpd Deployment + Service +
# TargetGroupBinding; under constant load through the load balancer the Deployment rolls to a
# new version, then scales up. Prints both rows and the ratios: failed requests (and requests
# sent), rollout time, pod created → serving p50/p90, ELBv2 calls per rollout (all, and writes;
# from the lab cloud's request log, by the access key each controller signs with), controller
# RSS (peak and at the end). Needs root. Honours CARGO_TARGET_DIR.
#   scripts/bench-targets.sh [--replicas N] [--scale-to N] [--connections N] [--max-load-secs S]
#                            [--logs DIR]   (both controllers' logs, copied before teardown)
# Release build by default; BENCH_PROFILE=dev uses the debug build the tests already made.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-targets.sh needs root (network namespaces)" >&2; exit 1; }
./scripts/install-deps.sh
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
VPCNET_AWS_LBC_BIN_DIR=$(./scripts/build-aws-lbc.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR VPCNET_AWS_LBC_BIN_DIR
profile=${BENCH_PROFILE:-release}
case $profile in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "bench-targets.sh: BENCH_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
cargo build --profile "$profile" -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-bootstrap -p vpcnet-targets
echo "bench-targets: $profile build (${CARGO_TARGET_DIR:-target}/$dir)" >&2
exec "${CARGO_TARGET_DIR:-target}/$dir/vpcnet" lab bench-targets --name "bench-targets-$$" "$@"
