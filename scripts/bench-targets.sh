#!/usr/bin/env bash
# vpcnet-targets against aws-load-balancer-controller (unmodified, built by
# scripts/build-aws-lbc.sh), one Kubernetes lab (two nodes), one run, one controller at a time.
# Each gets its own network load balancer and the same gated httpd Deployment + Service +
# TargetGroupBinding; under constant load through the load balancer the Deployment rolls to a
# new version, then scales up. Prints both rows and the ratios: failed requests (and requests
# sent), rollout time, pod created → serving and app listening → serving p50/p90, ELBv2 calls
# per rollout (all, and writes; from the lab cloud's request log, by the access key each
# controller signs with), controller
# RSS (peak and at the end). Needs root. Honours CARGO_TARGET_DIR.
#   scripts/bench-targets.sh [--replicas N] [--scale-to N] [--connections N] [--max-load-secs S]
#                            [--logs DIR]   (both controllers' logs, copied before teardown)
# Release build by default; BENCH_PROFILE=dev uses the debug build the tests already made.
source "$(dirname "$0")/lib/bench.sh"
bench_need_root "network namespaces"
bench_lab_parts
VPCNET_AWS_LBC_BIN_DIR=$(./scripts/build-aws-lbc.sh | tail -n 1)
export VPCNET_AWS_LBC_BIN_DIR
bench_build "${LAB_PACKAGES[@]}" vpcnet-targets
exec "$out/vpcnet-bench" targets --name "bench-targets-$$" "$@"
