use super::*;

#[test]
fn every_invalid_variable_is_reported_at_once() {
    let m: HashMap<String, String> = [
        ("WARM_IP_TARGET", "five"),
        ("AWS_VPC_ENI_MTU", "100"),
        ("DISABLE_METRICS", "yes"),
        ("VPCNET_EC2_CALL_TIMEOUT", "0"),
        ("CLUSTER_NAME", "fine"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let e = Config::from_map(&m).unwrap_err();
    let got: Vec<(&str, &str)> = e.all().map(|i| (i.var, i.value.as_str())).collect();
    assert_eq!(
        got,
        [
            ("WARM_IP_TARGET", "five"),
            ("AWS_VPC_ENI_MTU", "100"),
            ("DISABLE_METRICS", "yes"),
            ("VPCNET_EC2_CALL_TIMEOUT", "0"),
        ]
    );
    let msg = e.to_string();
    assert!(msg.starts_with("4 invalid variables:\n"), "{msg}");
    for i in e.all() {
        assert!(msg.contains(&i.to_string()), "{msg}");
        assert!(!i.accepted.is_empty() && !i.problem.is_empty(), "{i}");
    }
    assert_eq!(e.var, "WARM_IP_TARGET");
}

#[test]
fn refused_vpc_cni_settings_are_reported_with_the_invalid_ones() {
    let m: HashMap<String, String> = [
        ("WARM_IP_TARGET", "five"),
        ("ENABLE_IPv6", "true"),
        ("ENABLE_POD_ENI", "false"),
        ("DISABLE_TCP_EARLY_DEMUX", "true"),
        ("POD_MTU", "10000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let e = Config::from_map(&m).unwrap_err();
    let got: Vec<(&str, bool)> = e.all().map(|i| (i.var, i.refused)).collect();
    assert_eq!(
        got,
        [
            ("WARM_IP_TARGET", false),
            ("POD_MTU", false),
            ("DISABLE_TCP_EARLY_DEMUX", true),
            ("ENABLE_IPv6", true),
        ]
    );
    let msg = e.to_string();
    assert!(
        msg.starts_with("4 invalid or refused variables:\n"),
        "{msg}"
    );
    assert!(
        msg.contains("\n  refused ENABLE_IPv6=\"true\": vpcnet has no IPv6 mode yet"),
        "{msg}"
    );
    // A refusal alone reads as its one line.
    let only: HashMap<String, String> = [("ENABLE_IPv6".to_string(), "true".to_string())].into();
    let e = Config::from_map(&only).unwrap_err();
    assert!(
        e.to_string().starts_with("refused ENABLE_IPv6=\"true\": "),
        "{e}"
    );
    // The value that is vpcnet's behaviour starts.
    let ok: HashMap<String, String> = [("ENABLE_IPv6".to_string(), "false".to_string())].into();
    assert_eq!(Config::from_map(&ok).unwrap(), Config::default());
}

#[test]
fn pod_mtu_and_http_timeout_as_the_vpc_cni_reads_them() {
    let c = Config::default();
    assert_eq!((c.pod_mtu, c.ec2.http_timeout_secs), (None, 10));
    assert_eq!(
        c.ec2_call_settings().attempt_timeout,
        Duration::from_secs(10)
    );
    assert!(c.enable_subnet_discovery);
    let m: HashMap<String, String> = [
        ("POD_MTU", "1500"),
        ("HTTP_TIMEOUT", "60"),
        ("VPCNET_EC2_CALL_TIMEOUT", "20"),
        ("ENABLE_SUBNET_DISCOVERY", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = Config::from_map(&m).unwrap();
    assert_eq!(c.pod_mtu, Some(1500));
    assert!(!c.enable_subnet_discovery);
    // An attempt never outlasts the call.
    assert_eq!(
        c.ec2_call_settings().attempt_timeout,
        Duration::from_secs(20)
    );
    for (var, value, accepted) in [
        ("POD_MTU", "575", "576 to 9001, or unset"),
        ("HTTP_TIMEOUT", "5", "10 to 3600"),
    ] {
        let m: HashMap<String, String> = [(var.to_string(), value.to_string())].into();
        let e = Config::from_map(&m).unwrap_err();
        assert_eq!((e.var, e.refused), (var, false));
        assert!(e.accepted.contains(accepted), "{e}");
    }
}

#[test]
fn unknown_variables_exclude_vpcnet_and_vpc_cni_names() {
    let env = [
        "WARM_IP_TARGET",
        "VPCNET_CNI_CONFLIST",
        "ENABLE_SUBNET_DISCOVERY",
        "ENABLE_IPv6",
        "MY_POD_NAME",
        "WARM_IP_TARGTE",
        "AWS_VPC_K8S_CNI_EXTERNAL_SNAT",
        "ENABLE_WINDOWS_IPAM",
        "AWS_REGION",
    ];
    assert_eq!(
        Config::unknown_variables(env),
        [
            "AWS_VPC_K8S_CNI_EXTERNAL_SNAT",
            "ENABLE_WINDOWS_IPAM",
            "WARM_IP_TARGTE"
        ]
    );
}

#[test]
fn declarations_are_unique_and_their_defaults_round_trip() {
    let decls = Config::declarations();
    let vars: std::collections::BTreeSet<&str> = decls.iter().map(|d| d.var).collect();
    assert_eq!(vars.len(), decls.len(), "a variable is declared twice");
    let shown = Config::default().env_settings();
    assert_eq!(
        shown
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        vars,
        "/v1/env-settings lists exactly the declared variables"
    );
    for d in &decls {
        assert!(!d.doc.trim().is_empty(), "{} has no meaning", d.var);
        assert!(!d.accepted.is_empty(), "{} accepts nothing", d.var);
    }
}

#[test]
fn help_lists_every_variable_with_its_default() {
    let help = Config::variables_help();
    for d in Config::declarations() {
        let line = help
            .lines()
            .find(|l| l.split_whitespace().next() == Some(d.var))
            .unwrap_or_else(|| panic!("{} missing from:\n{help}", d.var));
        let default = if d.default.is_empty() {
            "(unset)"
        } else {
            d.default
        };
        assert!(line.trim_end().ends_with(default), "{line}");
    }
    assert!(help.contains("  Warm pool:\n"), "{help}");
}

#[test]
fn docs_are_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let page = std::fs::read_to_string(path).unwrap();
    let want = crate::docs::splice(&page, "settings", &Config::doc_tables())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    crate::docs::check_page(path, &want);
}
