//! CoreDNS as EKS installs it: a Deployment `coredns` of two replicas in `kube-system` behind
//! the Service `kube-dns` at the cluster DNS address kubelet gives pods, its Corefile in the
//! ConfigMap `coredns`, its ServiceAccount `coredns` bound to a ClusterRole that lists and
//! watches what the `kubernetes` plugin reads (EndpointSlices, Services, Namespaces).
//!
//! The Corefile has no `forward`: the lab never sends traffic to addresses outside its
//! namespaces, and on EKS `forward . /etc/resolv.conf` sends names outside the cluster to the
//! VPC resolver, which the lab does not have. Names outside `cluster.local` (and the reverse
//! zones) get no answer from the lab's CoreDNS (SERVFAIL).
//!
//! CoreDNS runs as user 65532 with no capability; to bind port 53 the pod sets the namespaced
//! sysctl `net.ipv4.ip_unprivileged_port_start=0` (in Kubernetes' safe set, allowed by default)
//! in its own network namespace. (CoreDNS's image gives its binary the file capability
//! `cap_net_bind_service` instead; the lab's image layer carries no extended attributes.)

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::images::COREDNS_REF;
use super::kube_proxy::NAMESPACE;
use crate::kube::control_plane::SERVICE_CIDR;

/// Name of the Deployment, its ServiceAccount and its ConfigMap.
pub const NAME: &str = "coredns";
/// The Service's name, as kubeadm and EKS call it.
pub const SERVICE: &str = "kube-dns";
/// The pods' label (`k8s-app=kube-dns`), for selecting them.
pub const SELECTOR: &str = "k8s-app=kube-dns";
/// Replicas (EKS's default: two, whatever the number of nodes).
pub const REPLICAS: u32 = 2;
/// The cluster domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// Port of the `health` plugin (liveness).
pub const HEALTH_PORT: u16 = 8080;
/// Port of the `ready` plugin (readiness).
pub const READY_PORT: u16 = 8181;

/// The cluster DNS address: what vpcnet-bootstrap writes as kubelet's `clusterDNS` for the
/// lab's service CIDR ([`SERVICE_CIDR`], given to it as the NodeConfig's `cluster.cidr`), so
/// the `kube-dns` Service sits where every pod's `resolv.conf` points.
pub fn cluster_dns_ip() -> Result<Ipv4Addr> {
    let cidr = vpcnet_bootstrap::cluster::parse_v4("cluster.cidr", SERVICE_CIDR, &mut Vec::new())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    match cidr.dns {
        IpAddr::V4(ip) => Ok(ip),
        IpAddr::V6(ip) => {
            bail!("the lab's service CIDR {SERVICE_CIDR} gave an IPv6 DNS address {ip}")
        }
    }
}

/// The Corefile: errors logged, health (with lameduck) and readiness endpoints, the cluster
/// zone and the reverse zones from the API server, metrics on 9153, cache, reload on change,
/// round-robin answers; no `forward` (see the module documentation), hence no `loop` either:
/// it detects forwarding loops, and with nothing after `kubernetes` to answer its own probe it
/// would only log an error at every start.
pub fn corefile() -> String {
    format!(
        ".:53 {{\n    errors\n    health {{\n        lameduck 5s\n    }}\n    ready\n    \
         kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        pods insecure\n        \
         fallthrough in-addr.arpa ip6.arpa\n    }}\n    prometheus :9153\n    cache 30\n    \
         reload\n    loadbalance\n}}\n"
    )
}

fn labels() -> Value {
    json!({"k8s-app": SERVICE, "eks.amazonaws.com/component": NAME})
}

