use super::*;

fn from(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_map(&m)
}

#[test]
fn both_settings_are_read_with_the_vpc_cni_defaults() {
    let c = Config::default();
    assert!(!c.disable_network_resource_provisioning && !c.enable_imds_only_mode);
    let c = from(&[
        ("DISABLE_NETWORK_RESOURCE_PROVISIONING", "true"),
        ("ENABLE_IMDS_ONLY_MODE", "1"),
        // Harmless without provisioning, and what the VPC CNI's manifest sets.
        ("ENABLE_SUBNET_DISCOVERY", "true"),
        ("WARM_ENI_TARGET", "1"),
        ("WARM_PREFIX_TARGET", "1"),
        ("ADDITIONAL_ENI_TAGS", "{}"),
        ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "false"),
    ])
    .unwrap();
    assert!(c.disable_network_resource_provisioning && c.enable_imds_only_mode);
    let e = from(&[("ENABLE_IMDS_ONLY_MODE", "yes")]).unwrap_err();
    assert_eq!((e.var, e.refused), ("ENABLE_IMDS_ONLY_MODE", false));
}

#[test]
fn settings_that_shape_created_enis_are_refused_without_provisioning() {
    for off in [
        "DISABLE_NETWORK_RESOURCE_PROVISIONING",
        "ENABLE_IMDS_ONLY_MODE",
    ] {
        let e = from(&[
            (off, "true"),
            ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true"),
            ("ADDITIONAL_ENI_TAGS", r#"{"team":"net"}"#),
        ])
        .unwrap_err();
        let got: Vec<(&str, bool)> = e.all().map(|i| (i.var, i.refused)).collect();
        assert_eq!(
            got,
            [
                ("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", true),
                ("ADDITIONAL_ENI_TAGS", true)
            ]
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "refused AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=\"true\": with {off}=true the \
                     agent creates no ENI"
            )),
            "{msg}"
        );
        assert!(msg.contains("instead: attach the ENIs"), "{msg}");
        assert!(
            msg.contains(r#"refused ADDITIONAL_ENI_TAGS="{\"team\":\"net\"}""#),
            "{msg}"
        );
        // Each alone is fine.
        from(&[("AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG", "true")]).unwrap();
        from(&[(off, "true")]).unwrap();
    }
}
