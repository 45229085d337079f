//! The lab's private OCI registry and kubelet's ECR credential provider on the nodes: the
//! distribution registry (built by `scripts/build-registry.sh`) runs in the VPC's network
//! namespace, next to the emulator, with htpasswd (bcrypt) authentication for the user and
//! password the emulator's ECR `GetAuthorizationToken` hands out (`GET /_emu/ecr/credentials`).
//! Nodes reach it under an ECR-shaped name ([`ECR_HOST`]) through their own `/etc/hosts` and
//! containerd's registry host configuration (`config_path`, `hosts.toml`, plain HTTP), so
//! kubelet asks `ecr-credential-provider` for that name's credentials and passes them to
//! containerd, which presents them to the registry (the name in the request matches the
//! credentials' server address, as containerd requires).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::json;

use crate::lab::Lab;
use crate::procs::ProcRecord;
use crate::spawn::Place;
use crate::state::NodeRecord;

/// The ECR-shaped registry name nodes pull the lab registry's images under.
pub const ECR_HOST: &str = "111122223333.dkr.ecr.us-east-1.amazonaws.com";
/// Repository and tag of the image the lab pushes (the lab's busybox image).
pub const REPO: &str = "lab/busybox";
/// Tag of that image.
pub const TAG: &str = "1";
/// Node directory of containerd's registry host configuration (`config_path`).
pub const CERTS_D: &str = "/etc/containerd/certs.d";
/// Env var naming the `ecr-credential-provider` binary the lab installs on its nodes (at
/// `/etc/eks/image-credential-provider`, where vpcnet-bootstrap looks for it).
pub const PROVIDER_ENV: &str = "VPCNET_ECR_CREDENTIAL_PROVIDER";

/// The image's reference under [`ECR_HOST`].
pub fn image_ref() -> String {
    format!("{ECR_HOST}/{REPO}:{TAG}")
}

/// The registry's user and password (the emulator's ECR credentials).
#[derive(Debug, Clone, Deserialize)]
pub struct Credentials {
    /// User name (`AWS`).
    pub username: String,
    /// Password.
    pub password: String,
}

/// The registry's configuration: filesystem storage under `storage`, HTTP on `addr`, htpasswd
/// authentication from `htpasswd`.
pub fn config_yaml(storage: &Path, addr: &str, htpasswd: &Path) -> String {
    let v = json!({
        "version": 0.1,
        "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": storage}, "delete": {"enabled": true}},
        "http": {"addr": addr},
        "auth": {"htpasswd": {"realm": "vpcnet-lab", "path": htpasswd}},
    });
    serde_yaml::to_string(&v).expect("YAML of JSON")
}

/// containerd's `hosts.toml` for [`ECR_HOST`]: the registry over plain HTTP under that name.
pub fn hosts_toml() -> String {
    format!(
        "server = \"http://{ECR_HOST}\"\n\n[host.\"http://{ECR_HOST}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    )
}

/// kubelet's `CredentialProviderConfig` for the lab: vpcnet-bootstrap's matchImages, with the
/// provider's environment pointing at the emulator's ECR endpoint and the lab's AWS keys.
pub fn provider_config(ecr_endpoint: &str) -> String {
    let mut env = vec![json!({"name": "AWS_ENDPOINT_URL_ECR", "value": ecr_endpoint})];
    for (k, v) in crate::cloud::aws_env(ecr_endpoint) {
        if matches!(
            k.as_str(),
            "AWS_REGION"
                | "AWS_ACCESS_KEY_ID"
                | "AWS_SECRET_ACCESS_KEY"
                | "AWS_CONFIG_FILE"
                | "AWS_SHARED_CREDENTIALS_FILE"
        ) {
            env.push(json!({"name": k, "value": v}));
        }
    }
    env.push(json!({"name": "AWS_EC2_METADATA_DISABLED", "value": "true"}));
    let cfg = json!({
        "apiVersion": "kubelet.config.k8s.io/v1",
        "kind": "CredentialProviderConfig",
        "providers": [{
            "name": "ecr-credential-provider",
            "matchImages": ["*.dkr.ecr.*.amazonaws.com"],
            "defaultCacheDuration": "12h",
            "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "env": env,
        }],
    });
    serde_json::to_string_pretty(&cfg).expect("JSON") + "\n"
}

/// Installs `ecr-credential-provider` (from [`PROVIDER_ENV`], when set) and the lab's
/// [`provider_config`] on a node before vpcnet-bootstrap runs, as the EKS AMI ships them.
/// Returns whether it did.
pub fn install_provider(root: &Path, ecr_endpoint: &str) -> Result<bool> {
    let Some(bin) = std::env::var_os(PROVIDER_ENV) else {
        return Ok(false);
    };
    let dst = crate::machine::host_path(root, vpcnet_bootstrap::credential_provider::BIN_PATH);
    fs::create_dir_all(dst.parent().expect("a directory"))?;
    fs::copy(&bin, &dst).with_context(|| {
        format!(
            "copying {} ({PROVIDER_ENV}) to the node",
            Path::new(&bin).display()
        )
    })?;
    fs::write(
        crate::machine::host_path(root, vpcnet_bootstrap::credential_provider::CONFIG_PATH),
        provider_config(ecr_endpoint),
    )?;
    Ok(true)
}

/// The lab's private registry ([`Lab::registry`]).
#[derive(Debug, Clone, Copy)]
pub struct Registry<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab's ECR-shaped registry (on the cloud's host).
    pub fn registry(&self) -> Registry<'_> {
        Registry { lab: self }
    }
}

