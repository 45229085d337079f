//! The default render's shape: the `aws-node`-shaped DaemonSet, the agent's least-privilege
//! ClusterRole, and the vpcnet-targets Deployment with leader election and its RBAC.

use serde_yaml::Value;
use vpcnet_charts::{find, Chart, Render};

fn strs(v: &Value) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("a list: {v:?}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Rules as (apiGroups, resources, verbs, resourceNames), each list joined by commas.
fn rules(role: &Value) -> Vec<String> {
    role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let names = if r["resourceNames"].is_null() {
                String::new()
            } else {
                format!(" names={}", strs(&r["resourceNames"]).join(","))
            };
            format!(
                "{} {} {}{names}",
                strs(&r["apiGroups"]).join(","),
                strs(&r["resources"]).join(","),
                strs(&r["verbs"]).join(",")
            )
        })
        .collect()
}

fn node_docs(r: Render) -> Vec<Value> {
    r.documents().unwrap_or_else(|e| panic!("{e}"))
}

fn daemonset(docs: &[Value]) -> &Value {
    find(docs, "DaemonSet", "aws-node").expect("DaemonSet aws-node")
}

fn container<'a>(pod: &'a Value, list: &str, name: &str) -> &'a Value {
    pod[list]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{list} {name}"))
}

fn env_value<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
}

#[test]
fn the_daemonset_is_shaped_like_aws_node() {
    let docs = node_docs(Render::new(Chart::Vpcnet));
    let ds = daemonset(&docs);
    assert_eq!(ds["metadata"]["namespace"], "kube-system");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["serviceAccountName"], "aws-node");
    assert!(
        pod["dnsPolicy"].is_null(),
        "the node's resolver, not CoreDNS (which needs the agent)"
    );
    let tolerations = pod["tolerations"].as_sequence().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0]["operator"], "Exists");
    assert!(tolerations[0]["key"].is_null() && tolerations[0]["effect"].is_null());
    assert_eq!(
        ds["spec"]["template"]["metadata"]["labels"]["k8s-app"],
        "aws-node"
    );

    let agent = container(pod, "containers", "aws-node");
    assert_eq!(agent["image"], "localhost/vpcnet/vpcnet-node:0.1.0");
    assert!(
        agent["command"].is_null(),
        "the image's default command, vpcnet-agent"
    );
    assert_eq!(agent["securityContext"]["privileged"], true);
    assert_eq!(agent["ports"][0]["containerPort"], 61678);
    assert_eq!(agent["ports"][0]["name"], "metrics");
    let node_name = env_value(agent, "MY_NODE_NAME").expect("MY_NODE_NAME");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        let p = &agent[probe];
        assert_eq!(
            strs(&p["exec"]["command"]),
            ["/usr/bin/vpcnet", "inspect", "health", "--timeout", "5"],
            "{probe}"
        );
        let timeout = p["timeoutSeconds"].as_u64().unwrap();
        assert!(
            timeout > 5,
            "{probe}: kubelet's timeout {timeout} s must exceed the command's own 5 s deadline"
        );
    }

    // host path -> mount path in the agent (and read-only)
    let volumes: Vec<(String, String)> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["hostPath"]["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let host = |name: &str| -> String {
        volumes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("volume {name}"))
    };
    let mounts: Vec<(String, String, bool)> = agent["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| {
            (
                host(m["name"].as_str().unwrap()),
                m["mountPath"].as_str().unwrap().to_string(),
                m["readOnly"] == true,
            )
        })
        .collect();
    let want = [
        ("/etc/cni/net.d", "/etc/cni/net.d", false),
        (
            "/var/log/aws-routed-eni",
            "/host/var/log/aws-routed-eni",
            false,
        ),
        ("/var/run/vpcnet", "/var/run/vpcnet", false),
        ("/var/run/aws-node", "/var/run/aws-node", false),
        ("/var/lib/cni", "/var/lib/cni", true),
        ("/run/xtables.lock", "/run/xtables.lock", false),
    ];
    let want: Vec<(String, String, bool)> = want
        .iter()
        .map(|(h, m, ro)| (h.to_string(), m.to_string(), *ro))
        .collect();
    assert_eq!(mounts, want);

    let init = container(pod, "initContainers", "vpcnet-init");
    assert_eq!(init["image"], agent["image"], "one node image");
    assert_eq!(strs(&init["command"]), ["/usr/bin/vpcnet-init"]);
    assert_eq!(init["securityContext"]["privileged"], true);
    let init_mounts = init["volumeMounts"].as_sequence().unwrap();
    assert_eq!(init_mounts.len(), 1);
    assert_eq!(
        host(init_mounts[0]["name"].as_str().unwrap()),
        "/opt/cni/bin"
    );
    assert_eq!(
        init_mounts[0]["mountPath"], "/host/opt/cni/bin",
        "vpcnet-init's HOST_CNI_BIN_PATH default"
    );
    assert_eq!(
        env_value(init, "DISABLE_TCP_EARLY_DEMUX").unwrap()["value"],
        "false"
    );
    assert!(
        env_value(agent, "DISABLE_TCP_EARLY_DEMUX").is_none(),
        "an init setting; the agent refuses it"
    );
}

