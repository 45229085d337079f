//! containerd for kubelet: the sandbox (pause) image and `/etc/containerd/config.toml`.
//!
//! The pause image is the EKS one in the instance's own region and partition, as the EKS AMI
//! picks it (`ACCOUNT.dkr.ecr.REGION.DOMAIN/eks/pause:TAG`, the account from the region, see
//! the "Amazon container image registries" page of the EKS user guide), unless
//! `--pause-container-image` names another. The configuration is vpcnet's (CRI plugin, runc with
//! `SystemdCgroup`, CNI directories, the pause image), or the operator's
//! `--containerd-config-file` with `SANDBOX_IMAGE` replaced, checked before anything is written.

use crate::error::BootstrapError;

/// Where containerd reads its configuration.
pub const CONFIG_PATH: &str = "/etc/containerd/config.toml";

/// The placeholder replaced by the pause image in a `--containerd-config-file`.
pub const SANDBOX_PLACEHOLDER: &str = "SANDBOX_IMAGE";

/// The ECR account that serves EKS images in `region`, and the region to pull from (regions
/// without a registry of their own use one in their partition).
fn ecr_account(region: &str) -> (&'static str, String) {
    let same = |acct: &'static str| (acct, region.to_string());
    match region {
        "ap-east-1" => same("800184023465"),
        "ap-east-2" => same("533267051163"),
        "me-south-1" => same("558608220178"),
        "cn-north-1" => same("918309763551"),
        "cn-northwest-1" => same("961992271922"),
        "us-gov-west-1" => same("013241004608"),
        "us-gov-east-1" => same("151742754352"),
        "us-iso-west-1" => same("608367168043"),
        "us-iso-east-1" => same("725322719131"),
        "us-isob-east-1" => same("187977181151"),
        "us-isob-west-1" => same("321162350305"),
        "eu-isoe-west-1" => same("249663109785"),
        "eusc-de-east-1" => same("877088126301"),
        "us-isof-south-1" => same("676585237158"),
        "us-isof-east-1" => same("171035529773"),
        "af-south-1" => same("877085696533"),
        "ap-southeast-3" => same("296578399912"),
        "me-central-1" => same("759879836304"),
        "eu-south-1" => same("590381155156"),
        "eu-south-2" => same("455263428931"),
        "eu-central-2" => same("900612956339"),
        "ap-south-2" => same("900889452093"),
        "ap-southeast-4" => same("491585149902"),
        "il-central-1" => same("066635153087"),
        "ca-west-1" => same("761377655185"),
        "ap-southeast-5" => same("151610086707"),
        "ap-southeast-6" => same("333609536671"),
        "ap-southeast-7" => same("121268973566"),
        "mx-central-1" => same("730335286997"),
        "ap-northeast-1" | "ap-northeast-2" | "ap-northeast-3" | "ap-south-1"
        | "ap-southeast-1" | "ap-southeast-2" | "ca-central-1" | "eu-central-1" | "eu-north-1"
        | "eu-west-1" | "eu-west-2" | "eu-west-3" | "sa-east-1" | "us-east-1" | "us-east-2"
        | "us-west-1" | "us-west-2" => same("602401143452"),
        r if r.starts_with("us-gov-") => ("013241004608", "us-gov-west-1".into()),
        r if r.starts_with("cn-") => ("961992271922", "cn-northwest-1".into()),
        r if r.starts_with("us-isob-") => ("187977181151", "us-isob-east-1".into()),
        r if r.starts_with("us-iso-") => ("725322719131", "us-iso-east-1".into()),
        r if r.starts_with("eu-isoe-") => ("249663109785", "eu-isoe-west-1".into()),
        r if r.starts_with("eusc-") => ("877088126301", "eusc-de-east-1".into()),
        r if r.starts_with("us-isof-") => ("676585237158", "us-isof-south-1".into()),
        _ => ("602401143452", "us-west-2".into()),
    }
}

/// The DNS suffix of `region`'s partition, for when IMDS `services/domain` does not answer.
pub fn partition_domain(region: &str) -> &'static str {
    match region {
        r if r.starts_with("cn-") => "amazonaws.com.cn",
        r if r.starts_with("us-isob-") => "sc2s.sgov.gov",
        r if r.starts_with("us-iso-") => "c2s.ic.gov",
        r if r.starts_with("eu-isoe-") => "cloud.adc-e.uk",
        r if r.starts_with("us-isof-") => "csp.hci.ic.gov",
        r if r.starts_with("eusc-") => "amazonaws.eu",
        _ => "amazonaws.com",
    }
}

/// The pause image reference.
///
/// `image`: `--pause-container-image` (a reference without tag or digest gets `:version`);
/// otherwise `ACCOUNT.dkr.ecr.REGION.DOMAIN/eks/pause:VERSION` with the account from `account`
/// (`--pause-container-account`) or the region's EKS account. `domain` is IMDS
/// `services/domain` (e.g. `amazonaws.com`).
pub fn sandbox_image(
    image: Option<&str>,
    account: Option<&str>,
    version: &str,
    region: &str,
    domain: &str,
) -> String {
    if let Some(image) = image {
        let last = image.rsplit('/').next().unwrap_or(image);
        return if last.contains(':') || image.contains('@') {
            image.to_string()
        } else {
            format!("{image}:{version}")
        };
    }
    let (default_account, registry_region) = ecr_account(region);
    let (acct, registry_region) = match account {
        // An explicit account keeps the instance's own region (bootstrap.sh does the same).
        Some(a) => (a, region.to_string()),
        None => (default_account, registry_region),
    };
    format!("{acct}.dkr.ecr.{registry_region}.{domain}/eks/pause:{version}")
}

