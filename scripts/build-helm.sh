#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v4 cmd/helm, pinned in lab/helm/go.mod): the charts' lint and
# template tests (crates/vpcnet-charts) and the lab's install of vpcnet with its chart. The binary
# goes to a cache outside the repository, keyed by the pins and this script:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/helm/<key>/bin/helm
# The last line of output is that bin directory (export it as VPCNET_HELM_BIN_DIR).
#
#   scripts/build-helm.sh          # build if missing, print the bin directory
#   scripts/build-helm.sh --print  # print it, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "build-helm: Go is not installed (see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-helm.sh lab/helm/go.mod lab/helm/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/helm/$key
bin=$cache/bin
if [ "${1:-}" = --print ]; then
  [ -x "$bin/helm" ] || { echo "build-helm: not built for these pins; run scripts/build-helm.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -x "$bin/helm" ]; then
  echo "build-helm: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
start=$(date +%s)
echo "build-helm: helm $(awk '$1=="helm.sh/helm/v4" {print $2}' lab/helm/go.mod) into $bin" >&2
(cd lab/helm && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$bin/helm.tmp" helm.sh/helm/v4/cmd/helm)
mv "$bin/helm.tmp" "$bin/helm"
echo "build-helm: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
