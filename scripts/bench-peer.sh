#!/usr/bin/env bash
# vpcnet against AWS's VPC CNI v1.23.2 (unmodified, built by scripts/build-k8s.sh), one
# Kubernetes lab, one run: two nodes of the same instance type against the same emulated EC2,
# n1 on the VPC CNI, n2 on vpcnet. Prints a table with ratios: agent restart → servable; a
# burst of the node's max pods → all Ready; single pods create → Running and delete → gone
# (p50/p99, kubelet-driven); the CNI plugin's own ADD and DEL p50/p99 and peak RSS under
# kubelet (the timing shim vpcnet-cni-timing in front of every plugin of both conflists); EC2
# mutating calls per pod roll with the defaults and with WARM_IP_TARGET=5 MINIMUM_IP_TARGET=10
# (both nodes roll at once: each figure counts its own instance's calls); EC2 calls per 10 idle
# minutes (one window shared by both nodes, opened once neither instance made an EC2 call for
# 60 s, measured over --idle-secs and scaled); agent RSS idle and at max pods.
# Needs root. Honours CARGO_TARGET_DIR.
#   scripts/bench-peer.sh [--singles N] [--rolls N] [--idle-secs S] [--instance-type T]
#                         [--kernel-state DIR]   (the kernel state one pod leaves, per node)
#                         [--timings DIR]   (every CNI plugin call of the single pods, per node)
# Release build by default; BENCH_PROFILE=dev uses the debug build the tests already made.
source "$(dirname "$0")/lib/bench.sh"
bench_need_root "network namespaces"
bench_lab_parts
# With the timing shim the lab puts in front of both nodes' CNI plugins (plugin-level ADD/DEL, RSS).
bench_build "${LAB_PACKAGES[@]}" vpcnet-cni-harness
exec "$out/vpcnet-bench" peer --name "bench-peer-$$" "$@"
