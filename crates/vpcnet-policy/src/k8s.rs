//! Conversion from the Kubernetes API objects (k8s-openapi) into the [`crate::model`].
//!
//! [`policy`] defaults `policyTypes` and ports' `protocol` as the API server does and never
//! fails: what it cannot understand it drops, fail-closed, with a warning naming the policy,
//! the field and the problem. Fail-closed means a dropped entry never widens a rule: a rule
//! whose non-empty `from`/`to` or `ports` list lost every entry is dropped whole (an empty
//! list would mean every peer or every port). IPv6 `ipBlock`s match nothing in this IPv4
//! world and are dropped without a warning (under the same rule).

use std::fmt::Display;
use std::net::Ipv4Addr;

use ipnet::{IpNet, Ipv4Net};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::{
    LabelSelector, NamedPort, Namespace, Peer, Pod, Policy, PortRef, PortSpec, Protocol,
    Requirement, Rule,
};

/// The label the API server puts on every namespace, its name as the value.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A converted object and what was wrong with the original (each warning names the object,
/// the field and the problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted<T> {
    pub value: T,
    pub warnings: Vec<String>,
}

/// A namespace; `None` without a name. Adds `kubernetes.io/metadata.name` if the object
/// lacks it (the API server sets it on every write).
pub fn namespace(ns: &core::Namespace) -> Option<Namespace> {
    let name = ns.metadata.name.clone()?;
    let mut labels = ns.metadata.labels.clone().unwrap_or_default();
    labels
        .entry(NAMESPACE_NAME_LABEL.to_owned())
        .or_insert_with(|| name.clone());
    Some(Namespace { name, labels })
}

/// A pod; `None` without a name or namespace.
///
/// - `ips`: the IPv4 entries of `status.podIPs`, or `status.podIP` when that list is empty,
///   or, before kubelet has reported either, the [`POD_IPS_ANNOTATION`] that the node's agent
///   writes before the pod's ADD is answered (`ANNOTATE_POD_IP=true`), so other nodes learn a
///   new pod's address before its first packet. None for a pod that has finished (`Succeeded`
///   or `Failed`): its address may already belong to a new pod.
/// - `ports`: the named ports of every container and of every restartable (sidecar) init
///   container (`restartPolicy: Always`), protocol TCP when absent; entries with an unknown
///   protocol or a port out of range are left out. Sorted, no duplicates.
pub fn pod(pod: &core::Pod) -> Option<Pod> {
    let name = pod.metadata.name.clone()?;
    let namespace = pod.metadata.namespace.clone()?;
    let spec = pod.spec.as_ref();
    let mut ports: Vec<NamedPort> = spec
        .into_iter()
        .flat_map(|s| {
            let sidecars = s
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            s.containers.iter().chain(sidecars)
        })
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(named_port)
        .collect();
    ports.sort();
    ports.dedup();
    Some(Pod {
        namespace,
        name,
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        ips: pod_ips(pod.status.as_ref(), pod.metadata.annotations.as_ref()),
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        ports,
    })
}

fn named_port(p: &core::ContainerPort) -> Option<NamedPort> {
    let name = p.name.clone().filter(|n| !n.is_empty())?;
    let protocol = match p.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(s) => protocol(s)?,
    };
    let port = u16::try_from(p.container_port).ok().filter(|&p| p != 0)?;
    Some(NamedPort {
        name,
        protocol,
        port,
    })
}

/// The annotation the VPC CNI (and vpcnet's agent, with `ANNOTATE_POD_IP=true`) writes on a
/// pod during its ADD: its address, plain text.
pub const POD_IPS_ANNOTATION: &str = "vpc.amazonaws.com/pod-ips";

