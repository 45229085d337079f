#!/usr/bin/env bash
# Builds the lab's Kubernetes from the upstream Go modules pinned in lab/*/go.mod:
#   lab/k8s                k8s.io/kubernetes: kube-apiserver, kube-controller-manager,
#                          kube-scheduler, kubelet, kube-proxy, kubectl (as `tool`s, unmodified)
#   lab/etcd               go.etcd.io/etcd/server/v3 (etcdmain.Main)
#   lab/cloud-provider-aws k8s.io/cloud-provider-aws: aws-cloud-controller-manager (a `tool`)
#   lab/vpc-cni            github.com/aws/amazon-vpc-cni-k8s, the peer CNI (as `tool`s, unmodified):
#                          aws-k8s-agent (ipamd), aws-cni (cmd/routed-eni-cni-plugin),
#                          egress-cni (cmd/egress-cni-plugin)
#
# Binaries go to a cache outside the repository, keyed by the pins (the go.mod/go.sum files and
# this script), so a fresh clone on the same machine finds them and a build only happens when a
# pin changes:
#   ${VPCNET_CACHE:-/var/cache/vpcnet}/k8s/<key>/bin/
# The last line of output is that bin directory. Go's own module and build caches
# (GOMODCACHE, GOCACHE) make a rebuild after a pin change incremental.
#
#   scripts/build-k8s.sh            # build if missing, print the bin directory
#   scripts/build-k8s.sh --print    # print the bin directory, build nothing (exit 1 if missing)
#
# A cold build takes many CPU-minutes (see docs/benchmarks.md, "Build times", for the figure).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

command -v go >/dev/null || { echo "build-k8s: Go is not installed (need go >= 1.26.6 (amazon-vpc-cni-k8s v1.23.2 asks for it); see docs/lab.md)" >&2; exit 1; }

key=$(cat scripts/build-k8s.sh lab/k8s/go.mod lab/k8s/go.sum lab/etcd/go.mod lab/etcd/go.sum lab/etcd/main.go \
  lab/cloud-provider-aws/go.mod lab/cloud-provider-aws/go.sum lab/vpc-cni/go.mod lab/vpc-cni/go.sum | sha256sum | cut -c1-16)
cache=${VPCNET_CACHE:-/var/cache/vpcnet}/k8s/$key
bin=$cache/bin

if [ "${1:-}" = --print ]; then
  [ -f "$cache/complete" ] || { echo "build-k8s: no build for these pins in $cache; run scripts/build-k8s.sh" >&2; exit 1; }
  echo "$bin"; exit 0
fi
if [ -f "$cache/complete" ]; then
  echo "build-k8s: up to date ($bin)" >&2
  echo "$bin"; exit 0
fi

mkdir -p "$bin"
k8s_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' lab/k8s/go.mod)
[ -n "$k8s_version" ] || k8s_version=$(cd lab/k8s && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ccm_version=$(cd lab/cloud-provider-aws && go list -m -f '{{.Version}}' k8s.io/cloud-provider-aws)
etcd_version=$(cd lab/etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
vpc_cni_version=$(cd lab/vpc-cni && go list -m -f '{{.Version}}' github.com/aws/amazon-vpc-cni-k8s)

# Version stamps as Kubernetes' own build (hack/lib/version.sh) sets them, so /version and
# `kubelet --version` report the release.
stamp() { # $1 = version (vX.Y.Z)
  local v=$1 major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local f=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  echo "-s -w$f"
}

total_start=$(date +%s)
build() { # $1 = module dir, $2 = output name, $3 = package, $4 = ldflags
  local start end
  start=$(date +%s)
  echo "build-k8s: building $2 ($3) ..." >&2
  (cd "$root/$1" && CGO_ENABLED=0 go build -trimpath -ldflags "$4" -o "$bin/$2.tmp" "$3")
  mv "$bin/$2.tmp" "$bin/$2"
  end=$(date +%s)
  echo "build-k8s: built $2 in $((end - start)) s" >&2
}

echo "build-k8s: Kubernetes $k8s_version, etcd $etcd_version, cloud-provider-aws $ccm_version," \
  "amazon-vpc-cni-k8s $vpc_cni_version into $bin" >&2
kflags=$(stamp "$k8s_version")
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  build lab/k8s "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$kflags"
done
build lab/etcd etcd vpcnet.lab/etcd "-s -w"
build lab/cloud-provider-aws aws-cloud-controller-manager k8s.io/cloud-provider-aws/cmd/aws-cloud-controller-manager \
  "$(stamp "$ccm_version")"
# The VPC CNI as its Makefile builds it (CGO off, -s -w), installed under the names its image uses.
# The release is stamped where the binaries read it: ipamd's pkg/version.Version and the plugins'
# main.version (the Makefile's `-X pkg/version/info.Version` names no package). ipamd rejects every
# plugin request whose version differs from its own, so both must carry the same string.
vflags="-s -w -X github.com/aws/amazon-vpc-cni-k8s/pkg/version.Version=$vpc_cni_version -X main.version=$vpc_cni_version"
build lab/vpc-cni aws-k8s-agent github.com/aws/amazon-vpc-cni-k8s/cmd/aws-k8s-agent "$vflags"
build lab/vpc-cni aws-cni github.com/aws/amazon-vpc-cni-k8s/cmd/routed-eni-cni-plugin "$vflags"
build lab/vpc-cni egress-cni github.com/aws/amazon-vpc-cni-k8s/cmd/egress-cni-plugin "$vflags"

"$bin/kubelet" --version >&2
touch "$cache/complete"
echo "build-k8s: all binaries built in $(($(date +%s) - total_start)) s" >&2
echo "$bin"
