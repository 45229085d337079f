#!/usr/bin/env bash
# Builds CoreDNS (github.com/coredns/coredns, pinned in lab/coredns/go.mod to the version EKS's
# CoreDNS add-on runs on Kubernetes 1.34) for the lab's cluster DNS add-on: the `coredns`
# Deployment behind the `kube-dns` Service (crates/vpcnet-lab/src/kube/addons/). Static
# (CGO_ENABLED=0), as CoreDNS's own release build. The binary goes to a cache outside the
# repository, keyed by the pins and this script:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/coredns/<key>/bin/coredns
# The last line of output is that bin directory (VPCNET_COREDNS_BIN_DIR for the lab).
#
#   scripts/build-coredns.sh          # build if missing, print the bin directory
#   scripts/build-coredns.sh --print  # print it, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "build-coredns: Go is not installed (see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-coredns.sh lab/coredns/go.mod lab/coredns/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/coredns/$key
bin=$cache/bin
if [ "${1:-}" = --print ]; then
  [ -x "$bin/coredns" ] || { echo "build-coredns: not built for these pins; run scripts/build-coredns.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -x "$bin/coredns" ]; then
  echo "build-coredns: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
start=$(date +%s)
version=$(awk '$1=="github.com/coredns/coredns" {print $2}' lab/coredns/go.mod)
echo "build-coredns: CoreDNS $version into $bin (downloading the module and building; a cold build takes minutes)" >&2
# coremain.GitCommit is what `coredns -version` prints after the version (CoreDNS's Makefile
# sets it from git; here the module version stands in, there being no checkout).
(cd lab/coredns && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$version" \
  -o "$bin/coredns.tmp" github.com/coredns/coredns)
mv "$bin/coredns.tmp" "$bin/coredns"
echo "build-coredns: built in $(($(date +%s) - start)) s ($("$bin/coredns" -version | head -n 1))" >&2
echo "$bin"
