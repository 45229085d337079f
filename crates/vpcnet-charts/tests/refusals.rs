//! Every value the charts refuse is refused with a message naming the key and the fix: the VPC
//! CNI chart's keys vpcnet does not do (template `fail`s), and shapes the schema rejects.

use vpcnet_charts::{Chart, Error, Render};

/// Renders `chart` with `args` (`--set` unless the entry starts with `json:`), expecting a
/// refusal whose message holds every piece of `want`.
fn refused(chart: Chart, args: &[&str], want: &[&str]) {
    let mut r = Render::new(chart);
    for a in args {
        r = match a.strip_prefix("json:") {
            Some(j) => r.set_json(j),
            None => r.set(a),
        };
    }
    match r.run() {
        Ok(_) => panic!("{args:?} was accepted; expected a refusal naming {want:?}"),
        Err(Error::Helm { stderr, .. }) => {
            for w in want {
                assert!(
                    stderr.contains(w),
                    "{args:?}: {w:?} missing from:\n{stderr}"
                );
            }
        }
        Err(e) => panic!("{args:?}: {e}"),
    }
}

fn node(args: &[&str], want: &[&str]) {
    refused(Chart::Vpcnet, args, want)
}

#[test]
fn ecr_keys_are_refused_naming_override() {
    for block in ["image", "init.image"] {
        for key in ["account", "region", "domain", "endpoint"] {
            let set = format!("{block}.{key}=x");
            let named = format!("vpcnet: {block}.{key} is not supported");
            let fix = format!("set {block}.override");
            node(&[&set], &[&named, &fix, "overrideRepository"]);
        }
    }
}

#[test]
fn init_tag_with_image_override_is_refused() {
    node(
        &["image.override=r/vpcnet-node:v1", "init.image.tag=v2"],
        &["vpcnet: init.image.tag", "set init.image.override"],
    );
}

#[test]
fn the_network_policy_agent_s_own_settings_are_refused() {
    node(
        &["nodeAgent.enabled=true", "nodeAgent.logLevel=debug"],
        &["vpcnet: nodeAgent.logLevel", "remove nodeAgent.logLevel"],
    );
    node(
        &["enableNetworkPolicy=yes"],
        &["vpcnet: enableNetworkPolicy=yes is not valid", "\"true\""],
    );
    // Set by the chart with its RBAC, never through env (with enableNetworkPolicy=false the
    // agent would enforce without the right to watch what it needs).
    for enabled in ["true", "false"] {
        node(
            &[
                &format!("enableNetworkPolicy={enabled}"),
                "env.VPCNET_ENABLE_NETWORK_POLICY=true",
            ],
            &[
                "vpcnet: env.VPCNET_ENABLE_NETWORK_POLICY",
                "remove it from env and set enableNetworkPolicy",
            ],
        );
    }
}

#[test]
fn policy_event_logs_need_enforcement_and_cloudwatch_is_refused() {
    node(
        &[
            "nodeAgent.enableCloudWatchLogs=true",
            "enableNetworkPolicy=true",
        ],
        &[
            "vpcnet: nodeAgent.enableCloudWatchLogs=true is not supported",
            "not to CloudWatch Logs",
            "set it to \"false\"",
        ],
    );
    for args in [
        &["nodeAgent.enablePolicyEventLogs=true"][..],
        &[
            "nodeAgent.enablePolicyEventLogs=true",
            "enableNetworkPolicy=true",
            "nodeAgent.enabled=false",
        ],
    ] {
        node(
            args,
            &[
                "vpcnet: nodeAgent.enablePolicyEventLogs=true needs network policy enforcement",
                "set enableNetworkPolicy=true",
            ],
        );
    }
    node(
        &[
            "enableNetworkPolicy=true",
            "nodeAgent.enablePolicyEventLogs=yes",
        ],
        &["vpcnet: nodeAgent.enablePolicyEventLogs=yes is not valid"],
    );
    node(
        &[
            "enableNetworkPolicy=true",
            "env.VPCNET_POLICY_EVENT_LOGS=true",
        ],
        &[
            "vpcnet: env.VPCNET_POLICY_EVENT_LOGS",
            "set nodeAgent.enablePolicyEventLogs",
        ],
    );
}

#[test]
fn the_aws_node_agent_beside_vpcnet_s_own_enforcement_is_refused() {
    node(
        &[
            "enableNetworkPolicy=true",
            "env.VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent",
        ],
        &[
            "vpcnet: env.VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent",
            "set enableNetworkPolicy=false",
        ],
    );
    // With enforcement off (either way) it renders, into the agent's environment.
    for off in ["enableNetworkPolicy=false", "nodeAgent.enabled=false"] {
        let out = Render::new(Chart::Vpcnet)
            .set("enableNetworkPolicy=true")
            .set(off)
            .set("env.VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent")
            .run()
            .unwrap();
        assert!(
            out.contains("VPCNET_NETWORK_POLICY_AGENT") && out.contains("aws-eks-nodeagent"),
            "{off}"
        );
    }
}

