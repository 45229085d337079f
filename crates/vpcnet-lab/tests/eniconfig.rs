//! Custom networking with ENIConfig (issue 9) in the Kubernetes lab: the real API server
//! serves the ENIConfig CRD the lab installs, the agent watches its Node and the ENIConfigs,
//! reports a missing or malformed choice on the Node (condition + Event), in introspection
//! and metrics, and fills its pool once the ENIConfig appears. Needs root, the workspace
//! binaries and the Kubernetes binaries; fails when not root.

use std::time::{Duration, Instant};

use serde_json::Value;
use vpcnet_lab::kube::kubectl::Kubectl;
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

const CONDITION: &str = "vpcnet.io/ENIConfigResolved";

/// The Node's vpcnet condition: (status, reason, message).
fn condition(k: &Kubectl, node: &str) -> Option<(String, String, String)> {
    node_condition(k, node, CONDITION)
}

fn eniconfig_doc(lab: &Lab) -> Value {
    let (code, body) = lab.node("n1").agent_get("/v1/eniconfig").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The first `<tag>` text of an EC2 XML answer.
fn xml_first(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no {tag} in {xml}"))
        + open.len();
    let end = start + xml[start..].find('<').unwrap();
    xml[start..end].to_string()
}

#[test]
fn a_missing_eniconfig_is_reported_on_the_node_and_creating_it_fills_the_pool() {
    with_kube_lab(
        "k8seni",
        |o| {
            o.agent_env
                .push(("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG".into(), "true".into()));
            o.cluster_endpoint = true;
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let n = node(lab);
            let name = n.k8s_name.clone();
            // The CRD is installed and served.
            k.run(&["get", "crd", "eniconfigs.crd.k8s.amazonaws.com"])
                .unwrap();

            // No ENIConfig named default: condition False, Warning Event, introspection.
            wait_until(
                "the condition says ENIConfigNotFound",
                Duration::from_secs(60),
                || {
                    condition(&k, &name)
                        .is_some_and(|(s, r, _)| s == "False" && r == "ENIConfigNotFound")
                },
            );
            let (_, _, msg) = condition(&k, &name).unwrap();
            assert!(
                msg.contains("\"default\"") && msg.contains("create it"),
                "{msg}"
            );
            wait_until(
                "a Warning Event on the Node",
                Duration::from_secs(30),
                || node_event(&k, &name, "ENIConfigNotFound", "Warning"),
            );
            let d = eniconfig_doc(lab);
            assert_eq!(d["state"], "unresolved", "{d}");
            assert_eq!(d["reason"], "ENIConfigNotFound", "{d}");
            assert_eq!(d["name"], "default", "{d}");
            // Nothing created, nothing on the primary ENI; the agent is healthy.
            let enis = describe_node_enis(lab, &n);
            assert_eq!(enis.len(), 1, "{enis:?}");
            assert!(enis[0].secondary_ips.is_empty(), "{enis:?}");
            assert_eq!(lab.node("n1").agent_get("/healthz").unwrap().0, 200);

            // A malformed annotation: named on the Node, nothing lost.
            k.run(&[
                "annotate",
                "node",
                &name,
                "k8s.amazonaws.com/eniConfig=Bad_Name",
            ])
            .unwrap();
            wait_until(
                "the condition says InvalidSelection",
                Duration::from_secs(30),
                || condition(&k, &name).is_some_and(|(_, r, _)| r == "InvalidSelection"),
            );
            let (_, _, msg) = condition(&k, &name).unwrap();
            assert!(
                msg.contains(&format!("Node {name}"))
                    && msg.contains("annotation k8s.amazonaws.com/eniConfig"),
                "{msg}"
            );
            k.run(&["annotate", "node", &name, "k8s.amazonaws.com/eniConfig-"])
                .unwrap();

            // Create the ENIConfig (the node's own subnet and security group): the pool fills
            // without touching the agent.
            let xml = lab
                .cloud()
                .ec2(
                    "DescribeNetworkInterfaces",
                    &[
                        ("Filter.1.Name", "attachment.instance-id"),
                        ("Filter.1.Value.1", &n.instance_id),
                    ],
                )
                .unwrap();
            let (subnet, sg) = (xml_first(&xml, "subnetId"), xml_first(&xml, "groupId"));
            let t0 = Instant::now();
            k.apply(&format!(
                "apiVersion: crd.k8s.amazonaws.com/v1alpha1\nkind: ENIConfig\nmetadata: {{name: default}}\nspec: {{subnet: {subnet}, securityGroups: [{sg}]}}\n"
            ))
            .unwrap();
            wait_until("a secondary ENI", Duration::from_secs(60), || {
                describe_node_enis(lab, &n).len() >= 2
            });
            let filled = t0.elapsed();
            wait_until("the condition turns True", Duration::from_secs(30), || {
                condition(&k, &name).is_some_and(|(s, _, _)| s == "True")
            });
            let d = eniconfig_doc(lab);
            assert_eq!(d["state"], "resolved", "{d}");
            assert_eq!(d["subnet"], subnet.as_str(), "{d}");
            eprintln!(
                "ENIConfig created -> secondary ENI attached in {filled:?}; the node waited {} ms without one",
                d["last_wait_ms"]
            );
            let enis = describe_node_enis(lab, &n);
            let primary = enis.iter().find(|e| e.device_index == Some(0)).unwrap();
            assert!(
                primary.secondary_ips.is_empty(),
                "primary ENI unused: {enis:?}"
            );
            let c = lab
                .containers()
                .run("n1", &["cn1".to_string()])
                .unwrap()
                .remove(0);
            let enis = describe_node_enis(lab, &n);
            let on = eni_of(&enis, c.ip)
                .unwrap_or_else(|| panic!("pod address {} on no ENI: {enis:?}", c.ip));
            assert_ne!(on.device_index, Some(0), "pod {} on the primary ENI", c.ip);

            // The annotation beats the ENIConfig named default: naming a missing one
            // un-resolves the node (named on the Node), creating it resolves it again.
            k.run(&[
                "annotate",
                "node",
                &name,
                "k8s.amazonaws.com/eniConfig=pods-other",
            ])
            .unwrap();
            wait_until(
                "the condition names pods-other",
                Duration::from_secs(30),
                || {
                    condition(&k, &name).is_some_and(|(s, r, m)| {
                        s == "False" && r == "ENIConfigNotFound" && m.contains("\"pods-other\"")
                    })
                },
            );
            k.apply(&format!(
                "apiVersion: crd.k8s.amazonaws.com/v1alpha1\nkind: ENIConfig\nmetadata: {{name: pods-other}}\nspec: {{subnet: {subnet}, securityGroups: [{sg}]}}\n"
            ))
            .unwrap();
            wait_until("pods-other resolved", Duration::from_secs(30), || {
                let d = eniconfig_doc(lab);
                d["state"] == "resolved"
                    && d["name"] == "pods-other"
                    && d["selected_by"] == "annotation k8s.amazonaws.com/eniConfig"
            });
            wait_until(
                "the condition turns True again",
                Duration::from_secs(30),
                || {
                    condition(&k, &name)
                        .is_some_and(|(s, _, m)| s == "True" && m.contains("pods-other"))
                },
            );
            assert_eq!(lab.node("n1").agent_get("/healthz").unwrap().0, 200);
        },
    );
}
