//! From cached Kubernetes objects to the plain inputs of the core: a binding's Service port,
//! its EndpointSlices' endpoints with their pods and nodes, the pods whose readiness gate waits.
//! No I/O: the caller passes what its caches hold.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::core::desired::{self, Desired, EndpointView, NodeReady, PodView, TargetKey};
use crate::group::Gated;

/// The label EndpointSlices carry naming their Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A node's `Ready` condition; a node without one counts as `Unknown` only when the node
/// controller says so, otherwise False.
pub fn node_ready(n: &Node) -> NodeReady {
    let c = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    match c.map(|c| c.status.as_str()) {
        Some("True") => NodeReady::True,
        Some("Unknown") => NodeReady::Unknown,
        _ => NodeReady::False,
    }
}

/// Node name → readiness.
pub fn node_map<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> BTreeMap<String, NodeReady> {
    nodes
        .into_iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, node_ready(n))))
        .collect()
}

fn condition_true(p: &Pod, type_: &str) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Whether `p` lists readiness gate `condition`.
pub fn has_gate(p: &Pod, condition: &str) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

/// The core's view of pod `p` for a binding with gate `condition`.
pub fn pod_view(p: &Pod, condition: Option<&str>) -> PodView {
    PodView {
        name: format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or("")
        ),
        deleting: p.metadata.deletion_timestamp.is_some(),
        containers_ready: condition_true(p, "ContainersReady"),
        has_gate: condition.is_some_and(|c| has_gate(p, c)),
    }
}

/// The name of the Service port `port` (by number or name) of `svc`: EndpointSlice ports
/// carry the Service port's name (empty for an unnamed single port). None when the Service
/// has no such port.
pub fn service_port_name(svc: &Service, port: &IntOrString) -> Option<String> {
    let ports = svc.spec.as_ref()?.ports.as_ref()?;
    ports
        .iter()
        .find(|p| match port {
            IntOrString::Int(n) => p.port == *n,
            IntOrString::String(s) => p.name.as_deref() == Some(s.as_str()),
        })
        .map(|p| p.name.clone().unwrap_or_default())
}

/// Pod lookup by namespace and name.
pub type PodLookup<'a> = dyn Fn(&str, &str) -> Option<std::sync::Arc<Pod>> + 'a;

/// The desired targets and waiting gates of a binding: the IPv4 `slices` of its Service,
/// port `port_name` of each slice, endpoints decided by [`desired::desired`].
pub fn binding_targets(
    slices: &[&EndpointSlice],
    port_name: &str,
    condition: &str,
    pods: &PodLookup<'_>,
    nodes: &BTreeMap<String, NodeReady>,
) -> (Desired, Vec<Gated>) {
    let mut out = Desired::default();
    let mut gated = Vec::new();
    for s in slices {
        if s.address_type != "IPv4" {
            continue;
        }
        let Some(port) = s.ports.as_ref().and_then(|ps| {
            ps.iter()
                .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                .and_then(|p| p.port)
        }) else {
            continue;
        };
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        let mut views = Vec::new();
        for e in &s.endpoints {
            let ip: Option<Ipv4Addr> = e.addresses.first().and_then(|a| a.parse().ok());
            let pod = e
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| pods(r.namespace.as_deref()?, r.name.as_deref()?));
            let c = e.conditions.as_ref();
            let view = EndpointView {
                ip,
                ready: c.and_then(|c| c.ready),
                terminating: c.and_then(|c| c.terminating),
                node: e.node_name.clone(),
                pod: pod.as_ref().map(|p| pod_view(p, Some(condition))),
            };
            if let (Some(ip), Some(p)) = (ip, pod.as_ref()) {
                let v = view.pod.as_ref().expect("set above");
                if v.has_gate && !v.deleting && !condition_true(p, condition) {
                    gated.push(Gated {
                        namespace: p.metadata.namespace.clone().unwrap_or_default(),
                        pod: p.metadata.name.clone().unwrap_or_default(),
                        condition: condition.to_string(),
                        target: TargetKey { ip, port },
                    });
                }
            }
            views.push(view);
        }
        out.merge(desired::desired(&views, port, nodes));
    }
    gated.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
    gated.dedup_by(|a, b| a.namespace == b.namespace && a.pod == b.pod);
    (out, gated)
}

