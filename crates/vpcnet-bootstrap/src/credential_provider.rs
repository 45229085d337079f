//! kubelet's image credential provider for ECR. Since kubelet 1.27 there is no in-tree ECR
//! credential provider: without `--image-credential-provider-config` and
//! `--image-credential-provider-bin-dir` naming `ecr-credential-provider`, kubelet pulls no
//! image from a private ECR repository. The EKS AMIs install the binary in [`BIN_DIR`]; AL2
//! ships [`CONFIG_PATH`] too, on AL2023 nodeadm writes it at boot.
//!
//! vpcnet-bootstrap passes the flags whenever the binary is on the node, keeping a
//! [`CONFIG_PATH`] it finds and writing [`config_json`] where there is none (as nodeadm does).

use serde_json::json;

use crate::version::KubeletVersion;

/// Directory of the credential provider binaries (`--image-credential-provider-bin-dir`).
pub const BIN_DIR: &str = "/etc/eks/image-credential-provider";
/// The ECR provider binary kubelet runs from [`BIN_DIR`].
pub const BIN_PATH: &str = "/etc/eks/image-credential-provider/ecr-credential-provider";
/// kubelet's `CredentialProviderConfig` (`--image-credential-provider-config`).
pub const CONFIG_PATH: &str = "/etc/eks/image-credential-provider/config.json";

/// Image name patterns of ECR private registries in every partition (kubelet's `matchImages`
/// glob syntax: `*` matches one DNS label).
const ECR_IMAGES: [&str; 11] = [
    "*.dkr.ecr.*.amazonaws.com",
    "*.dkr-ecr.*.on.aws",
    "*.dkr.ecr.*.amazonaws.com.cn",
    "*.dkr-ecr.*.on.amazonwebservices.com.cn",
    "*.dkr.ecr-fips.*.amazonaws.com",
    "*.dkr-ecr-fips.*.on.aws",
    "*.dkr.ecr.*.c2s.ic.gov",
    "*.dkr.ecr.*.sc2s.sgov.gov",
    "*.dkr.ecr.*.cloud.adc-e.uk",
    "*.dkr.ecr.*.csp.hci.ic.gov",
    "*.dkr.ecr.*.amazonaws.eu",
];

/// What the node has of the provider and what bootstrap does about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// No binary at [`BIN_PATH`]: no flags (kubelet would refuse a provider it cannot run).
    Absent,
    /// Binary and a config are present: flags, the config kept as it is.
    Installed,
    /// Binary present, no config: flags, and [`config_json`] written to [`CONFIG_PATH`].
    WriteConfig(String),
}

impl Provider {
    /// From what is on the node: the binary, and the config's text if there is one. A
    /// config with exactly [`config_json`]'s bytes is vpcnet's own (a rerun), still written.
    pub fn new(binary: bool, config: Option<&str>, kubelet: KubeletVersion) -> Provider {
        let ours = config_json(kubelet);
        match config {
            _ if !binary => Provider::Absent,
            Some(text) if text != ours => Provider::Installed,
            _ => Provider::WriteConfig(ours),
        }
    }

    /// The kubelet flags that enable it (empty when absent).
    pub fn flags(&self) -> Vec<String> {
        match self {
            Provider::Absent => Vec::new(),
            _ => vec![
                format!("--image-credential-provider-config={CONFIG_PATH}"),
                format!("--image-credential-provider-bin-dir={BIN_DIR}"),
            ],
        }
    }
}

/// kubelet's `CredentialProviderConfig` for `ecr-credential-provider`: API `v1` for kubelet
/// ≥ 1.27 (with `public.ecr.aws`, which the provider serves from that release), `v1alpha1`
/// before, as the EKS AMIs choose; credentials cached 12 h (ECR tokens live 12 h).
pub fn config_json(kubelet: KubeletVersion) -> String {
    let v1 = kubelet >= KubeletVersion::new(1, 27, 0);
    let mut images: Vec<&str> = ECR_IMAGES.to_vec();
    if v1 {
        images.push("public.ecr.aws");
    }
    let (config_api, provider_api) = if v1 {
        (
            "kubelet.config.k8s.io/v1",
            "credentialprovider.kubelet.k8s.io/v1",
        )
    } else {
        (
            "kubelet.config.k8s.io/v1alpha1",
            "credentialprovider.kubelet.k8s.io/v1alpha1",
        )
    };
    let cfg = json!({
        "apiVersion": config_api,
        "kind": "CredentialProviderConfig",
        "providers": [{
            "name": "ecr-credential-provider",
            "matchImages": images,
            "defaultCacheDuration": "12h",
            "apiVersion": provider_api,
        }],
    });
    let mut s = serde_json::to_string_pretty(&cfg).expect("JSON values serialize");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_follows_kubelet() {
        let new: serde_json::Value =
            serde_json::from_str(&config_json(KubeletVersion::new(1, 31, 2))).unwrap();
        assert_eq!(new["apiVersion"], "kubelet.config.k8s.io/v1");
        assert_eq!(
            new["providers"][0]["apiVersion"],
            "credentialprovider.kubelet.k8s.io/v1"
        );
        assert!(new["providers"][0]["matchImages"]
            .as_array()
            .unwrap()
            .contains(&json!("*.dkr.ecr.*.amazonaws.com")));
        let old: serde_json::Value =
            serde_json::from_str(&config_json(KubeletVersion::new(1, 26, 9))).unwrap();
        assert_eq!(old["apiVersion"], "kubelet.config.k8s.io/v1alpha1");
        assert!(!old["providers"][0]["matchImages"]
            .as_array()
            .unwrap()
            .contains(&json!("public.ecr.aws")));
    }

    #[test]
    fn flags_only_with_the_binary() {
        let v = KubeletVersion::new(1, 31, 0);
        assert!(Provider::new(false, Some("{}"), v).flags().is_empty());
        assert_eq!(Provider::new(true, Some("{}"), v), Provider::Installed);
        let w = Provider::new(true, None, v);
        assert_eq!(w, Provider::WriteConfig(config_json(v)));
        assert_eq!(w.flags().len(), 2);
        // A rerun finds its own config and keeps writing it (unchanged bytes).
        assert_eq!(Provider::new(true, Some(&config_json(v)), v), w);
    }
}
