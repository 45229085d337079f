#!/usr/bin/env bash
# Load-balancer data plane benchmark (issue 10): a two-node lab, three busybox httpd containers
# registered by IP behind a network load balancer (HAProxy in the lab), then
# `vpcnet lab lb load` from node n1 at several concurrencies: requests per second, errors and
# latency percentiles, every request a new TCP connection through the load balancer. The lab
# is removed at the end, also on failure or Ctrl-C. Root.
#   scripts/bench-lb.sh                      # release build of the vpcnet binaries
#   PROFILE=dev scripts/bench-lb.sh          # dev build (target/debug)
#   SECONDS_EACH=20 CONNECTIONS="1 8 32" scripts/bench-lb.sh
source "$(dirname "$0")/lib/bench.sh"
bench_need_root "network namespaces"
bench_build vpcnet-cli vpcnet-agent vpcnet-cni
vpcnet="$out/vpcnet"
name="bench-lb-$$"
trap '"$vpcnet" lab down --name "$name" >&2 || true' EXIT
"$vpcnet" lab up --name "$name" --nodes 2 >&2
"$vpcnet" lab run --name "$name" --httpd 8080 c1 c2 >&2
"$vpcnet" lab run --name "$name" --node n2 --httpd 8080 c3 >&2
"$vpcnet" lab lb --name "$name" create web --health-interval 5 --health-timeout 2 \
  --healthy-threshold 2 >&2
"$vpcnet" lab lb --name "$name" register web c1 c2 c3
for _ in $(seq 60); do
  healthy=$("$vpcnet" lab lb --name "$name" health web | grep -c ' healthy' || true)
  [ "$healthy" = 3 ] && break
  sleep 1
done
[ "$healthy" = 3 ] || { echo "targets not healthy" >&2; exit 1; }
for c in ${CONNECTIONS:-1 4 16}; do
  echo "== $c connection(s), ${SECONDS_EACH:-10} s, profile $profile"
  "$vpcnet" lab lb --name "$name" load web --connections "$c" --seconds "${SECONDS_EACH:-10}"
done
