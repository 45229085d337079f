# The prelude every scripts/bench-*.sh sources: repository root as the working directory, the
# build profile, the target directory, the root check and the lab's external parts.
#
#   BENCH_PROFILE (or PROFILE)  release (default) or dev (the debug build the tests made)
#   CARGO_TARGET_DIR            honoured: binaries are taken from where cargo put them
#
# After sourcing: $bench (the script's name), $profile, $out (the profile's binary directory).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bench=$(basename "$0" .sh)

profile=${BENCH_PROFILE:-${PROFILE:-release}}
case $profile in
  release) profile_dir=release ;;
  dev) profile_dir=debug ;;
  *) echo "$bench.sh: BENCH_PROFILE must be release or dev, not $profile" >&2; exit 2 ;;
esac
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
out="$target_dir/$profile_dir"

# bench_need_root WHY: exits with a message unless running as root.
bench_need_root() {
  [ "$(id -u)" = 0 ] || { echo "$bench.sh needs root ($1)" >&2; exit 1; }
}

# bench_build PACKAGE...: builds the packages in $profile, progress on stderr.
bench_build() {
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --profile "$profile" "${args[@]}" >&2
  echo "$bench: $profile build ($out)" >&2
}

# bench_lab_parts: the Debian packages and the Kubernetes binaries a Kubernetes lab needs
# (exports VPCNET_K8S_BIN_DIR).
bench_lab_parts() {
  ./scripts/install-deps.sh
  VPCNET_K8S_BIN_DIR=$(./scripts/build-k8s.sh | tail -n 1)
  export VPCNET_K8S_BIN_DIR
}

# The binaries every lab benchmark runs: the lab CLI (the lab's own processes), the agent, the
# plugin, the node bootstrap, and the benchmark driver.
LAB_PACKAGES=(vpcnet-cli vpcnet-agent vpcnet-cni vpcnet-bootstrap vpcnet-bench)