/// Every object of the add-on: ServiceAccount, ClusterRole and binding, the Corefile's
/// ConfigMap, the Deployment, and the `kube-dns` Service at `dns_ip`.
pub fn objects(dns_ip: Ipv4Addr) -> Vec<Value> {
    let meta = |name: &str| json!({"name": name, "namespace": NAMESPACE, "labels": labels()});
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(NAME)}),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:coredns", "labels": labels()},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns", "labels": labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        }),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(NAME),
               "data": {"Corefile": corefile()}}),
        deployment(),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": {
                "k8s-app": SERVICE, "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "CoreDNS", "eks.amazonaws.com/component": SERVICE},
                "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
            "spec": {
                "selector": {"k8s-app": SERVICE},
                "clusterIP": dns_ip.to_string(),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                ],
            },
        }),
    ]
}

/// The Deployment: two replicas spread over nodes when they can be, `system-cluster-critical`,
/// the lab's image (never pulled), non-root with a read-only root filesystem and no
/// capability, probes on the `health` and `ready` plugins.
pub fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels()},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"k8s-app": SERVICE}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": NAME,
                    "dnsPolicy": "Default",
                    "tolerations": [
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                    ],
                    "affinity": {
                        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                            ]}]}},
                        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"k8s-app": SERVICE}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }]},
                    },
                    "securityContext": {
                        "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
                    },
                    "containers": [{
                        "name": NAME,
                        "image": COREDNS_REF,
                        "imagePullPolicy": "Never",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "resources": {"limits": {"memory": "170Mi"},
                                      "requests": {"cpu": "100m", "memory": "70Mi"}},
                        "ports": [
                            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                            {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
                        ],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true,
                        },
                        "livenessProbe": {
                            "httpGet": {"path": "/health", "port": HEALTH_PORT, "scheme": "HTTP"},
                            "initialDelaySeconds": 60, "timeoutSeconds": 5,
                            "successThreshold": 1, "failureThreshold": 5,
                        },
                        "readinessProbe": {
                            "httpGet": {"path": "/ready", "port": READY_PORT, "scheme": "HTTP"},
                            "periodSeconds": 2,
                        },
                        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns",
                                          "readOnly": true}],
                    }],
                    "volumes": [{"name": "config-volume", "configMap": {
                        "name": NAME, "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_sits_at_the_address_bootstrap_gives_kubelet() {
        assert_eq!(cluster_dns_ip().unwrap(), Ipv4Addr::new(10, 100, 0, 10));
        let objs = objects(cluster_dns_ip().unwrap());
        let svc = objs.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(svc["metadata"]["name"], SERVICE);
        assert_eq!(svc["spec"]["clusterIP"], "10.100.0.10");
        assert_eq!(svc["spec"]["selector"]["k8s-app"], "kube-dns");
    }

    #[test]
    fn the_corefile_serves_the_cluster_zone_and_sends_nothing_out() {
        let c = corefile();
        assert!(
            c.contains("kubernetes cluster.local in-addr.arpa ip6.arpa"),
            "{c}"
        );
        assert!(c.contains("    ready\n") && c.contains("health {"), "{c}");
        assert!(
            !c.contains("forward"),
            "no forward: the lab sends nothing outside: {c}"
        );
    }

    #[test]
    fn the_role_lists_and_watches_only_what_the_kubernetes_plugin_reads() {
        let objs = objects(Ipv4Addr::new(10, 100, 0, 10));
        let role = objs.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
        let mut resources: Vec<String> = Vec::new();
        for r in role["rules"].as_array().unwrap() {
            assert_eq!(r["verbs"], json!(["list", "watch"]));
            for x in r["resources"].as_array().unwrap() {
                resources.push(x.as_str().unwrap().into());
            }
        }
        resources.sort();
        assert_eq!(resources, ["endpointslices", "namespaces", "services"]);
    }

    #[test]
    fn the_deployment_probes_health_and_ready_and_runs_unprivileged() {
        let d = deployment();
        assert_eq!(d["spec"]["replicas"], 2);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], HEALTH_PORT);
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/ready");
        assert_eq!(c["securityContext"]["runAsNonRoot"], true);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    }
}
