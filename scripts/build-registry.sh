#!/usr/bin/env bash
# Builds the distribution registry (github.com/distribution/distribution/v3 cmd/registry, pinned
# in lab/registry/go.mod): the lab's private OCI registry, which requires the credentials the
# emulator's ECR GetAuthorizationToken hands out. The binary goes to a cache outside the
# repository, keyed by the pins and this script:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/registry/<key>/bin/registry
# With it, htpasswd (lab/registry/htpasswd: one bcrypt htpasswd line). The last line of output is that bin directory.
#
#   scripts/build-registry.sh          # build if missing, print the bin directory
#   scripts/build-registry.sh --print  # print it, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "build-registry: Go is not installed (see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-registry.sh lab/registry/go.mod lab/registry/go.sum lab/registry/htpasswd/main.go \
  | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/registry/$key
bin=$cache/bin
if [ "${1:-}" = --print ]; then
  [ -x "$bin/registry" ] && [ -x "$bin/htpasswd" ] || { echo "build-registry: not built for these pins; run scripts/build-registry.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -x "$bin/registry" ] && [ -x "$bin/htpasswd" ]; then
  echo "build-registry: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
start=$(date +%s)
echo "build-registry: distribution $(awk '$1=="github.com/distribution/distribution/v3" {print $2}' lab/registry/go.mod) into $bin" >&2
(cd lab/registry && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$bin/registry.tmp" github.com/distribution/distribution/v3/cmd/registry)
(cd lab/registry && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/htpasswd.tmp" ./htpasswd)
mv "$bin/registry.tmp" "$bin/registry"
mv "$bin/htpasswd.tmp" "$bin/htpasswd"
echo "build-registry: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