#[test]
fn the_agents_cluster_role_is_least_privilege() {
    let docs = node_docs(Render::new(Chart::Vpcnet));
    let role = find(&docs, "ClusterRole", "aws-node").unwrap();
    assert_eq!(
        rules(role),
        [
            " nodes get,list,watch",
            " nodes/status patch",
            "crd.k8s.amazonaws.com eniconfigs list,watch",
            "events.k8s.io events create,patch",
        ]
    );
    let binding = find(&docs, "ClusterRoleBinding", "aws-node").unwrap();
    assert_eq!(binding["subjects"][0]["name"], "aws-node");
    assert_eq!(binding["subjects"][0]["namespace"], "kube-system");
    // ANNOTATE_POD_IP (any of the VPC CNI's spellings of true) adds pods get and patch.
    for t in ["true", "1", "True"] {
        let docs = node_docs(Render::new(Chart::Vpcnet).set(&format!("env.ANNOTATE_POD_IP={t}")));
        let rules = rules(find(&docs, "ClusterRole", "aws-node").unwrap());
        assert_eq!(rules.last().unwrap(), " pods get,patch", "{t}");
    }
    let docs = node_docs(Render::new(Chart::Vpcnet).set("env.ANNOTATE_POD_IP=false"));
    assert_eq!(
        rules(find(&docs, "ClusterRole", "aws-node").unwrap()).len(),
        4
    );
}

#[test]
fn enable_network_policy_sets_the_agent_variable_and_grants_its_watches() {
    let agent_env = |docs: &[Value]| -> Vec<String> {
        let ds = daemonset(docs);
        let agent = container(&ds["spec"]["template"]["spec"], "containers", "aws-node");
        agent["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}={}",
                    e["name"].as_str().unwrap(),
                    e["value"].as_str().unwrap_or("<from>")
                )
            })
            .collect()
    };
    let on = node_docs(Render::new(Chart::Vpcnet).set("enableNetworkPolicy=true"));
    assert!(agent_env(&on).contains(&"VPCNET_ENABLE_NETWORK_POLICY=true".to_string()));
    let r = rules(find(&on, "ClusterRole", "aws-node").unwrap());
    for want in [
        " pods get,list,watch",
        " namespaces list,watch",
        "networking.k8s.io networkpolicies list,watch",
    ] {
        assert!(r.contains(&want.to_string()), "{want} in {r:?}");
    }
    // With ANNOTATE_POD_IP the pods rule is one, with both needs.
    let both = node_docs(
        Render::new(Chart::Vpcnet)
            .set("enableNetworkPolicy=true")
            .set("env.ANNOTATE_POD_IP=true"),
    );
    let r = rules(find(&both, "ClusterRole", "aws-node").unwrap());
    assert_eq!(
        r.iter().filter(|x| x.contains(" pods ")).count(),
        1,
        "{r:?}"
    );
    assert!(
        r.contains(&" pods get,list,watch,patch".to_string()),
        "{r:?}"
    );
    // Policy event logs: the node agent's value, with enforcement; CloudWatch "false" is
    // accepted as the VPC CNI chart's default.
    let logs = node_docs(
        Render::new(Chart::Vpcnet)
            .set("enableNetworkPolicy=true")
            .set("nodeAgent.enablePolicyEventLogs=true")
            .set_json("nodeAgent.enableCloudWatchLogs=\"false\""),
    );
    assert!(agent_env(&logs).contains(&"VPCNET_POLICY_EVENT_LOGS=true".to_string()));
    assert!(!agent_env(&on)
        .iter()
        .any(|e| e.starts_with("VPCNET_POLICY_EVENT_LOGS")));
    // Off by default, and off with the VPC CNI's node agent disabled (as in its chart).
    for docs in [
        node_docs(Render::new(Chart::Vpcnet)),
        node_docs(
            Render::new(Chart::Vpcnet)
                .set("enableNetworkPolicy=true")
                .set("nodeAgent.enabled=false"),
        ),
    ] {
        assert!(!agent_env(&docs)
            .iter()
            .any(|e| e.starts_with("VPCNET_ENABLE_NETWORK_POLICY")));
        let r = rules(find(&docs, "ClusterRole", "aws-node").unwrap());
        assert!(!r.iter().any(|x| x.contains("networkpolicies")), "{r:?}");
    }
}

