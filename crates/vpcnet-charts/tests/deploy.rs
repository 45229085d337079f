//! `deploy/<chart>.yaml` (for `kubectl apply` users) is exactly `helm template` of the chart with
//! its default values and CRDs. UPDATE_GOLDEN=1 rewrites the files instead; review the diff.

use vpcnet_charts::{deploy_manifest, documents, Chart};

#[test]
fn deploy_manifests_equal_helm_template() {
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    for chart in Chart::ALL {
        let want = deploy_manifest(chart).unwrap_or_else(|e| panic!("{e}"));
        let path = chart.deploy_file();
        if update {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run UPDATE_GOLDEN=1 cargo test -p vpcnet-charts --test deploy",
                path.display()
            )
        });
        assert!(
            have == want,
            "{} differs from helm template of charts/{}; run UPDATE_GOLDEN=1 cargo test -p \
             vpcnet-charts --test deploy and review the diff",
            path.display(),
            chart.name()
        );
    }
}

#[test]
fn deploy_manifests_hold_the_crds_and_the_workloads() {
    let kinds = |chart: Chart| -> Vec<String> {
        let text = std::fs::read_to_string(chart.deploy_file()).unwrap();
        documents(&text)
            .unwrap()
            .iter()
            .map(|d| {
                format!(
                    "{}/{}",
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let node = kinds(Chart::Vpcnet);
    for want in [
        "CustomResourceDefinition/eniconfigs.crd.k8s.amazonaws.com",
        "ServiceAccount/aws-node",
        "ClusterRole/aws-node",
        "ClusterRoleBinding/aws-node",
        "DaemonSet/aws-node",
    ] {
        assert!(node.contains(&want.to_string()), "{want} in {node:?}");
    }
    assert_eq!(node.len(), 5, "{node:?}");
    let targets = kinds(Chart::Targets);
    for want in [
        "CustomResourceDefinition/targetgroupbindings.elbv2.k8s.aws",
        "ServiceAccount/vpcnet-targets",
        "ClusterRole/vpcnet-targets",
        "ClusterRoleBinding/vpcnet-targets",
        "Role/vpcnet-targets-leader-election",
        "RoleBinding/vpcnet-targets-leader-election",
        "Deployment/vpcnet-targets",
    ] {
        assert!(targets.contains(&want.to_string()), "{want} in {targets:?}");
    }
    assert_eq!(targets.len(), 7, "{targets:?}");
}
