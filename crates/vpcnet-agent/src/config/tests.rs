use super::*;

fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_map(&m)
}

fn err(pairs: &[(&str, &str)]) -> ConfigError {
    cfg(pairs).expect_err("should be rejected")
}

#[test]
fn defaults_match_the_vpc_cni() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.warm_eni_target, 1);
    assert_eq!(
        (
            c.warm_ip_target,
            c.minimum_ip_target,
            c.warm_prefix_target,
            c.max_eni
        ),
        (None, None, None, None)
    );
    assert!(!c.enable_prefix_delegation && !c.custom_network_cfg && !c.external_snat);
    assert_eq!(c.eni_config_label_def, "k8s.amazonaws.com/eniConfig");
    assert_eq!(c.eni_config_annotation_def, "k8s.amazonaws.com/eniConfig");
    assert!(c.exclude_snat_cidrs.is_empty());
    assert_eq!(c.randomize_snat, RandomizeSnat::Prng);
    assert_eq!(c.eni_mtu, 9001);
    assert_eq!(c.veth_prefix, "eni");
    assert_eq!(c.plugin_log_file, "/var/log/aws-routed-eni/plugin.log");
    assert_eq!(c.plugin_log_level, "Debug");
    assert_eq!(
        cfg(&[("AWS_VPC_K8S_PLUGIN_LOG_LEVEL", "warning")])
            .unwrap()
            .plugin_log_level,
        "Warn"
    );
    assert!(c.node_port_support);
    assert_eq!(c.cluster_endpoint, "");
    assert_eq!(c.cluster_name, "");
    assert!(c.additional_eni_tags.is_empty());
    assert!(!c.disable_introspection && !c.disable_metrics && !c.disable_leaked_eni_cleanup);
    assert_eq!(
        c.introspection_bind_address,
        BindAddress::Tcp("127.0.0.1:61679".parse().unwrap())
    );
    assert_eq!(
        c.metrics_bind_address,
        BindAddress::Tcp("0.0.0.0:61678".parse().unwrap())
    );
    assert_eq!(c.ip_cooldown(), Duration::from_secs(30));
    assert_eq!(c.log_level, "DEBUG");
    assert_eq!(c.log_file, "/host/var/log/aws-routed-eni/ipamd.log");
    assert_eq!(c.agent_socket, PathBuf::from("/var/run/vpcnet/agent.sock"));
    assert_eq!(
        c.checkpoint_path,
        PathBuf::from("/var/run/vpcnet/ipam.json")
    );
    assert_eq!(
        c.cni_conflist,
        PathBuf::from("/etc/cni/net.d/10-vpcnet.conflist")
    );
    assert_eq!(c.reconcile_interval(), Duration::from_secs(30));
    assert!(c.node_datapath);
    assert_eq!(
        (c.ec2.describe_bucket_size, c.ec2.mutating_bucket_size),
        (100, 20)
    );
    assert_eq!(
        (c.ec2.describe_refill_per_sec, c.ec2.mutating_refill_per_sec),
        (20.0, 5.0)
    );
    assert_eq!(c.ec2.call_timeout_secs, 30);
    assert_eq!(
        c.ec2_call_settings().pace,
        vpcnet_ec2::PaceConfig {
            base: Duration::from_secs(1),
            max: Duration::from_secs(5),
        }
    );
    assert!(!c.uses_ip_targets());
    assert_eq!(Config::default(), c);
}

