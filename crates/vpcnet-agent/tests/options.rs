//! Environment configuration → agent options.

use std::collections::HashMap;
use std::path::PathBuf;

use vpcnet_agent::config::Config;
use vpcnet_agent::{options_from_config, AgentDeps};

fn cfg(pairs: &[(&str, &str)]) -> Config {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_map(&m).unwrap()
}

#[test]
fn defaults_map_to_the_vpc_cni_contract() {
    let c = cfg(&[]);
    let o = options_from_config(&c).unwrap();
    let d = AgentDeps::from_config(&c);
    assert_eq!(
        o.introspection_addr,
        Some("127.0.0.1:61679".parse().unwrap())
    );
    assert_eq!(o.metrics_addr.map(|a| a.port()), Some(61678));
    assert_eq!(o.socket_path, PathBuf::from("/var/run/vpcnet/agent.sock"));
    assert_eq!(
        o.checkpoint_path,
        PathBuf::from("/var/run/vpcnet/ipam.json")
    );
    assert_eq!(
        o.conflist_path,
        Some(PathBuf::from("/etc/cni/net.d/10-vpcnet.conflist"))
    );
    assert_eq!(o.targets.warm_eni_target, 1);
    assert_eq!(o.cooldown.as_secs(), 30);
    assert!(d.node_network.is_some(), "node datapath on by default");
    assert!(o.sweep_leaked_enis);
}

#[test]
fn unix_binds_disable_flags_and_targets() {
    let c = cfg(&[
        (
            "INTROSPECTION_BIND_ADDRESS",
            "unix:/run/vpcnet/introspection.sock",
        ),
        ("DISABLE_METRICS", "true"),
        ("WARM_IP_TARGET", "5"),
        ("MINIMUM_IP_TARGET", "10"),
        ("IP_COOLDOWN_PERIOD", "7"),
        ("VPCNET_NODE_DATAPATH", "false"),
        ("DISABLE_LEAKED_ENI_CLEANUP", "true"),
    ]);
    let o = options_from_config(&c).unwrap();
    let d = AgentDeps::from_config(&c);
    assert_eq!(o.introspection_addr, None);
    assert_eq!(
        o.introspection_socket,
        Some(PathBuf::from("/run/vpcnet/introspection.sock"))
    );
    assert_eq!((o.metrics_addr, o.metrics_socket), (None, None));
    assert_eq!(
        (o.targets.warm_ip_target, o.targets.minimum_ip_target),
        (Some(5), Some(10))
    );
    assert_eq!(o.cooldown.as_secs(), 7);
    assert!(d.node_network.is_none());
    assert!(!o.sweep_leaked_enis);
    assert!(o
        .env_settings
        .iter()
        .any(|(k, v)| k == "WARM_IP_TARGET" && v == "5"));
}

#[test]
fn snat_and_connmark_settings_reach_the_options() {
    use vpcnet_datapath::firewall::RandomizeSnat;
    let d = options_from_config(&cfg(&[])).unwrap();
    assert!(!d.external_snat && d.node_port_support);
    assert!(d.exclude_snat_cidrs.is_empty());
    assert_eq!(d.randomize_snat, RandomizeSnat::Prng);
    for (value, want) in [
        ("none", RandomizeSnat::None),
        ("hashrandom", RandomizeSnat::Hashrandom),
        ("prng", RandomizeSnat::Prng),
    ] {
        let o = options_from_config(&cfg(&[("AWS_VPC_K8S_CNI_RANDOMIZESNAT", value)])).unwrap();
        assert_eq!(o.randomize_snat, want, "{value}");
    }
    let o = options_from_config(&cfg(&[
        ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "true"),
        (
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS",
            "192.168.0.0/16,172.16.0.0/12",
        ),
        ("AWS_VPC_CNI_NODE_PORT_SUPPORT", "false"),
        ("AWS_VPC_K8S_CNI_VETHPREFIX", "vpc"),
    ]))
    .unwrap();
    assert!(o.external_snat && !o.node_port_support);
    assert_eq!(
        o.exclude_snat_cidrs,
        vec![
            "192.168.0.0/16".parse().unwrap(),
            "172.16.0.0/12".parse().unwrap()
        ]
    );
    assert_eq!(o.conflist.veth_prefix, "vpc");
}

#[test]
fn custom_networking_takes_the_selection_keys() {
    let o = options_from_config(&cfg(&[
        ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
        ("ENI_CONFIG_LABEL_DEF", "topology.kubernetes.io/zone"),
    ]))
    .unwrap();
    let keys = o.custom_networking.expect("custom networking on");
    assert_eq!(keys.annotation, "k8s.amazonaws.com/eniConfig");
    assert_eq!(keys.label, "topology.kubernetes.io/zone");
    let o = options_from_config(&cfg(&[("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "false")])).unwrap();
    assert!(o.custom_networking.is_none());
}

#[test]
fn subnet_discovery_is_on_unless_set_to_false() {
    let on = |pairs: &[(&str, &str)]| options_from_config(&cfg(pairs)).unwrap().subnet_discovery;
    assert!(on(&[]), "the VPC CNI's default: true");
    assert!(on(&[("ENABLE_SUBNET_DISCOVERY", "true")]));
    assert!(!on(&[("ENABLE_SUBNET_DISCOVERY", "false")]));
    // With custom networking the ENIConfig places ENIs (the setting is kept but unused).
    assert!(on(&[("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true")]));
}

#[test]
fn pod_mtu_defaults_to_the_eni_mtu() {
    let o = options_from_config(&cfg(&[("AWS_VPC_ENI_MTU", "1500")])).unwrap();
    assert_eq!((o.mtu, o.pod_mtu), (1500, None));
    let o = options_from_config(&cfg(&[("POD_MTU", "1400")])).unwrap();
    assert_eq!((o.mtu, o.pod_mtu), (9001, Some(1400)));
}

#[test]
fn bandwidth_plugin_and_pod_v6_settings_reach_the_conflist() {
    let o = options_from_config(&cfg(&[])).unwrap();
    assert!(!o.conflist.bandwidth && !o.conflist.disable_pod_v6);
    for (bw, v6) in [("true", "false"), ("false", "true"), ("1", "T")] {
        let o = options_from_config(&cfg(&[
            ("ENABLE_BANDWIDTH_PLUGIN", bw),
            ("DISABLE_POD_V6", v6),
        ]))
        .unwrap();
        let want = |v: &str| vpcnet_agent::config::parse_bool(v).unwrap();
        assert_eq!(
            (o.conflist.bandwidth, o.conflist.disable_pod_v6),
            (want(bw), want(v6)),
            "ENABLE_BANDWIDTH_PLUGIN={bw} DISABLE_POD_V6={v6}"
        );
    }
}
