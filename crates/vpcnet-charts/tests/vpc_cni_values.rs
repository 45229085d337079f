//! Every key of the pinned VPC CNI chart's values.yaml (charts/aws-vpc-cni of the version in
//! lab/vpc-cni/go.mod, read from the Go module cache) has a row in docs/chart.md's VPC CNI values
//! table saying what vpcnet does with it. scripts/test.sh downloads the module.

use std::path::PathBuf;

use serde_yaml::Value;
use vpcnet_charts::repo_root;

/// Keys whose value is one setting (a map or list handed on whole), not keys of their own.
const WHOLE: &[&str] = &[
    "env",
    "init.env",
    "init.securityContext",
    "init.resources",
    "nodeAgent.securityContext",
    "nodeAgent.resources",
    "securityContext",
    "podSecurityContext",
    "podAnnotations",
    "podLabels",
    "resources",
    "updateStrategy",
    "nodeSelector",
    "tolerations",
    "affinity",
    "livenessProbe",
    "readinessProbe",
    "serviceAccount.annotations",
    "eniConfig.subnets",
    "podMonitor.annotations",
    "podMonitor.labels",
];

fn pinned_values() -> (String, String) {
    let gomod = std::fs::read_to_string(repo_root().join("lab/vpc-cni/go.mod")).unwrap();
    let version = gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("github.com/aws/amazon-vpc-cni-k8s "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the amazon-vpc-cni-k8s pin in lab/vpc-cni/go.mod")
        .to_string();
    let cache = std::env::var_os("GOMODCACHE")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let out = std::process::Command::new("go")
                .args(["env", "GOMODCACHE"])
                .output()
                .ok()?;
            let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (!s.is_empty()).then(|| PathBuf::from(s))
        })
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/pkg/mod")))
        .expect("a Go module cache");
    let path = cache.join(format!(
        "github.com/aws/amazon-vpc-cni-k8s@{version}/charts/aws-vpc-cni/values.yaml"
    ));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; download the pinned VPC CNI: (cd lab/vpc-cni && go mod download github.com/aws/amazon-vpc-cni-k8s)",
            path.display()
        )
    });
    (version, text)
}

fn keys(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) if !WHOLE.contains(&prefix) && !m.is_empty() => {
            for (k, child) in m {
                let k = k.as_str().unwrap();
                let path = if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                };
                keys(&path, child, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// The first-column keys of the table under the heading "VPC CNI values" in docs/chart.md.
fn documented() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/chart.md")).unwrap();
    let section = doc
        .split("\n## VPC CNI values")
        .nth(1)
        .expect("a section \"## VPC CNI values\" in docs/chart.md");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_vpc_cni_chart_value_is_in_the_docs_table() {
    let (version, text) = pinned_values();
    let values: Value = serde_yaml::from_str(&text).unwrap();
    let mut all = Vec::new();
    keys("", &values, &mut all);
    assert!(all.len() > 50, "{version}: {all:?}");
    let documented = documented();
    let missing: Vec<&String> = all.iter().filter(|k| !documented.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "keys of the VPC CNI {version} chart without a row in docs/chart.md's VPC CNI values table: {missing:?}"
    );
    let stale: Vec<&String> = documented
        .iter()
        .filter(|k| {
            !all.contains(k)
                && !["extraVolumes", "extraVolumeMounts", "extraEnv"].contains(&k.as_str())
        })
        .collect();
    assert!(
        stale.is_empty(),
        "rows of docs/chart.md's VPC CNI values table that are no key of its {version} chart: {stale:?}"
    );
}