#[test]
fn values_are_read() {
    let c = cfg(&[
        ("WARM_ENI_TARGET", "0"),
        ("WARM_IP_TARGET", "5"),
        ("MINIMUM_IP_TARGET", "10"),
        ("WARM_PREFIX_TARGET", "2"),
        ("ENABLE_PREFIX_DELEGATION", "true"),
        ("MAX_ENI", "3"),
        ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "1"),
        ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
        ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "True"),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            "10.1.0.0/16, 192.168.0.0/24",
        ),
        ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "hashrandom"),
        ("AWS_VPC_ENI_MTU", "1500"),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "vpc"),
        ("CLUSTER_ENDPOINT", "https://api.example:443"),
        ("CLUSTER_NAME", "prod"),
        ("ADDITIONAL_ENI_TAGS", r#"{"team":"net"}"#),
        (
            "INTROSPECTION_BIND_ADDRESS",
            "unix:/run/vpcnet/introspect.sock",
        ),
        ("VPCNET_METRICS_BIND_ADDRESS", "127.0.0.1:9000"),
        ("IP_COOLDOWN_PERIOD", "0"),
        ("AWS_VPC_K8S_CNI_LOGLEVEL", "info"),
        ("AWS_VPC_K8S_CNI_LOG_FILE", "Stdout"),
        ("VPCNET_AGENT_SOCKET", "/tmp/a.sock"),
        ("VPCNET_RECONCILE_INTERVAL", "5"),
        ("VPCNET_NODE_DATAPATH", "false"),
        ("VPCNET_EC2_MUTATING_BUCKET_SIZE", "7"),
        ("VPCNET_EC2_MUTATING_REFILL_RATE", "0.5"),
        ("AWS_EC2_ENDPOINT", "http://127.0.0.1:5000"),
    ])
    .unwrap();
    assert_eq!(c.warm_eni_target, 0);
    assert_eq!(
        (
            c.warm_ip_target,
            c.minimum_ip_target,
            c.warm_prefix_target,
            c.max_eni
        ),
        (Some(5), Some(10), Some(2), Some(3))
    );
    assert!(
        c.enable_prefix_delegation
            && c.custom_network_cfg
            && c.external_snat
            && c.uses_ip_targets()
    );
    assert_eq!(c.eni_config_label_def, "topology.kubernetes.io/zone");
    assert_eq!(c.exclude_snat_cidrs.len(), 2);
    assert_eq!(c.randomize_snat, RandomizeSnat::Hashrandom);
    assert_eq!((c.eni_mtu, c.veth_prefix.as_str()), (1500, "vpc"));
    assert_eq!(
        c.additional_eni_tags.get("team").map(String::as_str),
        Some("net")
    );
    assert_eq!(
        c.introspection_bind_address,
        BindAddress::Unix("/run/vpcnet/introspect.sock".into())
    );
    assert_eq!(c.ip_cooldown(), Duration::ZERO);
    assert_eq!(c.log_level, "INFO");
    assert_eq!(c.log_file, "Stdout");
    assert_eq!(
        cfg(&[("AWS_VPC_K8S_CNI_LOG_FILE", "/var/log/x/ipamd.log")])
            .unwrap()
            .log_file,
        "/var/log/x/ipamd.log"
    );
    assert!(!c.node_datapath);
    let s = c.ec2_call_settings();
    assert_eq!(
        s.mutating_bucket,
        vpcnet_ec2::BucketConfig {
            capacity: 7,
            refill_per_sec: 0.5
        }
    );
    assert_eq!(s.describe_bucket, vpcnet_ec2::BucketConfig::DESCRIBE);
    assert_eq!(c.ec2.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
}

#[test]
fn non_positive_targets_mean_unset() {
    for v in ["0", "-1", "-100"] {
        let c = cfg(&[
            ("WARM_IP_TARGET", v),
            ("MINIMUM_IP_TARGET", v),
            ("WARM_PREFIX_TARGET", v),
            ("MAX_ENI", v),
        ])
        .unwrap();
        assert_eq!(
            (
                c.warm_ip_target,
                c.minimum_ip_target,
                c.warm_prefix_target,
                c.max_eni
            ),
            (None, None, None, None)
        );
    }
}

#[test]
fn empty_values_mean_unset() {
    let c = cfg(&[
        ("WARM_ENI_TARGET", ""),
        ("AWS_VPC_ENI_MTU", " "),
        ("DISABLE_METRICS", ""),
    ])
    .unwrap();
    assert_eq!(
        (c.warm_eni_target, c.eni_mtu, c.disable_metrics),
        (1, 9001, false)
    );
}

