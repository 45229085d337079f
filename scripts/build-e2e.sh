#!/usr/bin/env bash
# Builds Kubernetes' own end-to-end suite at the lab's pinned release (lab/e2e/go.mod, written by
# scripts/pin-k8s.sh), for the network conformance runs (`vpcnet lab conformance`,
# scripts/conformance.sh; docs/conformance.md):
#   e2e.test  `go test -c k8s.io/kubernetes/test/e2e`, unmodified
#   agnhost   k8s.io/kubernetes/test/images/agnhost, the binary of the suite's main test image
#   regression-issue-74839   the binary of the conntrack test's image, from the same module
#   ginkgo    the ginkgo CLI at the version the suite requires (runs e2e.test in parallel)
# into a cache outside the repository, keyed by the pins and this script:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/e2e/<key>/bin/
# The last line of output is that bin directory (export it as VPCNET_E2E_BIN_DIR).
#
#   scripts/build-e2e.sh          # build if missing, print the bin directory
#   scripts/build-e2e.sh --print  # print it, build nothing (exit 1 if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "build-e2e: Go is not installed (see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-e2e.sh lab/e2e/go.mod lab/e2e/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/e2e/$key
bin=$cache/bin
if [ "${1:-}" = --print ]; then
  [ -f "$cache/complete" ] || { echo "build-e2e: not built for these pins; run scripts/build-e2e.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -f "$cache/complete" ]; then
  echo "build-e2e: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
version=$(cd lab/e2e && go list -m -f '{{.Version}}' k8s.io/kubernetes)
major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
# The version stamp Kubernetes' own build sets: the suite reports it and compares it with the
# server's.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
total=$(date +%s)
step() { # $1 = name, then the go command
  local name=$1 start; shift
  start=$(date +%s)
  echo "build-e2e: building $name ..." >&2
  (cd lab/e2e && CGO_ENABLED=0 "$@")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "build-e2e: built $name in $(($(date +%s) - start)) s" >&2
}
echo "build-e2e: the end-to-end suite of Kubernetes $version into $bin" >&2
step agnhost go build -trimpath -ldflags "$ldflags" -o "$bin/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
# agnhost's porter serves TLS with this certificate and key; its image carries them at /.
src=$(cd lab/e2e && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
install -m 644 "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$bin/"
step regression-issue-74839 go build -trimpath -ldflags "-s -w" -o "$bin/regression-issue-74839.tmp" k8s.io/kubernetes/test/images/regression-issue-74839
step ginkgo go build -trimpath -ldflags "-s -w" -o "$bin/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo
step e2e.test go test -c -trimpath -ldflags "$ldflags" -o "$bin/e2e.test.tmp" k8s.io/kubernetes/test/e2e
touch "$cache/complete"
echo "build-e2e: all built in $(($(date +%s) - total)) s" >&2
echo "$bin"
