use super::*;

#[test]
fn go_integers() {
    for (s, n) in [
        ("0x80", Some(128)),
        ("0X80", Some(128)),
        ("128", Some(128)),
        ("0200", Some(128)),
        ("0o200", Some(128)),
        ("0b10000000", Some(128)),
        ("-5", Some(-5)),
        ("", None),
        ("0x", None),
        ("12a", None),
        ("--1", None),
    ] {
        assert_eq!(parse_go_int(s), n, "{s}");
    }
}

#[test]
fn settings_are_sorted_unique_and_explained() {
    assert!(SETTINGS.windows(2).all(|w| w[0].var < w[1].var));
    for s in SETTINGS {
        match s.status {
            Status::Refused { why, instead } => {
                assert!(!why.is_empty() && !instead.is_empty(), "{}", s.var);
                assert_ne!(s.accepts, Accepts::Any, "{} refuses nothing", s.var);
            }
            Status::NoOp { why } => assert!(!why.is_empty(), "{}", s.var),
        }
        // The VPC CNI's default is never refused: carrying it over means what unset means.
        if !s.default.is_empty() {
            assert_eq!(s.check(s.default), Ok(()), "{} refuses its default", s.var);
        }
    }
}

fn one(var: &str, value: &str) -> Result<(), InvalidSetting> {
    setting(var).unwrap().check(value)
}

#[test]
fn a_refusal_names_variable_value_why_and_instead() {
    let e = one("ENABLE_IPv6", "true").unwrap_err();
    assert!(e.refused);
    assert_eq!(
        e.to_string(),
        "refused ENABLE_IPv6=\"true\": vpcnet has no IPv6 mode yet: pods would get IPv4 \
             addresses only; instead: remove it or set it to false; IPv6 clusters still need \
             the VPC CNI"
    );
    for (var, value, why, instead) in [
        ("ENABLE_IPv6", "1", "IPv6", "false"),
        ("ENABLE_IPv4", "false", "IPv4 addresses only", "true"),
        ("ENABLE_POD_ENI", "True", "trunk ENI", "false"),
        (
            "HOST_CNI_CONFDIR_PATH",
            "/host/etc/cni/conf",
            "conflist",
            "VPCNET_CNI_CONFLIST",
        ),
        ("AWS_VPC_K8S_CNI_CONNMARK", "0x40", "0x80", "0x80"),
        (
            "AWS_EXTERNAL_SERVICE_CIDRS",
            "10.0.0.0/8",
            "main route table",
            "remove it",
        ),
        (
            "MANAGE_UNTAGGED_ENI",
            "false",
            "no_manage",
            "no_manage=true",
        ),
    ] {
        let e = one(var, value).unwrap_err();
        let msg = e.to_string();
        assert!(e.refused, "{msg}");
        assert!(
            msg.starts_with(&format!("refused {var}={value:?}: ")),
            "{msg}"
        );
        assert!(e.problem.contains(why), "{var}: {msg}");
        assert!(e.accepted.contains(instead), "{var}: {msg}");
    }
}

#[test]
fn values_that_are_vpcnets_behaviour_are_accepted() {
    for (var, value) in [
        ("ENABLE_IPv6", "false"),
        ("ENABLE_IPv6", "0"),
        ("ENABLE_IPv4", "true"),
        ("ENABLE_POD_ENI", "false"),
        ("AWS_VPC_K8S_CNI_CONNMARK", "128"),
        ("ENABLE_V4_EGRESS", "false"),
        ("ENABLE_V4_EGRESS", "true"),
        ("POD_SECURITY_GROUP_ENFORCING_MODE", "standard"),
        ("ENABLE_NFTABLES", "anything"),
        ("VPC_CNI_VERSION", "v1.23.2"),
    ] {
        assert_eq!(one(var, value), Ok(()), "{var}={value}");
    }
}

#[test]
fn malformed_values_are_invalid_not_refused() {
    for (var, value, accepted) in [
        ("ENABLE_IPv6", "yes", "true, false"),
        ("ENABLE_V4_EGRESS", "on", "true, false"),
        (
            "POD_SECURITY_GROUP_ENFORCING_MODE",
            "loose",
            "strict, standard",
        ),
    ] {
        let e = one(var, value).unwrap_err();
        assert!(!e.refused, "{e}");
        assert!(e.to_string().starts_with(&format!("invalid {var}=")), "{e}");
        assert!(e.accepted.contains(accepted), "{e}");
    }
}

#[test]
fn check_all_reports_every_refusal_and_skips_unset_and_empty() {
    let env = [
        ("ENABLE_IPv6", "true"),
        ("ENABLE_POD_ENI", "true"),
        ("ENABLE_MULTI_NIC", ""),
        ("ENABLE_IMDS_ONLY_MODE", "false"),
        ("DISABLE_TCP_EARLY_DEMUX", " true "),
    ];
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    };
    let got: Vec<(&str, String, bool)> = check_all(&get)
        .into_iter()
        .map(|e| (e.var, e.value, e.refused))
        .collect();
    assert_eq!(
        got,
        [
            ("DISABLE_TCP_EARLY_DEMUX", "true".to_string(), true),
            ("ENABLE_IPv6", "true".to_string(), true),
            ("ENABLE_POD_ENI", "true".to_string(), true),
        ]
    );
    assert!(check_all(&|_| None).is_empty());
}

#[test]
fn unknown_variables_are_those_nobody_declares() {
    let declared = ["WARM_IP_TARGET", "VPCNET_AGENT_SOCKET"];
    let env = [
        "WARM_IP_TARGET",
        "WARM_IP_TARGETS",
        "ENABLE_IPv6",
        "ENABLE_IPV6",
        "AWS_VPC_K8S_CNI_EXTERNAL_SNAT",
        "AWS_VPC_K8S_CNI_EXTERNALSNAT",
        "VPCNET_AGENT_SOCKET",
        "VPCNET_AGENT_SOKET",
        "VPCNET_TEST_END_TASK",
        "AWS_REGION",
        "PATH",
        "ENABLE_IPV6",
    ];
    assert_eq!(
        unknown_variables(env, &declared),
        [
            "AWS_VPC_K8S_CNI_EXTERNAL_SNAT",
            "ENABLE_IPV6",
            "VPCNET_AGENT_SOKET",
            "WARM_IP_TARGETS"
        ]
    );
    assert!(unknown_variables(["WARM_ENI_TARGET", "HOME"], &[]).is_empty());
}