#[test]
fn boolean_spellings_of_go_parsebool() {
    for v in ["1", "t", "T", "TRUE", "true", "True"] {
        assert!(
            cfg(&[("DISABLE_METRICS", v)]).unwrap().disable_metrics,
            "{v}"
        );
    }
    for v in ["0", "f", "F", "FALSE", "false", "False"] {
        assert!(
            !cfg(&[("AWS_VPC_CNI_NODE_PORT_SUPPORT", v)])
                .unwrap()
                .node_port_support,
            "{v}"
        );
    }
    for v in ["yes", "no", "on", "tRuE", "2"] {
        let e = err(&[("ENABLE_PREFIX_DELEGATION", v)]);
        assert_eq!(e.var, "ENABLE_PREFIX_DELEGATION");
        assert_eq!(e.value, v);
        assert!(e.accepted.contains("true, false"), "{e}");
    }
}

#[test]
fn every_invalid_value_names_variable_value_and_accepted_values() {
    let cases: &[(&str, &str, &str)] = &[
        ("WARM_ENI_TARGET", "one", "integer"),
        ("WARM_ENI_TARGET", "-1", "≥ 0"),
        ("WARM_IP_TARGET", "5.5", "integer"),
        ("MINIMUM_IP_TARGET", "x", "integer"),
        ("WARM_PREFIX_TARGET", "1e3", "integer"),
        ("MAX_ENI", "99999999999", "up to"),
        ("AWS_VPC_ENI_MTU", "575", "576 to 9001"),
        ("AWS_VPC_ENI_MTU", "9002", "576 to 9001"),
        ("AWS_VPC_ENI_MTU", "jumbo", "integer"),
        (
            "AWS_VPC_K8S_CNI_RANDOMIZESNAT",
            "random",
            "none, hashrandom, prng",
        ),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            "10.0.0.0/8,bogus",
            "IPv4 CIDRs",
        ),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            "10.0.0.1",
            "IPv4 CIDRs",
        ),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "toolong", "1 to 4 characters"),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "eth", "reserved"),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "lo", "reserved"),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "a/b", "1 to 4 characters"),
        (
            "AWS_VPC_K8S_PLUGIN_LOG_FILE",
            "plugin.log",
            "absolute file path",
        ),
        (
            "AWS_VPC_K8S_PLUGIN_LOG_LEVEL",
            "verbose",
            "Debug, Info, Warn, Error",
        ),
        ("ADDITIONAL_ENI_TAGS", "team=net", "JSON object"),
        (
            "ADDITIONAL_ENI_TAGS",
            r#"{"k8s.amazonaws.com/x":"y"}"#,
            "without k8s.amazonaws.com",
        ),
        ("ADDITIONAL_ENI_TAGS", r#"{"a": 1}"#, "JSON object"),
        ("INTROSPECTION_BIND_ADDRESS", "localhost", "host:port"),
        (
            "INTROSPECTION_BIND_ADDRESS",
            "unix:relative.sock",
            "unix:/path",
        ),
        ("VPCNET_METRICS_BIND_ADDRESS", ":99999", "host:port"),
        ("IP_COOLDOWN_PERIOD", "-5", "0 to 86400"),
        ("IP_COOLDOWN_PERIOD", "30s", "integer"),
        ("AWS_VPC_K8S_CNI_LOGLEVEL", "TRACE", "DEBUG, INFO"),
        (
            "AWS_VPC_K8S_CNI_LOG_FILE",
            "ipamd.log",
            "absolute file path",
        ),
        ("AWS_VPC_K8S_CNI_LOG_FILE", "journal", "`stdout`, `stderr`"),
        ("VPCNET_AGENT_SOCKET", "agent.sock", "absolute path"),
        ("VPCNET_CHECKPOINT_PATH", "ipam.json", "absolute path"),
        ("VPCNET_CNI_CONFLIST", "net.d/x", "absolute path"),
        ("VPCNET_RECONCILE_INTERVAL", "0", "1 to 86400"),
        ("VPCNET_NODE_DATAPATH", "maybe", "true, false"),
        ("VPCNET_EC2_MUTATING_BUCKET_SIZE", "0", "1 to 10000"),
        ("VPCNET_EC2_DESCRIBE_REFILL_RATE", "0", "> 0"),
        ("VPCNET_EC2_MUTATING_REFILL_RATE", "fast", "> 0"),
        ("VPCNET_EC2_CALL_TIMEOUT", "0", "1 to 3600"),
        ("VPCNET_EC2_THROTTLE_PACE_BASE_MS", "90000", "0 to 60000"),
        ("VPCNET_EC2_THROTTLE_PACE_MAX_MS", "1s", "integer"),
        ("AWS_EC2_ENDPOINT", "ec2.local", "URL"),
    ];
    for (var, value, accepted) in cases {
        let e = err(&[(var, value)]);
        assert_eq!(e.var, *var, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(var), "{msg}");
        assert_eq!(e.value, value.trim(), "{msg}");
        assert!(
            msg.contains(&format!("{:?}", value.trim())),
            "message must quote the value: {msg}"
        );
        assert!(
            e.accepted.contains(accepted),
            "{var}={value}: accepted {:?} lacks {accepted:?}",
            e.accepted
        );
    }
}

