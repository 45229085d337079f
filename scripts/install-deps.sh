#!/usr/bin/env bash
# Installs everything vpcnet's build, lab and tests need on a fresh Debian 12 machine.
# Idempotent: skips what is already present. Needs root (apt-get, pip).
set -euo pipefail

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have containerd || need_pkgs+=(containerd)
have runc || need_pkgs+=(runc)
have ip || need_pkgs+=(iproute2)
have nft || need_pkgs+=(nftables)
have iptables || need_pkgs+=(iptables)
have protoc || need_pkgs+=(protobuf-compiler)
have hyperfine || need_pkgs+=(hyperfine)
[ -x /bin/busybox ] || need_pkgs+=(busybox-static)
[ -x /usr/lib/cni/portmap ] || need_pkgs+=(containernetworking-plugins)
have conntrack || need_pkgs+=(conntrack)           # kube-proxy clears UDP conntrack entries
have gcc || need_pkgs+=(gcc)                       # the lab's pause image (gcc -static)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || need_pkgs+=(libc6-dev)
have openssl || need_pkgs+=(openssl)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need_pkgs+=(ca-certificates)   # the images carry the CA bundle (scripts/build-images.sh)
# The lab's load balancers: one HAProxy per load balancer, inside the lab's namespaces.
have haproxy || need_pkgs+=(haproxy)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  # Debian's package starts haproxy.service with its sample configuration; the lab starts its
  # own HAProxy processes in its namespaces and needs no system-wide one. Only the service this
  # run installed is stopped.
  if [[ " ${need_pkgs[*]} " == *" haproxy "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now haproxy >/dev/null 2>&1 || true
  fi
fi

if ! python3 -c 'import moto.server' >/dev/null 2>&1; then
  echo "==> installing moto[server] from PyPI (wire cross-check peer)" >&2
  python3 -m pip install -q 'moto[server]'
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "==> installing cargo-nextest from crates.io (compiles once, ~5 min on 2 cores)" >&2
  cargo install --locked cargo-nextest
fi

# The lab's Kubernetes is built from Go modules (scripts/build-k8s.sh) and needs Go >= 1.26.6 (the VPC CNI v1.23.2 module asks for it).
if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go is not installed: the Kubernetes lab needs Go >= 1.26.6 (https://go.dev/dl)" >&2
  exit 1
fi
echo "==> dependencies present" >&2