/// vpcnet's containerd configuration (version 2, read by containerd 1.x and 2.x): the CRI
/// plugin with `sandbox_image`, runc through the systemd cgroup driver (kubelet's
/// `cgroupDriver: systemd`), CNI binaries in /opt/cni/bin and configurations in /etc/cni/net.d,
/// registry hosts from /etc/containerd/certs.d, extra files from /etc/containerd/config.d.
pub fn default_config(sandbox_image: &str) -> String {
    format!(
        r#"# Written by vpcnet-bootstrap; rerunning it rewrites this file (or pass --containerd-config-file).
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
imports = ["/etc/containerd/config.d/*.toml"]

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "{sandbox_image}"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"
"#
    )
}

/// Checks an operator's containerd configuration (`label` names it in errors): TOML that
/// parses, with a `version` containerd knows. Returns warnings for what is probably wrong:
/// version 1 (also what a missing `version` means), which containerd 2 refuses; no
/// `SANDBOX_IMAGE` nor `sandbox_image`/`sandbox` pin (containerd's own pause image is used).
///
/// Errors: [`BootstrapError::Invalid`] naming the line and column of a syntax error.
pub fn check_config(label: &str, text: &str) -> Result<Vec<String>, BootstrapError> {
    let flag = "--containerd-config-file";
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(" at line {line}, column {col}")
            })
            .unwrap_or_default();
        BootstrapError::invalid(
            flag,
            label,
            format!("not valid TOML{at}: {}", e.message()),
            "fix the file (containerd would refuse to start with it), or leave the flag out to use vpcnet's configuration",
        )
    })?;
    let mut warnings = Vec::new();
    match table.get("version") {
        Some(toml::Value::Integer(2 | 3)) => {}
        None | Some(toml::Value::Integer(1)) => warnings.push(format!(
            "{flag} {label} is a version 1 configuration (no `version = 2`): containerd 1.x reads it, containerd 2 refuses to start with it"
        )),
        Some(v) => {
            return Err(BootstrapError::invalid(
                flag,
                label,
                format!("version = {v}: containerd knows configuration versions 1, 2 and 3"),
                "set version = 2 (containerd 1.x and 2.x) or version = 3 (containerd 2.x)",
            ))
        }
    }
    if !text.contains(SANDBOX_PLACEHOLDER)
        && !text.contains("sandbox_image")
        && !text.contains("sandbox =")
    {
        warnings.push(format!(
            "{flag} {label} sets no sandbox image (neither {SANDBOX_PLACEHOLDER} nor sandbox_image): containerd uses its built-in pause image, which kubelet's --pod-infra-container-image may not match"
        ));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_image_per_region_and_partition() {
        let img = |region: &str| sandbox_image(None, None, "3.5", region, partition_domain(region));
        assert_eq!(
            img("us-west-2"),
            "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5"
        );
        assert_eq!(
            img("cn-north-1"),
            "918309763551.dkr.ecr.cn-north-1.amazonaws.com.cn/eks/pause:3.5"
        );
        // A region without its own registry uses its partition's.
        assert_eq!(
            img("us-gov-central-1"),
            "013241004608.dkr.ecr.us-gov-west-1.amazonaws.com/eks/pause:3.5"
        );
        assert_eq!(
            img("xx-new-1"),
            "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/pause:3.5"
        );
        assert_eq!(
            sandbox_image(
                None,
                Some("111122223333"),
                "3.10",
                "eu-west-1",
                "amazonaws.com"
            ),
            "111122223333.dkr.ecr.eu-west-1.amazonaws.com/eks/pause:3.10"
        );
        assert_eq!(
            sandbox_image(
                Some("registry.local:5000/pause"),
                None,
                "3.10",
                "eu-west-1",
                "x"
            ),
            "registry.local:5000/pause:3.10"
        );
        assert_eq!(
            sandbox_image(
                Some("registry.local/pause:3.9"),
                None,
                "3.10",
                "eu-west-1",
                "x"
            ),
            "registry.local/pause:3.9"
        );
    }

    #[test]
    fn default_config_is_valid_and_names_the_image() {
        let c = default_config("p:1");
        assert!(check_config("default", &c).unwrap().is_empty());
        assert!(c.contains("sandbox_image = \"p:1\""));
        assert!(c.contains("SystemdCgroup = true"));
    }

    #[test]
    fn broken_configs_are_refused_with_the_place() {
        let e = check_config("/x.toml", "version = 2\n[plugins\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("Fix:"), "{e}");
        let e = check_config("/x.toml", "version = 7\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("version = 2"), "{e}");
        let w = check_config("/x.toml", "[grpc]\nsandbox_image = \"SANDBOX_IMAGE\"\n").unwrap();
        assert!(w[0].contains("containerd 2 refuses"), "{w:?}");
        let w = check_config("/x.toml", "version = 2\n").unwrap();
        assert!(w[0].contains("no sandbox image"), "{w:?}");
    }
}