#[test]
fn env_settings_round_trip() {
    let c = cfg(&[
        ("WARM_IP_TARGET", "5"),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            "10.1.0.0/16,192.168.0.0/24",
        ),
        ("ADDITIONAL_ENI_TAGS", r#"{"a":"b"}"#),
        ("INTROSPECTION_BIND_ADDRESS", "unix:/run/x.sock"),
        ("CLUSTER_ENDPOINT", "https://k8s:6443"),
    ])
    .unwrap();
    let settings = c.env_settings();
    assert_eq!(settings["WARM_IP_TARGET"], "5");
    assert_eq!(settings["MINIMUM_IP_TARGET"], "");
    let again: HashMap<String, String> = settings
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(Config::from_map(&again).unwrap(), c);
}

#[test]
fn serializes_for_env_settings() {
    let json = serde_json::to_value(Config::default()).unwrap();
    assert_eq!(json["warm_eni_target"], 1);
    assert_eq!(json["randomize_snat"], "prng");
    assert_eq!(json["metrics_bind_address"], "0.0.0.0:61678");
    assert_eq!(json["ec2"]["mutating_bucket_size"], 20);
}

#[test]
fn network_policy_settings_parse_and_contradictions_are_refused() {
    let c = cfg(&[]).unwrap();
    assert!(!c.enable_network_policy);
    assert_eq!(c.network_policy_enforcing_mode, PolicyMode::Standard);
    for (mode, want) in [
        ("standard", PolicyMode::Standard),
        ("none", PolicyMode::Standard),
        ("strict", PolicyMode::Strict),
    ] {
        let c = cfg(&[
            ("VPCNET_ENABLE_NETWORK_POLICY", "true"),
            ("NETWORK_POLICY_ENFORCING_MODE", mode),
        ])
        .unwrap();
        assert!(c.enable_network_policy);
        assert_eq!(c.network_policy_enforcing_mode, want, "{mode}");
    }
    let e = err(&[("NETWORK_POLICY_ENFORCING_MODE", "loose")]);
    assert_eq!(e.first.var, "NETWORK_POLICY_ENFORCING_MODE");
    assert!(e.to_string().contains("standard, strict"), "{e}");
    // strict without enforcement: every pod would be open, not denied.
    let e = err(&[("NETWORK_POLICY_ENFORCING_MODE", "strict")]);
    assert!(e.first.refused, "{e}");
    assert!(
        e.first
            .accepted
            .contains("VPCNET_ENABLE_NETWORK_POLICY=true"),
        "{e}"
    );
    // Enforcement lives in the node datapath.
    let e = err(&[
        ("VPCNET_ENABLE_NETWORK_POLICY", "true"),
        ("VPCNET_NODE_DATAPATH", "false"),
    ]);
    assert_eq!(e.first.var, "VPCNET_ENABLE_NETWORK_POLICY");
    assert!(e.first.problem.contains("nftables"), "{e}");
}

