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
# Programs the Kubernetes e2e suite's test images carry (crates/vpcnet-lab/src/kube/conformance/images.rs):
# agnhost's curl, wget, nc (netcat-openbsd, as Alpine's) and DNS tools, and the nginx image's nginx.
have curl || need_pkgs+=(curl)
have wget || need_pkgs+=(wget)                     # GNU wget: busybox's crashes on `wget -T`
[ -x /bin/nc.openbsd ] || need_pkgs+=(netcat-openbsd)
have dig || need_pkgs+=(bind9-dnsutils)            # dig, nslookup; host comes with bind9-host
[ -x /usr/sbin/nginx ] || need_pkgs+=(nginx)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "==> installing Debian packages: ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
  # Debian's packages start haproxy.service and nginx.service with their sample configurations;
  # the lab starts its own HAProxy processes in its namespaces and runs nginx only in an image,
  # and needs no system-wide one. Only a service this run installed is stopped.
  for svc in haproxy nginx; do
    if [[ " ${need_pkgs[*]} " == *" $svc "* ]] && [ -d /run/systemd/system ]; then
      systemctl disable --now "$svc" >/dev/null 2>&1 || true
    fi
  done
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