#[test]
fn values_carry_into_the_daemonset() {
    let docs = node_docs(
        Render::new(Chart::Vpcnet)
            .set("image.overrideRepository=111122223333.dkr.ecr.us-west-2.amazonaws.com/vpcnet/vpcnet-node")
            .set("image.tag=1.2.3")
            .set("env.ENABLE_BANDWIDTH_PLUGIN=true")
            .set("env.INTROSPECTION_BIND_ADDRESS=127.0.0.1:61680")
            .set("originalMatchLabels=true")
            .set("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::111122223333:role/vpcnet")
            .set("podLabels.team=net")
            .set("podMonitor.create=true")
            .set("eniConfig.create=true")
            .set_json("eniConfig.subnets={\"us-west-2a\":{\"id\":\"subnet-0a\",\"securityGroups\":[\"sg-01\"]}}")
            .set_json("extraEnv=[{\"name\":\"FROM_SECRET\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"s\",\"key\":\"k\"}}}]"),
    );
    let ds = daemonset(&docs);
    let pod = &ds["spec"]["template"]["spec"];
    let agent = container(pod, "containers", "aws-node");
    let init = container(pod, "initContainers", "vpcnet-init");
    let image = "111122223333.dkr.ecr.us-west-2.amazonaws.com/vpcnet/vpcnet-node:1.2.3";
    assert_eq!(agent["image"], image);
    assert_eq!(init["image"], image);
    assert_eq!(
        env_value(init, "ENABLE_BANDWIDTH_PLUGIN").unwrap()["value"],
        "true",
        "the init container installs the bandwidth plugin the agent chains"
    );
    assert!(env_value(agent, "FROM_SECRET").is_some());
    assert_eq!(
        strs(&agent["livenessProbe"]["exec"]["command"]),
        [
            "/usr/bin/vpcnet",
            "inspect",
            "health",
            "--timeout",
            "5",
            "--endpoint",
            "127.0.0.1:61680"
        ]
    );
    let selector = ds["spec"]["selector"]["matchLabels"].as_mapping().unwrap();
    assert_eq!(selector.len(), 1, "originalMatchLabels: k8s-app alone");
    assert_eq!(ds["spec"]["selector"]["matchLabels"]["k8s-app"], "aws-node");
    assert_eq!(ds["spec"]["template"]["metadata"]["labels"]["team"], "net");
    let sa = find(&docs, "ServiceAccount", "aws-node").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/vpcnet"
    );
    let eni = find(&docs, "ENIConfig", "us-west-2a").unwrap();
    assert_eq!(eni["apiVersion"], "crd.k8s.amazonaws.com/v1alpha1");
    assert_eq!(eni["spec"]["subnet"], "subnet-0a");
    assert_eq!(strs(&eni["spec"]["securityGroups"]), ["sg-01"]);
    let pm = find(&docs, "PodMonitor", "aws-node").unwrap();
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
}

#[test]
fn the_targets_deployment_elects_a_leader_as_non_root() {
    let docs = Render::new(Chart::Targets).documents().unwrap();
    let d = find(&docs, "Deployment", "vpcnet-targets").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let c = container(pod, "containers", "vpcnet-targets");
    assert_eq!(c["image"], "localhost/vpcnet/vpcnet-targets:0.1.0");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(strs(&c["securityContext"]["capabilities"]["drop"]), ["ALL"]);
    let args = strs(&c["args"]);
    for a in [
        "--leader-elect=true",
        "--leader-election-namespace=kube-system",
        "--leader-election-id=vpcnet-targets",
        "--lease-duration-seconds=15",
    ] {
        assert!(args.contains(&a.to_string()), "{a} in {args:?}");
    }
    assert_eq!(
        env_value(c, "POD_NAME").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name",
        "each replica's identity in the Lease"
    );
    assert_eq!(
        rules(find(&docs, "ClusterRole", "vpcnet-targets").unwrap()),
        [
            "elbv2.k8s.aws targetgroupbindings get,list,watch",
            " services,pods,nodes list,watch",
            "discovery.k8s.io endpointslices list,watch",
            "elbv2.k8s.aws targetgroupbindings/status patch",
            " pods/status patch",
            "events.k8s.io events create,patch",
        ]
    );
    let role = find(&docs, "Role", "vpcnet-targets-leader-election").unwrap();
    assert_eq!(role["metadata"]["namespace"], "kube-system");
    assert_eq!(
        rules(role),
        [
            "coordination.k8s.io leases create",
            "coordination.k8s.io leases get,update names=vpcnet-targets",
        ]
    );
    let docs = Render::new(Chart::Targets)
        .set("leaderElection.enabled=false")
        .set("replicaCount=1")
        .documents()
        .unwrap();
    assert!(find(&docs, "Role", "vpcnet-targets-leader-election").is_none());
}
