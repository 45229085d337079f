#!/usr/bin/env bash
# Runs every check CI runs: format, clippy (warnings denied), and all tests
# (unit, emulator integration, namespace/containerd end-to-end). Needs root for the
# end-to-end tests (network namespaces); they create and delete their own namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check
echo "==> cargo clippy (deny warnings)" >&2
cargo clippy --workspace --all-targets -- -D warnings
echo "==> cargo clippy of the node build of the operator CLI (no lab feature; deny warnings)" >&2
cargo clippy -p vpcnet-cli --no-default-features -- -D warnings
echo "==> Kubernetes binaries for the lab (scripts/build-k8s.sh; cached per pins)" >&2
VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
export VPCNET_K8S_BIN_DIR
echo "==> the pinned VPC CNI's source in the Go module cache (vpcnet-agent's test of the VPC CNI settings list reads it)" >&2
(cd lab/vpc-cni && go mod download github.com/aws/amazon-vpc-cni-k8s)
echo "==> aws-load-balancer-controller for the lab's peer test (scripts/build-aws-lbc.sh; cached per pins)" >&2
VPCNET_AWS_LBC_BIN_DIR=$(./scripts/build-aws-lbc.sh | tail -n 1)
export VPCNET_AWS_LBC_BIN_DIR
echo "==> ecr-credential-provider and the lab's private registry for the private ECR pull test (cached per pins)" >&2
VPCNET_ECR_CREDENTIAL_PROVIDER=$(./scripts/build-ecr-credential-provider.sh | tail -n 1)/ecr-credential-provider
export VPCNET_ECR_CREDENTIAL_PROVIDER
VPCNET_REGISTRY_BIN_DIR=$(./scripts/build-registry.sh | tail -n 1)
export VPCNET_REGISTRY_BIN_DIR
echo "==> npa-contract, the AWS node agent's gRPC edges from the VPC CNI's generated code, for the node agent contract tests (scripts/build-npa-contract.sh; cached per pins)" >&2
VPCNET_NPA_CONTRACT_BIN_DIR=$(./scripts/build-npa-contract.sh | tail -n 1)
export VPCNET_NPA_CONTRACT_BIN_DIR
echo "==> helm for the charts' lint and template tests (scripts/build-helm.sh; cached per pins)" >&2
VPCNET_HELM_BIN_DIR=$(./scripts/build-helm.sh | tail -n 1)
export VPCNET_HELM_BIN_DIR
echo "==> CoreDNS for the lab's add-ons (scripts/build-coredns.sh; cached per pins)" >&2
VPCNET_COREDNS_BIN_DIR=$(./scripts/build-coredns.sh | tail -n 1)
export VPCNET_COREDNS_BIN_DIR
echo "==> Kubernetes' end-to-end suite for the conformance test (scripts/build-e2e.sh; cached per pins)" >&2
VPCNET_E2E_BIN_DIR=$(./scripts/build-e2e.sh | tail -n 1)
export VPCNET_E2E_BIN_DIR
echo "==> cargo build (binaries used by end-to-end tests, with the tests' feature set)" >&2
cargo build --workspace --all-targets
echo "==> tests" >&2
cargo nextest run --workspace --no-fail-fast "$@"
