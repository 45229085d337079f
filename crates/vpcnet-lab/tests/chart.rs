//! vpcnet installed on the lab cluster with its Helm chart, as an operator installs it on EKS:
//! the node image imported into each node's containerd, `charts/vpcnet` installed with the
//! pinned Helm, the agent started by kubelet as the `aws-node` DaemonSet's pod under the chart's
//! service account and ClusterRole, the plugins installed by its init container. Needs root, the
//! workspace binaries, the Kubernetes binaries, Helm and CoreDNS (scripts/test.sh provides them).
//! EKS's default add-ons run beside it: kube-proxy as a DaemonSet, CoreDNS behind kube-dns.

use std::net::Ipv4Addr;
use std::time::Duration;

use vpcnet_lab::kube::addons::coredns;
use vpcnet_lab::kube::vpcnet_chart::{DAEMONSET, NAMESPACE};
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::{KubeProxyMode, Lab};
use vpcnet_lab::state::{AgentInstall, NodeRecord};

mod common;
use common::*;

/// The lab node a Kubernetes node name belongs to.
fn lab_node(lab: &Lab, k8s_name: &str) -> NodeRecord {
    lab.state()
        .unwrap()
        .nodes
        .into_iter()
        .find(|n| n.k8s_name == k8s_name)
        .unwrap_or_else(|| panic!("no lab node {k8s_name}"))
}

/// The host PID of the agent container's process, from the node's containerd.
fn agent_pid(lab: &Lab, node: &NodeRecord) -> i32 {
    let pod = lab.vpcnet_chart().agent_pod(&node.k8s_name).unwrap();
    let id = pod
        .container_id
        .strip_prefix("containerd://")
        .unwrap_or_else(|| panic!("agent container not started: {pod:?}"));
    let tasks =
        vpcnet_lab::containerd::tasks_in(node, vpcnet_lab::containerd::CRI_NAMESPACE).unwrap();
    tasks
        .iter()
        .find(|t| t.id == id)
        .unwrap_or_else(|| panic!("no task {id} on {}: {tasks:?}", node.name))
        .pid
}