#[test]
fn policy_event_logs_need_enforcement_and_default_to_the_node_agents_file() {
    let c = cfg(&[]).unwrap();
    assert!(!c.policy_event_logs);
    assert_eq!(
        c.policy_event_log_file,
        "/host/var/log/aws-routed-eni/network-policy-agent.log"
    );
    let c = cfg(&[
        ("VPCNET_ENABLE_NETWORK_POLICY", "true"),
        ("VPCNET_POLICY_EVENT_LOGS", "true"),
        ("VPCNET_POLICY_EVENT_LOG_FILE", "stdout"),
    ])
    .unwrap();
    assert!(c.policy_event_logs);
    assert_eq!(
        crate::options_from_config(&c)
            .unwrap()
            .policy_event_log
            .as_deref(),
        Some("stdout")
    );
    let e = err(&[("VPCNET_POLICY_EVENT_LOGS", "true")]);
    assert_eq!(e.first.var, "VPCNET_POLICY_EVENT_LOGS");
    assert!(e.first.refused, "{e}");
    assert!(
        e.first
            .accepted
            .contains("VPCNET_ENABLE_NETWORK_POLICY=true")
            && e.first
                .accepted
                .contains("nodeAgent.enablePolicyEventLogs=false"),
        "{e}"
    );
    let e = err(&[
        ("VPCNET_ENABLE_NETWORK_POLICY", "true"),
        ("VPCNET_POLICY_EVENT_LOG_FILE", "relative.log"),
    ]);
    assert_eq!(e.first.var, "VPCNET_POLICY_EVENT_LOG_FILE");
}

#[test]
fn the_aws_node_agent_setting_parses_and_refuses_vpcnet_enforcement_beside_it() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.network_policy_agent, PolicyAgent::Vpcnet);
    assert_eq!(
        c.ipamd_socket,
        PathBuf::from("/var/run/aws-node/ipamd.sock")
    );
    let c = cfg(&[
        ("VPCNET_NETWORK_POLICY_AGENT", "aws-eks-nodeagent"),
        ("VPCNET_IPAMD_SOCKET", "/tmp/ipamd.sock"),
        // Strict is enforced by the node agent: no conflict.
        ("NETWORK_POLICY_ENFORCING_MODE", "strict"),
    ])
    .unwrap();
    assert_eq!(c.network_policy_agent, PolicyAgent::AwsEksNodeagent);
    assert_eq!(c.ipamd_socket, PathBuf::from("/tmp/ipamd.sock"));
    let e = err(&[("VPCNET_NETWORK_POLICY_AGENT", "cilium")]);
    assert!(e.to_string().contains("vpcnet, aws-eks-nodeagent"), "{e}");
    let e = err(&[
        ("VPCNET_NETWORK_POLICY_AGENT", "aws-eks-nodeagent"),
        ("VPCNET_ENABLE_NETWORK_POLICY", "true"),
    ]);
    let text = e.to_string();
    assert!(
        text.contains("VPCNET_ENABLE_NETWORK_POLICY")
            && text.contains("set VPCNET_ENABLE_NETWORK_POLICY=false"),
        "{text}"
    );
    let e = err(&[("VPCNET_IPAMD_SOCKET", "ipamd.sock")]);
    assert!(e.to_string().contains("VPCNET_IPAMD_SOCKET"), "{e}");
}

#[test]
fn a_throttle_pace_max_below_its_base_is_refused_capped_by_the_call_deadline_and_zero_is_off() {
    let e = err(&[
        ("VPCNET_EC2_THROTTLE_PACE_BASE_MS", "5000"),
        ("VPCNET_EC2_THROTTLE_PACE_MAX_MS", "2000"),
    ]);
    assert_eq!(e.var, "VPCNET_EC2_THROTTLE_PACE_MAX_MS", "{e}");
    assert!(
        e.to_string()
            .contains("VPCNET_EC2_THROTTLE_PACE_BASE_MS=5000"),
        "{e}"
    );
    let short = cfg(&[("VPCNET_EC2_CALL_TIMEOUT", "4")]).unwrap();
    assert_eq!(short.ec2_call_settings().pace.max, Duration::from_secs(2));
    let off = cfg(&[("VPCNET_EC2_THROTTLE_PACE_BASE_MS", "0")]).unwrap();
    assert!(!off.ec2_call_settings().pace.is_on());
}
