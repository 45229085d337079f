#!/usr/bin/env bash
# Builds ecr-credential-provider, kubelet's image credential provider for ECR, from the
# k8s.io/cloud-provider-aws release pinned in lab/ecr-credential-provider/go.mod (the release
# lab/cloud-provider-aws pins; a module of its own so that build-k8s.sh's cache key, and its
# many-minute Kubernetes build, do not depend on it). The binary goes to a cache outside the
# repository, keyed by the pins and this script:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/ecr-credential-provider/<key>/bin/ecr-credential-provider
# The last line of output is that bin directory.
#
#   scripts/build-ecr-credential-provider.sh          # build if missing, print the bin directory
#   scripts/build-ecr-credential-provider.sh --print  # print it, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "build-ecr-credential-provider: Go is not installed (see docs/lab.md)" >&2; exit 1; }

want=$(awk '$1=="k8s.io/cloud-provider-aws" {print $2}' lab/cloud-provider-aws/go.mod)
have=$(awk '$1=="k8s.io/cloud-provider-aws" {print $2}' lab/ecr-credential-provider/go.mod)
if [ "$want" != "$have" ]; then
  echo "build-ecr-credential-provider: lab/ecr-credential-provider pins cloud-provider-aws $have but lab/cloud-provider-aws pins $want. Fix: in lab/ecr-credential-provider run 'go get k8s.io/cloud-provider-aws@$want && go mod tidy'" >&2
  exit 1
fi

key=$(cat scripts/build-ecr-credential-provider.sh lab/ecr-credential-provider/go.mod \
  lab/ecr-credential-provider/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/ecr-credential-provider/$key
bin=$cache/bin
if [ "${1:-}" = --print ]; then
  [ -x "$bin/ecr-credential-provider" ] || { echo "build-ecr-credential-provider: not built for these pins; run scripts/build-ecr-credential-provider.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -x "$bin/ecr-credential-provider" ]; then
  echo "build-ecr-credential-provider: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
start=$(date +%s)
echo "build-ecr-credential-provider: cloud-provider-aws $have into $bin" >&2
(cd lab/ecr-credential-provider && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$bin/ecr-credential-provider.tmp" k8s.io/cloud-provider-aws/cmd/ecr-credential-provider)
mv "$bin/ecr-credential-provider.tmp" "$bin/ecr-credential-provider"
echo "build-ecr-credential-provider: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
