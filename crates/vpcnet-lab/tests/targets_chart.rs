//! vpcnet-targets installed on the lab cluster with its Helm chart, as an operator installs it
//! on EKS, on a lab installed the same way (vpcnet by `charts/vpcnet`, kube-proxy's DaemonSet,
//! CoreDNS): the image imported into each node's containerd, `charts/vpcnet-targets` installed
//! with the pinned Helm, the controller run by kubelet as the chart's Deployment pods (pod
//! network, the chart's service account and RBAC, leader election), reaching the API server
//! through the `kubernetes` Service and the lab cloud's ELBv2 endpoint from their VPC addresses.
//! Needs root, the workspace binaries, the Kubernetes binaries, Helm and CoreDNS
//! (scripts/test.sh provides them).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use vpcnet_emu::request_log::Api;
use vpcnet_lab::kube::addons::KubeProxyMode;
use vpcnet_lab::kube::targets::gated_httpd_manifest;
use vpcnet_lab::kube::targets_chart::{TargetsChartOptions, NAMESPACE, RELEASE};
use vpcnet_lab::state::AgentInstall;

mod common;
use common::targets::*;
use common::*;

#[test]
fn the_targets_chart_runs_the_controller_in_the_pod_network_and_it_registers_pods() {
    with_kube_lab(
        "tgchart",
        |o| {
            o.nodes = 2;
            o.agent_install = AgentInstall::Chart;
            o.kube_proxy_mode = KubeProxyMode::DaemonSet;
            o.coredns = true;
        },
        |lab| {
            let k = lab.kube().kubectl().unwrap();
            let chart = lab.targets_chart();
            let l = new_lb(lab);

            // Install by the chart: two replicas, Running and Ready (caches synced), one leader.
            let t0 = Instant::now();
            chart
                .install_on_nodes(&TargetsChartOptions {
                    replicas: 2,
                    resync_seconds: RESYNC,
                    lease_duration_seconds: LEASE,
                })
                .unwrap();
            let (ctl_pods, leader) = chart.wait_ready(2, Duration::from_secs(180)).unwrap();
            eprintln!(
                "vpcnet-targets: 2 pods Ready, leader {leader}, {:?} after the image build started",
                t0.elapsed()
            );
            let state = lab.state().unwrap();
            assert!(
                !state
                    .processes
                    .iter()
                    .any(|p| p.role.starts_with("vpcnet-targets")),
                "a lab vpcnet-targets process runs"
            );
            // In the pod network: each replica has a VPC address of its node's ENIs.
            for p in &ctl_pods {
                let node = state.nodes.iter().find(|n| n.k8s_name == p.node).unwrap();
                let ip = p.ip.unwrap();
                assert!(
                    eni_of(&describe_node_enis(lab, node), ip).is_some(),
                    "controller pod {} ({ip}) has no address of {}'s ENIs",
                    p.name,
                    node.name
                );
                assert_ne!(
                    ip.to_string(),
                    node.primary_ip,
                    "{} runs in the host network",
                    p.name
                );
            }
            let d = k
                .json(&["get", "deployment", "-n", NAMESPACE, RELEASE])
                .unwrap();
            let spec = &d["spec"]["template"]["spec"];
            assert_eq!(spec["serviceAccountName"], RELEASE);
            assert!(spec["hostNetwork"].is_null() || spec["hostNetwork"] == false);
            assert_eq!(
                spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
                true
            );
            // Its service account can do what the controller needs and no more.
            let sa = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
            let can = |question: &[&str]| {
                let mut args = vec!["auth", "can-i"];
                args.extend_from_slice(question);
                args.extend(["--as", &sa]);
                let out = k.output(&args, None).unwrap();
                String::from_utf8_lossy(&out.stdout).trim() == "yes"
            };
            assert!(can(&["patch", "pods", "--subresource=status"]));
            assert!(can(&["watch", "targetgroupbindings.elbv2.k8s.aws"]));
            assert!(!can(&["get", "secrets"]), "the controller may read Secrets");
            assert!(!can(&["delete", "pods"]), "the controller may delete pods");

            // A Deployment + Service + TargetGroupBinding (the CRD came with the chart): the
            // leader registers the pods' IPs, their targets turn healthy, the gates True.
            let t1 = Instant::now();
            k.apply(&gated_httpd_manifest("web", 4, 1, &l.target_group.arn))
                .unwrap();
            let web = wait_serving(lab, 4, Duration::from_secs(180));
            eprintln!(
                "4 pods serving through the load balancer {:?} after apply",
                t1.elapsed()
            );
            let ips: BTreeSet<Ipv4Addr> = web.iter().filter_map(|p| p.ip).collect();
            assert_eq!(registered(lab), ips);
            let nodes: BTreeSet<&str> = web.iter().map(|p| p.node.as_str()).collect();
            assert_eq!(nodes.len(), 2, "web pods on two nodes: {web:?}");

            // The ELBv2 calls came from the leader pod's VPC address (no NAT between the pod
            // network and the lab cloud), and none from the follower.
            let leader_ip = ctl_pods.iter().find(|p| p.name == leader).unwrap().ip;
            let follower_ip = ctl_pods.iter().find(|p| p.name != leader).unwrap().ip;
            let records = lab.cloud().requests().unwrap().records;
            let elb: Vec<_> = records.iter().filter(|r| r.api == Api::Elbv2).collect();
            let registers: Vec<_> = elb
                .iter()
                .filter(|r| r.action == "RegisterTargets")
                .collect();
            assert!(!registers.is_empty());
            for r in &registers {
                assert_eq!(
                    r.source,
                    leader_ip.map(Into::into),
                    "RegisterTargets from {:?}, not the leader {leader} ({leader_ip:?})",
                    r.source
                );
            }
            assert!(
                !elb.iter()
                    .any(|r| r.source.is_some() && r.source == follower_ip.map(Into::into)),
                "the follower called ELBv2"
            );

            // Traffic through the load balancer reaches all four pods.
            let r = lab
                .lbs()
                .load("web", "n1", "/", 4, Duration::from_secs(3))
                .unwrap();
            assert_eq!(r.errors, 0, "{r:?}");
            assert_eq!(r.by_responder.len(), 4, "all four answer: {r:?}");

            // The leader's pod deleted: on SIGTERM it stops and releases the Lease, the follower
            // takes it over and serves a scale-up.
            k.run(&["delete", "pod", "-n", NAMESPACE, &leader, "--wait=false"])
                .unwrap();
            let t2 = Instant::now();
            wait_until(
                "the follower holds the Lease",
                Duration::from_secs(LEASE + 30),
                || chart.leader().unwrap().is_some_and(|l| l != leader),
            );
            let failover = t2.elapsed();
            eprintln!("failover: new leader {failover:?} after the delete");
            // The deleted leader released the Lease on SIGTERM: the follower did not wait it out.
            assert!(
                failover < Duration::from_secs(LEASE),
                "failover took {failover:?}, the lease is {LEASE} s: was it released?"
            );
            scale(lab, 6);
            let web = wait_serving(lab, 6, Duration::from_secs(180));
            let ips: BTreeSet<Ipv4Addr> = web.iter().filter_map(|p| p.ip).collect();
            assert_eq!(registered(lab), ips);
            let (_, new_leader) = chart.wait_ready(2, Duration::from_secs(120)).unwrap();
            assert_ne!(new_leader, leader);
        },
    );
}