#[test]
fn windows_and_branch_eni_values_are_refused_unless_the_vpc_cni_default() {
    for (set, fix) in [
        ("enableWindowsIpam=true", "set it to false"),
        ("enableWindowsPrefixDelegation=true", "set it to false"),
        ("warmWindowsPrefixTarget=2", "set it to 0"),
        ("warmWindowsIPTarget=5", "set it to 1"),
        ("minimumWindowsIPTarget=9", "set it to 3"),
        ("branchENICooldown=30", "set it to 60"),
    ] {
        let key = format!("vpcnet: {set} is not supported");
        node(&[set], &[&key, fix]);
    }
    // The VPC CNI's defaults are accepted (an operator's old values file carries them).
    Render::new(Chart::Vpcnet)
        .set("enableWindowsIpam=false")
        .set("warmWindowsIPTarget=1")
        .set("branchENICooldown=60")
        .run()
        .unwrap();
}

#[test]
fn a_custom_conflist_is_refused() {
    node(
        &["cniConfig.enabled=true"],
        &["vpcnet: cniConfig.enabled=true", "remove cniConfig", "env"],
    );
    node(
        &["cniConfig.fileContents=conflist"],
        &["vpcnet: cniConfig.fileContents", "remove it"],
    );
}

#[test]
fn env_the_chart_owns_is_refused() {
    node(
        &["env.MY_NODE_NAME=n"],
        &["vpcnet: env.MY_NODE_NAME", "spec.nodeName", "remove it"],
    );
    node(
        &["env.DISABLE_INTROSPECTION=true"],
        &[
            "vpcnet: env.DISABLE_INTROSPECTION=true",
            "probes",
            "remove it",
        ],
    );
    node(
        &["init.env.HOST_CNI_BIN_PATH=/opt/cni/bin"],
        &[
            "vpcnet: init.env.HOST_CNI_BIN_PATH=/opt/cni/bin",
            "remove it",
        ],
    );
}

#[test]
fn chain_settings_that_differ_between_agent_and_init_are_refused() {
    for key in ["ENABLE_BANDWIDTH_PLUGIN", "DISABLE_POD_V6"] {
        let agent = format!("env.{key}=true");
        let init = format!("init.env.{key}=false");
        let named = format!("vpcnet: init.env.{key}=false differs from env.{key}=true");
        let fix = format!("remove init.env.{key}");
        node(&[&agent, &init], &[&named, &fix]);
    }
}

#[test]
fn the_vpc_cni_health_probe_is_refused() {
    for probe in ["livenessProbe", "readinessProbe"] {
        let set = format!("{probe}.exec.command={{/app/grpc-health-probe,-addr=unix:///var/run/aws-node/ipamd.sock}}");
        let named = format!("vpcnet: {probe}.exec.command runs /app/grpc-health-probe");
        let fix = format!("remove {probe}.exec");
        node(&[&set], &[&named, &fix]);
    }
}

#[test]
fn an_unprivileged_agent_is_refused() {
    node(
        &["securityContext.privileged=false"],
        &[
            "vpcnet: securityContext.privileged=false",
            "/proc/sys",
            "remove it",
        ],
    );
}

#[test]
fn eniconfigs_need_their_subnets() {
    node(
        &["eniConfig.create=true"],
        &["vpcnet: eniConfig.create=true needs eniConfig.subnets"],
    );
    node(
        &[
            "eniConfig.create=true",
            "json:eniConfig.subnets={\"us-west-2a\":{\"securityGroups\":[\"sg-1\"]}}",
        ],
        &["us-west-2a", "id"],
    );
}

#[test]
fn the_schema_refuses_unknown_keys_and_wrong_types() {
    node(
        &["imagee.tag=1"],
        &["additional properties 'imagee' not allowed"],
    );
    node(
        &["image.repository=r"],
        &["/image", "'repository' not allowed"],
    );
    node(&["originalMatchLabels=yes"], &["/originalMatchLabels"]);
    node(&["image.pullPolicy=Sometimes"], &["/image/pullPolicy"]);
    node(
        &["json:eniConfig.subnets={\"a\":{\"id\":\"sub-1\"}}"],
        &["/eniConfig/subnets/a/id"],
    );
    refused(Chart::Targets, &["replicas=3"], &["'replicas' not allowed"]);
}

#[test]
fn targets_without_leader_election_run_one_replica() {
    refused(
        Chart::Targets,
        &["leaderElection.enabled=false"],
        &["vpcnet-targets: replicaCount=2", "set replicaCount=1"],
    );
    Render::new(Chart::Targets)
        .set("leaderElection.enabled=false")
        .set("replicaCount=1")
        .run()
        .unwrap();
}
