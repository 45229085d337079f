#!/usr/bin/env bash
# Kubernetes' own network end-to-end tests on the lab (docs/conformance.md): installs what the lab
# needs, builds the lab's Kubernetes, Helm, CoreDNS and the pinned release's e2e suite (e2e.test,
# agnhost, ginkgo) from their Go modules (first run only), builds vpcnet, then runs
# `vpcnet lab conformance`: per CNI a lab of three nodes installed as on EKS (vpcnet by its chart,
# kube-proxy's DaemonSet, CoreDNS), the tests' images imported into every node, the selection of
# lab/e2e/selection.toml run by ginkgo, a table of results; the lab is torn down after each run.
#
#   scripts/conformance.sh                          # the whole selection with vpcnet
#   scripts/conformance.sh --cni vpcnet --cni vpc-cni   # both CNIs, one table with a column each
#   scripts/conformance.sh --focus 'HostPort' --parallel 1
#   scripts/conformance.sh --ci --nodes 2           # the subset CI runs (tests/conformance.rs)
#
# Reports go to ./conformance-results/<cni>/ (report-*.json, junit-*.xml, ginkgo.log) and the table
# to ./conformance-results/table.txt (--out DIR to change). Needs root. If interrupted,
# `target/debug/vpcnet lab down --all` removes what is left.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "conformance.sh needs root (the lab creates network namespaces): run it as root" >&2
  exit 1
fi
./scripts/install-deps.sh
command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install a Rust toolchain (https://rustup.rs), then rerun" >&2; exit 1; }

echo "==> Kubernetes, Helm, CoreDNS and the e2e suite (built once from the Go modules pinned in lab/)" >&2
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
VPCNET_HELM_BIN_DIR=$(./scripts/build-helm.sh | tail -n 1)
VPCNET_COREDNS_BIN_DIR=$(./scripts/build-coredns.sh | tail -n 1)
VPCNET_E2E_BIN_DIR=$(./scripts/build-e2e.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR VPCNET_HELM_BIN_DIR VPCNET_COREDNS_BIN_DIR VPCNET_E2E_BIN_DIR

echo "==> building vpcnet, vpcnet-agent, vpcnet-cni, vpcnet-init, vpcnet-bootstrap" >&2
cargo build -p vpcnet-cli -p vpcnet-agent -p vpcnet-cni -p vpcnet-init -p vpcnet-bootstrap
target_dir=${CARGO_TARGET_DIR:-target}
exec "$target_dir/debug/vpcnet" lab conformance "$@"