/// The pod behind each target of `slices` (port `port_name`): (target, namespace, name), for
/// Events on pods.
pub fn target_pods(slices: &[&EndpointSlice], port_name: &str) -> Vec<(TargetKey, String, String)> {
    let mut out = Vec::new();
    for s in slices.iter().filter(|s| s.address_type == "IPv4") {
        let Some(port) = s.ports.as_ref().and_then(|ps| {
            ps.iter()
                .find(|p| p.name.as_deref().unwrap_or("") == port_name)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
        }) else {
            continue;
        };
        for e in &s.endpoints {
            let ip = e.addresses.first().and_then(|a| a.parse::<Ipv4Addr>().ok());
            let r = e
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"));
            if let (Some(ip), Some(r)) = (ip, r) {
                out.push((
                    TargetKey { ip, port },
                    r.namespace.clone().unwrap_or_default(),
                    r.name.clone().unwrap_or_default(),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, gate: bool, containers_ready: bool, deleting: bool) -> Arc<Pod> {
        let mut v = serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": []},
            "status": {"conditions": [
                {"type": "ContainersReady", "status": if containers_ready {"True"} else {"False"}}]},
        });
        if gate {
            v["spec"]["readinessGates"] =
                serde_json::json!([{"conditionType": "target-health.elbv2.k8s.aws/web"}]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn service_ports_by_number_and_name() {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080},
                               {"name": "admin", "port": 81, "targetPort": "admin"}]}
        }))
        .unwrap();
        assert_eq!(
            service_port_name(&svc, &IntOrString::Int(80)).as_deref(),
            Some("")
        );
        assert_eq!(
            service_port_name(&svc, &IntOrString::String("admin".into())).as_deref(),
            Some("admin")
        );
        assert_eq!(service_port_name(&svc, &IntOrString::Int(82)), None);
    }

    #[test]
    fn endpoints_become_targets_on_the_slice_port_and_gates_wait() {
        let s = slice(serde_json::json!({
            "metadata": {"name": "web-abc", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.0.1.5"], "conditions": {"ready": true}, "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "namespace": "default", "name": "a"}},
                {"addresses": ["10.0.1.6"], "conditions": {"ready": false}, "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "namespace": "default", "name": "b"}},
                {"addresses": ["10.0.1.7"], "conditions": {"ready": false}, "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "namespace": "default", "name": "c"}},
                {"addresses": ["10.0.1.8"], "conditions": {"ready": true, "terminating": true},
                 "nodeName": "n1",
                 "targetRef": {"kind": "Pod", "namespace": "default", "name": "d"}},
            ]
        }));
        let pods: BTreeMap<&str, Arc<Pod>> = [
            ("a", pod("a", false, true, false)),
            ("b", pod("b", true, true, false)),
            ("c", pod("c", true, false, false)),
            ("d", pod("d", false, true, true)),
        ]
        .into();
        let lookup = |_: &str, n: &str| pods.get(n).cloned();
        let nodes = [("n1".to_string(), NodeReady::True)].into();
        let (d, gated) = binding_targets(
            &[&s],
            "",
            "target-health.elbv2.k8s.aws/web",
            &lookup,
            &nodes,
        );
        let ips: Vec<String> = d.wanted.iter().map(|k| k.ip.to_string()).collect();
        assert_eq!(ips, vec!["10.0.1.5", "10.0.1.6"]);
        assert!(d.wanted.iter().all(|k| k.port == 8080));
        let g: Vec<&str> = gated.iter().map(|g| g.pod.as_str()).collect();
        assert_eq!(g, vec!["b", "c"], "gated pods whose condition is not True");
        let tp = target_pods(&[&s], "");
        assert_eq!(tp.len(), 4);
        assert_eq!(tp[0].0.port, 8080);
        assert_eq!((tp[0].1.as_str(), tp[0].2.as_str()), ("default", "a"));
        // A port the slice does not carry: nothing.
        let (d, _) = binding_targets(&[&s], "admin", "x", &lookup, &nodes);
        assert!(d.wanted.is_empty());
    }
}