fn pod_ips(
    status: Option<&core::PodStatus>,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Vec<Ipv4Addr> {
    if status.is_some_and(|s| matches!(s.phase.as_deref(), Some("Succeeded" | "Failed"))) {
        return vec![];
    }
    let listed: Vec<&str> = status
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .map(|ip| ip.ip.as_str())
        .collect();
    let raw: Vec<&str> = if !listed.is_empty() {
        listed
    } else if let Some(ip) = status.and_then(|s| s.pod_ip.as_deref()) {
        vec![ip]
    } else {
        annotations
            .and_then(|a| a.get(POD_IPS_ANNOTATION))
            .map(|v| v.split(',').map(str::trim).collect())
            .unwrap_or_default()
    };
    let mut ips: Vec<Ipv4Addr> = Vec::new();
    for ip in raw.into_iter().filter_map(|s| s.parse::<Ipv4Addr>().ok()) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

/// A protocol's API name (`TCP`, `UDP`, `SCTP`).
fn protocol(s: &str) -> Option<Protocol> {
    match s {
        "TCP" => Some(Protocol::Tcp),
        "UDP" => Some(Protocol::Udp),
        "SCTP" => Some(Protocol::Sctp),
        _ => None,
    }
}

/// A NetworkPolicy, defaulted and checked. Never fails; see the module documentation.
///
/// `policyTypes` absent or empty: Ingress, and Egress too if `spec.egress` has rules (the
/// API server's defaulting). Present: exactly the types listed; a listed type without rules
/// isolates and allows nothing, rules of a type not listed are ignored. A `podSelector` the
/// compiler cannot understand is replaced by the selector without the broken requirements
/// (selecting more pods) and the policy's rules are emptied: the pods it may select are
/// isolated in its directions but allowed nothing by it.
pub fn policy(np: &networking::NetworkPolicy) -> Converted<Policy> {
    let namespace = np.metadata.namespace.clone().unwrap_or_default();
    let name = np.metadata.name.clone().unwrap_or_default();
    let mut cx = Context {
        id: format!("{namespace}/{name}"),
        warnings: Vec::new(),
    };
    if np.metadata.namespace.is_none() {
        cx.warn("metadata.namespace", "missing; the policy selects no pod");
    }
    if np.metadata.name.is_none() {
        cx.warn("metadata.name", "missing");
    }
    let empty = networking::NetworkPolicySpec::default();
    let spec = np.spec.as_ref().unwrap_or(&empty);

    let (pod_selector, selector_ok) = match &spec.pod_selector {
        None => (LabelSelector::default(), true),
        Some(s) => {
            let (sel, problems) = selector(s);
            for p in &problems {
                cx.warn("spec.podSelector", p);
            }
            if !problems.is_empty() {
                cx.warn(
                    "spec.podSelector",
                    "broken requirements left out and the policy's rules ignored: the pods it \
                     selects are isolated but allowed nothing by it",
                );
            }
            (sel, problems.is_empty())
        }
    };

    let (ingress_on, egress_on) = policy_types(&mut cx, spec);
    let ingress = ingress_on.then(|| {
        let rules = spec.ingress.iter().flatten().enumerate();
        rules
            .filter(|_| selector_ok)
            .filter_map(|(i, r)| {
                rule(
                    &mut cx,
                    &format!("spec.ingress[{i}]"),
                    "from",
                    r.from.as_deref(),
                    r.ports.as_deref(),
                )
            })
            .collect()
    });
    let egress = egress_on.then(|| {
        let rules = spec.egress.iter().flatten().enumerate();
        rules
            .filter(|_| selector_ok)
            .filter_map(|(i, r)| {
                rule(
                    &mut cx,
                    &format!("spec.egress[{i}]"),
                    "to",
                    r.to.as_deref(),
                    r.ports.as_deref(),
                )
            })
            .collect()
    });

    Converted {
        value: Policy {
            namespace,
            name,
            pod_selector,
            ingress,
            egress,
        },
        warnings: cx.warnings,
    }
}

struct Context {
    /// `namespace/name`.
    id: String,
    warnings: Vec<String>,
}

impl Context {
    fn warn(&mut self, field: &str, problem: impl Display) {
        self.warnings
            .push(format!("NetworkPolicy {}: {field}: {problem}", self.id));
    }
}

/// Whether the policy isolates (ingress, egress).
fn policy_types(cx: &mut Context, spec: &networking::NetworkPolicySpec) -> (bool, bool) {
    let (mut ingress, mut egress) = (false, false);
    for (i, t) in spec.policy_types.iter().flatten().enumerate() {
        match t.as_str() {
            "Ingress" => ingress = true,
            "Egress" => egress = true,
            other => cx.warn(
                &format!("spec.policyTypes[{i}]"),
                format_args!("unknown policy type {other:?}, ignored"),
            ),
        }
    }
    if !ingress && !egress {
        // Absent or empty (or nothing but unknown types): the API server's default.
        ingress = true;
        egress = spec.egress.as_ref().is_some_and(|e| !e.is_empty());
    }
    (ingress, egress)
}

/// One rule; `None` if it must be dropped (fail-closed).
fn rule(
    cx: &mut Context,
    field: &str,
    peers_name: &str,
    peers: Option<&[networking::NetworkPolicyPeer]>,
    ports: Option<&[networking::NetworkPolicyPort]>,
) -> Option<Rule> {
    let peers = peers.unwrap_or_default();
    let mut converted_peers = Vec::with_capacity(peers.len());
    let mut invalid_peers = false;
    for (i, p) in peers.iter().enumerate() {
        match peer(cx, &format!("{field}.{peers_name}[{i}]"), p) {
            PeerOutcome::Peer(p) => converted_peers.push(p),
            PeerOutcome::Ipv6 => {}
            PeerOutcome::Invalid => invalid_peers = true,
        }
    }
    if !peers.is_empty() && converted_peers.is_empty() {
        if invalid_peers {
            cx.warn(
                field,
                format_args!("no usable {peers_name} entry left; rule dropped"),
            );
        }
        // Only IPv6 blocks: the rule matches nothing here, dropping it is exact.
        return None;
    }

    let ports = ports.unwrap_or_default();
    let converted_ports: Vec<PortSpec> = ports
        .iter()
        .enumerate()
        .filter_map(|(i, p)| port(cx, &format!("{field}.ports[{i}]"), p))
        .collect();
    if !ports.is_empty() && converted_ports.is_empty() {
        cx.warn(field, "no usable ports entry left; rule dropped");
        return None;
    }
    Some(Rule {
        peers: converted_peers,
        ports: converted_ports,
    })
}

enum PeerOutcome {
    Peer(Peer),
    /// An IPv6 `ipBlock`: matches nothing here.
    Ipv6,
    Invalid,
}

fn peer(cx: &mut Context, field: &str, p: &networking::NetworkPolicyPeer) -> PeerOutcome {
    match (&p.ip_block, &p.namespace_selector, &p.pod_selector) {
        (Some(block), None, None) => ip_block(cx, field, block),
        (Some(_), _, _) => {
            cx.warn(field, "ipBlock together with a selector; entry dropped");
            PeerOutcome::Invalid
        }
        (None, None, None) => {
            cx.warn(
                field,
                "none of podSelector, namespaceSelector, ipBlock; entry dropped",
            );
            PeerOutcome::Invalid
        }
        (None, namespaces, pods) => {
            let mut valid = true;
            let mut convert = |name: &str, s: &Option<meta::LabelSelector>| {
                s.as_ref().map(|s| {
                    let (sel, problems) = selector(s);
                    for problem in problems {
                        cx.warn(
                            &format!("{field}.{name}"),
                            format_args!("{problem}; entry dropped"),
                        );
                        valid = false;
                    }
                    sel
                })
            };
            let namespaces = convert("namespaceSelector", namespaces);
            let pods = convert("podSelector", pods);
            if valid {
                PeerOutcome::Peer(Peer::Pods { namespaces, pods })
            } else {
                PeerOutcome::Invalid
            }
        }
    }
}

fn ip_block(cx: &mut Context, field: &str, block: &networking::IPBlock) -> PeerOutcome {
    let cidr = match block.cidr.parse::<IpNet>() {
        Ok(IpNet::V4(net)) => net.trunc(),
        Ok(IpNet::V6(_)) => return PeerOutcome::Ipv6,
        Err(_) => {
            cx.warn(
                &format!("{field}.ipBlock.cidr"),
                format_args!("{:?} is not a CIDR; entry dropped", block.cidr),
            );
            return PeerOutcome::Invalid;
        }
    };
    let mut except: Vec<Ipv4Net> = Vec::new();
    for (i, e) in block.except.iter().flatten().enumerate() {
        let efield = format!("{field}.ipBlock.except[{i}]");
        match e.parse::<IpNet>() {
            Ok(IpNet::V4(net)) => {
                let net = net.trunc();
                if !(cidr.contains(&net) && net.prefix_len() > cidr.prefix_len()) {
                    let effect = if net.contains(&cidr) {
                        "the whole block is excepted"
                    } else {
                        "it excepts nothing"
                    };
                    cx.warn(
                        &efield,
                        format_args!("{net} is not strictly inside cidr {cidr}; {effect}"),
                    );
                }
                except.push(net);
            }
            Ok(IpNet::V6(_)) => cx.warn(
                &efield,
                format_args!("IPv6 {e:?} in an IPv4 block excepts nothing, ignored"),
            ),
            Err(_) => {
                cx.warn(&efield, format_args!("{e:?} is not a CIDR; entry dropped"));
                return PeerOutcome::Invalid;
            }
        }
    }
    PeerOutcome::Peer(Peer::IpBlock { cidr, except })
}

/// A label selector and its problems; broken requirements are left out of it.
fn selector(s: &meta::LabelSelector) -> (LabelSelector, Vec<String>) {
    let mut problems = Vec::new();
    let mut match_expressions = Vec::new();
    for (i, r) in s.match_expressions.iter().flatten().enumerate() {
        let key = r.key.clone();
        let values = r.values.clone().unwrap_or_default();
        let requirement = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => Err("needs values".to_owned()),
            "In" => Ok(Requirement::In {
                key,
                values: values.into_iter().collect(),
            }),
            "NotIn" => Ok(Requirement::NotIn {
                key,
                values: values.into_iter().collect(),
            }),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                Err("must not have values".to_owned())
            }
            "Exists" => Ok(Requirement::Exists { key }),
            "DoesNotExist" => Ok(Requirement::DoesNotExist { key }),
            other => Err(format!("unknown operator {other:?}")),
        };
        match requirement {
            Ok(req) => match_expressions.push(req),
            Err(problem) => problems.push(format!(
                "matchExpressions[{i}] ({} {}): {problem}",
                r.key, r.operator
            )),
        }
    }
    let selector = LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions,
    };
    (selector, problems)
}

