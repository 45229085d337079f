#!/usr/bin/env bash
# Builds aws-load-balancer-controller, unmodified, from the Go module pinned in
# lab/aws-load-balancer-controller (a `tool` of that wrapper module): the peer of vpcnet-targets
# in `vpcnet-bench targets` (scripts/bench-targets.sh) and in the lab test
# tests/aws_lbc.rs. Kept apart from scripts/build-k8s.sh so that pinning or bumping it never
# changes the Kubernetes cache key (which would relink every Kubernetes binary).
#
# The binary and the controller's own CRDs (from the same module: IngressClassParams and
# ALBTargetControlConfig, which its Ingress controller watches; the lab keeps vpcnet's
# TargetGroupBinding CRD, whose schema is the same) go to a cache outside the repository, keyed
# by the pins (go.mod, go.sum and this script):
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/aws-lbc/<key>/bin/aws-load-balancer-controller
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/aws-lbc/<key>/crds/*.yaml
# The last line of output is the bin directory (export it as VPCNET_AWS_LBC_BIN_DIR).
#
#   scripts/build-aws-lbc.sh            # build if missing, print the bin directory
#   scripts/build-aws-lbc.sh --print    # print the bin directory, build nothing (exit 1 if missing)
#
# A cold build (Go caches already warm from scripts/build-k8s.sh) takes a few CPU-minutes; see
# docs/benchmarks.md, "Build times", for the figure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mod=lab/aws-load-balancer-controller

command -v go >/dev/null || { echo "build-aws-lbc: Go is not installed (need go >= 1.26.2; see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-aws-lbc.sh $mod/go.mod $mod/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/aws-lbc/$key
bin=$cache/bin

if [ "${1:-}" = --print ]; then
  [ -f "$cache/complete" ] || { echo "build-aws-lbc: no build for these pins in $cache; run scripts/build-aws-lbc.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -f "$cache/complete" ]; then
  echo "build-aws-lbc: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin" "$cache/crds"
pkg=sigs.k8s.io/aws-load-balancer-controller
version=$(cd $mod && go list -m -f '{{.Version}}' $pkg)
src=$(cd $mod && go mod download -json $pkg | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { echo "build-aws-lbc: module $pkg@$version has no source directory" >&2; exit 1; }
commit=${version##*-}
start=$(date +%s)
echo "build-aws-lbc: building aws-load-balancer-controller $version into $bin ..." >&2
# As its Dockerfile builds it, less the static-PIE linking (CGO off gives a static binary).
(cd "$root/$mod" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X $pkg/pkg/version.GitVersion=$version -X $pkg/pkg/version.GitCommit=$commit" \
  -o "$bin/aws-load-balancer-controller.tmp" $pkg)
mv "$bin/aws-load-balancer-controller.tmp" "$bin/aws-load-balancer-controller"
for crd in elbv2.k8s.aws_ingressclassparams.yaml elbv2.k8s.aws_albtargetcontrolconfigs.yaml; do
  install -m 0644 "$src/config/crd/bases/$crd" "$cache/crds/$crd"
done
touch "$cache/complete"
echo "build-aws-lbc: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
