#!/usr/bin/env bash
# Builds npa-contract (lab/npa-contract): the AWS node agent's two gRPC edges, generated code of
# the VPC CNI pinned in lab/npa-contract/go.mod (package rpc, the one aws-network-policy-agent
# imports), for the contract tests of VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent
# (crates/vpcnet-cni/tests/e2e_node_agent.rs, crates/vpcnet-agent/tests/node_agent.rs).
#
# The binary goes to a cache outside the repository, keyed by the pins (go.mod, go.sum,
# main.go and this script):
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/npa-contract/<key>/bin/npa-contract
# The last line of output is the bin directory (export it as VPCNET_NPA_CONTRACT_BIN_DIR).
#
#   scripts/build-npa-contract.sh            # build if missing, print the bin directory
#   scripts/build-npa-contract.sh --print    # print the bin directory, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
mod=lab/npa-contract

command -v go >/dev/null || { echo "build-npa-contract: Go is not installed (need go >= 1.26.2; see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-npa-contract.sh $mod/go.mod $mod/go.sum $mod/main.go | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/npa-contract/$key
bin=$cache/bin

if [ "${1:-}" = --print ]; then
  [ -f "$cache/complete" ] || { echo "build-npa-contract: no build for these pins in $cache; run scripts/build-npa-contract.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -f "$cache/complete" ]; then
  echo "build-npa-contract: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
echo "build-npa-contract: building npa-contract into $bin ..." >&2
(cd $mod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/npa-contract.tmp" .)
mv "$bin/npa-contract.tmp" "$bin/npa-contract"
touch "$cache/complete"
echo "$bin"