impl Registry<'_> {
    /// The emulator's address as nodes reach it (the host of the EC2 endpoint).
    fn emulator_ip(&self) -> Result<String> {
        let ep = self.lab.cloud().endpoint()?;
        let host = ep
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .split(['/', ':'])
            .next()
            .unwrap_or_default()
            .to_string();
        if host.is_empty() {
            bail!("no host in the EC2 endpoint {ep}");
        }
        Ok(host)
    }

    /// Starts the private registry (`registry` and `htpasswd` from `registry_bin_dir`) in the
    /// VPC's namespace on the emulator's address, port 80, with the emulator's ECR credentials;
    /// waits until it answers. Returns the process and the credentials.
    pub fn start(&self, registry_bin_dir: &Path) -> Result<(ProcRecord, Credentials)> {
        let creds: Credentials =
            crate::api::control_get(&crate::daemon::api_socket(&self.lab.dir), "ecr/credentials")?;
        let dir = self.lab.dir.join("registry");
        fs::create_dir_all(dir.join("storage"))?;
        let out = Command::new(registry_bin_dir.join("htpasswd"))
            .args([&creds.username, &creds.password])
            .output()
            .context("running htpasswd")?;
        if !out.status.success() {
            bail!("htpasswd: {}", String::from_utf8_lossy(&out.stderr));
        }
        fs::write(dir.join("htpasswd"), &out.stdout)?;
        let ip = self.emulator_ip()?;
        let addr = format!("{ip}:80");
        fs::write(
            dir.join("config.yml"),
            config_yaml(&dir.join("storage"), &addr, &dir.join("htpasswd")),
        )?;
        let mut c = Command::new(registry_bin_dir.join("registry"));
        c.arg("serve").arg(dir.join("config.yml"));
        // The registry reads OTEL_* to export traces; none here.
        c.env("OTEL_TRACES_EXPORTER", "none");
        let vpc_ns = format!("{}-vpc", self.lab.state()?.prefix);
        let p = self
            .lab
            .processes()
            .start("registry", c, &Place::netns(&vpc_ns))?;
        crate::wait::wait_for("the lab registry", Duration::from_secs(30), || {
            if !p.alive() {
                bail!(
                    "the lab registry exited; see {}",
                    self.lab.logs().join("registry.log").display()
                );
            }
            let ok = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &vpc_ns,
                    "curl",
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                ])
                .arg(format!("http://{addr}/v2/"))
                .output()
                .map(|o| o.stdout == b"401")
                .unwrap_or(false);
            Ok(ok.then_some(()))
        })?;
        Ok((p, creds))
    }

    /// Points `node` at the registry: [`ECR_HOST`] in its `/etc/hosts`, containerd's
    /// `hosts.toml` for that name (read at each pull, no restart).
    pub fn use_on(&self, node: &NodeRecord) -> Result<()> {
        let ip = self.emulator_ip()?;
        let hosts = node.path(crate::machine::HOSTS);
        let mut text = fs::read_to_string(&hosts).unwrap_or_default();
        if !text.contains(ECR_HOST) {
            text.push_str(&format!("{ip} {ECR_HOST}\n"));
            fs::write(&hosts, text)?;
        }
        let d = node.path(&format!("{CERTS_D}/{ECR_HOST}"));
        fs::create_dir_all(&d)?;
        fs::write(d.join("hosts.toml"), hosts_toml())?;
        Ok(())
    }

    /// Pushes the lab's busybox image from `node`'s containerd into the registry as
    /// `<REPO>:<TAG>` (plain HTTP, with `creds`).
    pub fn push(&self, node: &NodeRecord, creds: &Credentials) -> Result<()> {
        let ip = self.emulator_ip()?;
        let target = format!("{ip}/{REPO}:{TAG}");
        let ns = crate::containerd::CRI_NAMESPACE;
        let _ = crate::containerd::ctr_ns(node, ns, &["images", "rm", &target]);
        crate::containerd::ctr_ns(
            node,
            ns,
            &["images", "tag", crate::image::IMAGE_REF, &target],
        )?;
        let user = format!("{}:{}", creds.username, creds.password);
        let r = crate::containerd::ctr_ns(
            node,
            ns,
            &["images", "push", "--plain-http", "--user", &user, &target],
        );
        let _ = crate::containerd::ctr_ns(node, ns, &["images", "rm", &target]);
        r.map(|_| ())
    }
}