/// Label-selected pods (kube-ingress-aws-controller's "AWS CNI" target access mode): every pod
/// of `namespace` whose labels include all of `labels` is a target on `port` in each of
/// `target_groups` as soon as it has an IP, until it gets a deletion timestamp (or ends:
/// phase Succeeded or Failed). No readiness involved: the load balancer's health check decides
/// when traffic flows (use `minReadySeconds` on the Deployment, see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Target group ARNs.
    pub target_groups: Vec<String>,
    pub port: u16,
}

/// Parses an equality-based label selector `k=v,k2=v2` (`==` accepted). Errors name the term.
pub fn parse_selector(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (k, v) = t
                .split_once("==")
                .or_else(|| t.split_once('='))
                .ok_or_else(|| {
                    format!(
                        "selector term {t:?} is not key=value (only equality selectors are served)"
                    )
                })?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || k.contains('!') {
                return Err(format!("selector term {t:?} is not key=value"));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The desired targets of `sel` among `pods` (see [`Selection`]).
pub fn selected_targets<'a>(pods: impl IntoIterator<Item = &'a Pod>, sel: &Selection) -> Desired {
    let mut views = Vec::new();
    for p in pods {
        if p.metadata.namespace.as_deref() != Some(sel.namespace.as_str()) {
            continue;
        }
        let labels = p.metadata.labels.clone().unwrap_or_default();
        if !sel.labels.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            continue;
        }
        let status = p.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        ) {
            continue;
        }
        let ip = status
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok());
        views.push(EndpointView {
            ip,
            ready: Some(true),
            terminating: None,
            node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
            pod: Some(pod_view(p, None)),
        });
    }
    desired::desired(&views, sel.port, &BTreeMap::new())
}

#[cfg(test)]
mod selection_tests {
    use super::*;

    fn pod(name: &str, app: &str, ip: Option<&str>, deleting: bool, phase: &str) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
            "spec": {"containers": []},
            "status": {"phase": phase},
        });
        if let Some(ip) = ip {
            v["status"]["podIP"] = ip.into();
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn selected_pods_with_an_ip_and_not_terminating_are_targets() {
        let sel = Selection {
            namespace: "default".into(),
            labels: parse_selector("app=web").unwrap(),
            target_groups: vec!["arn".into()],
            port: 8080,
        };
        let pods = [
            pod("a", "web", Some("10.0.1.5"), false, "Pending"),
            pod("b", "web", None, false, "Pending"),
            pod("c", "web", Some("10.0.1.7"), true, "Running"),
            pod("d", "db", Some("10.0.1.8"), false, "Running"),
            pod("e", "web", Some("10.0.1.9"), false, "Succeeded"),
        ];
        let d = selected_targets(pods.iter(), &sel);
        let ips: Vec<String> = d.wanted.iter().map(|k| k.ip.to_string()).collect();
        assert_eq!(ips, vec!["10.0.1.5"]);
        assert!(d.wanted.iter().all(|k| k.port == 8080));
    }

    #[test]
    fn selectors_parse_equality_terms_only() {
        let m = parse_selector("app=web, tier==front").unwrap();
        assert_eq!(m.get("app").map(String::as_str), Some("web"));
        assert_eq!(m.get("tier").map(String::as_str), Some("front"));
        assert!(parse_selector("app!=web").is_err());
        assert!(parse_selector("app").is_err());
    }
}
