#!/usr/bin/env bash
# Builds vpcnet's container images without a container engine (crates/vpcnet-image, docs/images.md):
# the node image (vpcnet-node) and the vpcnet-targets image, as OCI image-layout archives that
# `ctr -n k8s.io images import` accepts. Reproducible: the same binaries and host packages give
# the same archives and digests (SOURCE_DATE_EPOCH sets every mtime; default 0).
# Prints one line per image: archive path, image reference, digest (tab-separated).
#
#   scripts/build-images.sh                      # release build of the binaries, archives in out/images
#   scripts/build-images.sh --debug              # debug build (fast to build, large images)
#   scripts/build-images.sh --bin-dir DIR        # take the binaries from DIR, build nothing
#   scripts/build-images.sh --out DIR --tag T --repository R
#
# Needs, from Debian: nftables (nft), containernetworking-plugins (portmap, bandwidth, tuning)
# and ca-certificates (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release bin_dir="" out=out/images tag="" repository=""
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) profile=debug ;;
    --bin-dir) bin_dir=$2; shift ;;
    --out) out=$2; shift ;;
    --tag) tag=$2; shift ;;
    --repository) repository=$2; shift ;;
    *) echo "build-images: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
  shift
done

target=${CARGO_TARGET_DIR:-target}
flag=(); [ "$profile" = release ] && flag=(--release)
if [ -z "$bin_dir" ]; then
  bin_dir=$target/$profile
  cargo build "${flag[@]}" -p vpcnet-agent -p vpcnet-cni -p vpcnet-init -p vpcnet-targets --bins >&2
  # The operator CLI without the lab (the lab is for this repository's machines only).
  cargo build "${flag[@]}" -p vpcnet-cli --no-default-features --bin vpcnet >&2
fi
cargo build "${flag[@]}" -p vpcnet-image --bin vpcnet-image >&2

args=(build --bin-dir "$bin_dir" --out "$out")
[ -n "$tag" ] && args+=(--tag "$tag")
[ -n "$repository" ] && args+=(--repository "$repository")
"$target/$profile/vpcnet-image" "${args[@]}"