#[test]
fn the_chart_installs_the_agent_as_a_daemonset_that_kubelet_runs_and_restarts() {
    with_kube_lab(
        "chart",
        |o| {
            o.nodes = 2;
            o.agent_install = AgentInstall::Chart;
            o.kube_proxy_mode = KubeProxyMode::DaemonSet;
            o.coredns = true;
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let chart = lab.vpcnet_chart();
            let state = lab.state().unwrap();

            // No agent process of the lab's: the agents are kubelet's pods, one per node,
            // Running and Ready, never restarted, under the chart's service account.
            assert!(
                !state.processes.iter().any(|p| p.role.starts_with("agent ")),
                "a lab agent process runs"
            );
            let pods = chart.agent_pods().unwrap();
            assert_eq!(pods.len(), 2, "{pods:?}");
            for n in &state.nodes {
                let p = pods
                    .iter()
                    .find(|p| p.node == n.k8s_name)
                    .unwrap_or_else(|| panic!("no agent pod on {}: {pods:?}", n.name));
                assert!(p.phase == "Running" && p.ready, "{p:?}");
                assert_eq!(p.restarts, 0, "{p:?}");
            }
            let spec = k
                .json(&["get", "daemonset", "-n", NAMESPACE, DAEMONSET])
                .unwrap();
            let pod_spec = &spec["spec"]["template"]["spec"];
            assert_eq!(pod_spec["serviceAccountName"], "aws-node");
            assert_eq!(pod_spec["hostNetwork"], true);
            assert_eq!(pod_spec["priorityClassName"], "system-node-critical");
            assert_eq!(
                spec["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                "Helm"
            );
            // The service account can do what the agent needs and no more: it may not read
            // Secrets or delete Nodes.
            let sa = format!("system:serviceaccount:{NAMESPACE}:aws-node");
            let can = |question: &[&str]| {
                let mut args = vec!["auth", "can-i"];
                args.extend_from_slice(question);
                args.extend(["--as", &sa]);
                let out = k.output(&args, None).unwrap();
                String::from_utf8_lossy(&out.stdout).trim() == "yes"
            };
            assert!(can(&["watch", "eniconfigs.crd.k8s.amazonaws.com"]));
            assert!(can(&["patch", "nodes", "--subresource=status"]));
            assert!(!can(&["get", "secrets"]), "the agent may read Secrets");
            assert!(!can(&["delete", "nodes"]), "the agent may delete Nodes");

            // The init container installed the plugin into each node's /opt/cni/bin (the lab
            // put only the AMI's reference plugins there), the agent wrote the conflist, and
            // the nodes are Ready.
            let plugin = std::fs::read(bin_dir().join("vpcnet-cni")).unwrap();
            for n in &state.nodes {
                let installed = std::fs::read(n.path("/opt/cni/bin/vpcnet-cni"))
                    .unwrap_or_else(|e| panic!("vpcnet-cni not installed on {}: {e}", n.name));
                assert!(installed == plugin, "{}: another vpcnet-cni", n.name);
                assert!(n.path("/etc/cni/net.d/10-vpcnet.conflist").is_file());
            }
            assert!(lab.kube().node_statuses().unwrap().iter().all(|s| s.ready));

            // Pods get VPC addresses of their node's ENIs.
            k.apply(&httpd_manifest("web", 4, &Placement::default()))
                .unwrap();
            let web = lab
                .workloads()
                .wait_pods_ready("app=web", 4, Duration::from_secs(180))
                .unwrap();
            for p in &web {
                let node = lab_node(lab, &p.node);
                let ip = p.ip.unwrap();
                let enis = describe_node_enis(lab, &node);
                let eni = eni_of(&enis, ip).unwrap_or_else(|| {
                    panic!(
                        "pod {} ({ip}) is not an address of {}'s ENIs",
                        p.name, node.name
                    )
                });
                assert_eq!(eni.instance_id, node.instance_id);
            }

            // EKS's add-ons beside it: kube-proxy's pods on both nodes, CoreDNS Ready; a pod
            // resolves the Service's name through kube-dns and CoreDNS answers its clusterIP.
            let kp = lab
                .addons()
                .wait_kube_proxy(Duration::from_secs(60))
                .unwrap();
            assert_eq!(kp.len(), 2, "{kp:?}");
            lab.addons().wait_coredns(Duration::from_secs(60)).unwrap();
            k.run(&[
                "expose",
                "deployment",
                "web",
                "--name",
                "web-svc",
                "--port",
                "80",
            ])
            .unwrap();
            let svc_ip = lab.workloads().service_ip("web-svc").unwrap();
            let dns_ip = coredns::cluster_dns_ip().unwrap();
            wait_until(
                "a pod to resolve web-svc through kube-dns",
                Duration::from_secs(60),
                || {
                    let out = lab
                        .workloads()
                        .pod_exec(
                            &web[0].name,
                            &["nslookup", "web-svc.default.svc.cluster.local"],
                        )
                        .unwrap();
                    let text = String::from_utf8_lossy(&out.stdout);
                    text.contains(&dns_ip.to_string()) && text.contains(&svc_ip.to_string())
                },
            );

            // `vpcnet inspect` from `kubectl exec` into the agent pod.
            let n1 = state.node("n1").unwrap();
            let out = chart
                .exec(&n1.k8s_name, &["vpcnet", "inspect", "enis"])
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{out:?}");
            let primary = &describe_node_enis(lab, n1)
                .into_iter()
                .find(|e| e.device_index == Some(0))
                .unwrap()
                .eni_id;
            assert!(text.contains(primary.as_str()), "{text}");

            // kill -9 the agent of n1: kubelet restarts the container; the pods keep answering
            // meanwhile and afterwards.
            let on_n1: Vec<Ipv4Addr> = web
                .iter()
                .filter(|p| p.node == n1.k8s_name)
                .map(|p| p.ip.unwrap())
                .collect();
            let client = web
                .iter()
                .find(|p| p.node != n1.k8s_name)
                .unwrap_or(&web[0])
                .clone();
            let pid = agent_pid(lab, n1);
            sh("kill", &["-9", &pid.to_string()]);
            for ip in &on_n1 {
                let body = lab
                    .workloads()
                    .pod_http_get(&client.name, *ip, 80, "/")
                    .unwrap();
                assert!(body.starts_with("hello from web-"), "{body}");
            }
            wait_until(
                "kubelet to restart the killed agent",
                Duration::from_secs(120),
                || {
                    chart
                        .agent_pod(&n1.k8s_name)
                        .is_ok_and(|p| p.restarts >= 1 && p.ready)
                },
            );
            assert_ne!(agent_pid(lab, n1), pid);
            for ip in &on_n1 {
                let body = lab
                    .workloads()
                    .pod_http_get(&client.name, *ip, 80, "/")
                    .unwrap();
                assert!(body.starts_with("hello from web-"), "{body}");
            }
            // And it serves new pods.
            k.run(&["scale", "deployment", "web", "--replicas", "6"])
                .unwrap();
            lab.workloads()
                .wait_pods_ready("app=web", 6, Duration::from_secs(120))
                .unwrap();
        },
    );
}
