#!/usr/bin/env bash
# The README's demo: on a fresh Debian machine, installs what the lab needs (containerd, runc,
# iproute2, nftables, busybox-static, the reference CNI plugins, gcc, moto, cargo-nextest),
# builds the lab's Kubernetes, Helm and CoreDNS from their Go modules (first run only:
# scripts/build-k8s.sh, about 11 minutes on 2 cores; Helm and CoreDNS about 3 minutes each),
# builds vpcnet, brings up the Kubernetes lab (control plane + two m5.large nodes booted by
# vpcnet-bootstrap; vpcnet installed by its Helm chart, kube-proxy and CoreDNS as on EKS),
# creates a Deployment of 12 busybox httpd pods and
# a Service, prints nodes, pods, pod / IP / ENI / device, the ENIs, pings and an HTTP request
# through the ClusterIP, then tears everything down.
# Everything runs in network namespaces the lab creates and removes. Needs root.
# Extra arguments go to `vpcnet lab demo` (e.g. --instance-type m5.xlarge --count 20,
# --no-kubernetes for the bare containerd lab, or --kube-proxy daemonset --coredns for EKS's
# add-ons).
# If interrupted (Ctrl-C), `target/debug/vpcnet lab down --all` (as root) removes what is left.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "demo.sh needs root (it creates network namespaces): run it as root, e.g. sudo ./scripts/demo.sh" >&2
  exit 1
fi

./scripts/install-deps.sh

# Under sudo, root's PATH may miss the invoking user's rustup toolchain.
if ! command -v cargo >/dev/null 2>&1 && [ -n "${SUDO_USER:-}" ]; then
  user_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
  [ -x "$user_home/.cargo/bin/cargo" ] && export PATH="$user_home/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install a Rust toolchain (https://rustup.rs), then rerun" >&2
  exit 1
fi

echo "==> Kubernetes binaries for the lab (built once from the Go modules pinned in lab/)" >&2
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR

# The Kubernetes demo installs vpcnet as an operator does, by its Helm chart (the aws-node
# DaemonSet, started by kubelet), beside EKS's add-ons (kube-proxy's DaemonSet, CoreDNS): Helm
# and CoreDNS are built once from their Go modules. --no-kubernetes runs the bare lab instead.
kube=(--agent-install chart --kube-proxy daemonset --coredns)
for a in "$@"; do
  [ "$a" = --no-kubernetes ] && kube=()
done
if [ ${#kube[@]} -gt 0 ]; then
  echo "==> Helm and CoreDNS for the lab (built once from lab/helm and lab/coredns)" >&2
  VPCNET_HELM_BIN_DIR=$(./scripts/build-helm.sh | tail -n 1)
  VPCNET_COREDNS_BIN_DIR=$(./scripts/build-coredns.sh | tail -n 1)
  export VPCNET_HELM_BIN_DIR VPCNET_COREDNS_BIN_DIR
fi

echo "==> building vpcnet, vpcnet-agent, vpcnet-cni, vpcnet-init, vpcnet-bootstrap" >&2
cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-init -p vpcnet-bootstrap
target_dir=${CARGO_TARGET_DIR:-target}
exec "$target_dir/debug/vpcnet" lab demo --name "demo-$$" "${kube[@]}" "$@"