fn port(cx: &mut Context, field: &str, p: &networking::NetworkPolicyPort) -> Option<PortSpec> {
    let protocol = match p.protocol.as_deref() {
        None => Protocol::Tcp,
        Some(s) => match protocol(s) {
            Some(proto) => proto,
            None => {
                cx.warn(
                    &format!("{field}.protocol"),
                    format_args!("unknown protocol {s:?}; entry dropped"),
                );
                return None;
            }
        },
    };
    let port = match &p.port {
        None => None,
        Some(IntOrString::Int(n)) => match u16::try_from(*n) {
            Ok(n) if n != 0 => Some(PortRef::Number(n)),
            _ => {
                cx.warn(
                    &format!("{field}.port"),
                    format_args!("{n} is not a port number; entry dropped"),
                );
                return None;
            }
        },
        Some(IntOrString::String(name)) if name.is_empty() => {
            cx.warn(&format!("{field}.port"), "empty port name; entry dropped");
            return None;
        }
        Some(IntOrString::String(name)) => Some(PortRef::Name(name.clone())),
    };
    let end_port = match (p.end_port, &port) {
        (None, _) => None,
        (Some(end), Some(PortRef::Number(first))) => match u16::try_from(end) {
            Ok(end) if end >= *first => Some(end),
            _ => {
                cx.warn(
                    &format!("{field}.endPort"),
                    format_args!("{end} is below port {first} or not a port number; entry dropped"),
                );
                return None;
            }
        },
        (Some(end), _) => {
            cx.warn(
                &format!("{field}.endPort"),
                format_args!("{end} without a numeric port; entry dropped"),
            );
            return None;
        }
    };
    Some(PortSpec {
        protocol,
        port,
        end_port,
    })
}

#[cfg(test)]
mod tests;
