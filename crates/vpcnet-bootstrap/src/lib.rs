//! vpcnet-bootstrap: kubelet configuration of an EKS worker node at boot.
//!
//! A drop-in for the EKS AMI's `bootstrap.sh` (same flags) that also reads a nodeadm-shaped
//! NodeConfig file. It writes, under a root directory:
//! - `/etc/kubernetes/kubelet/kubelet-config.json`: cluster DNS, max pods, kube-reserved,
//!   evictionHard, providerID;
//! - `/etc/kubernetes/pki/ca.crt` and `/var/lib/kubelet/kubeconfig` (on a local cluster on
//!   Outposts `/var/lib/kubelet/bootstrap-kubeconfig` with the cluster ID instead);
//! - kubelet drop-ins in `/etc/systemd/system/kubelet.service.d/`: `10-kubelet-args.conf`
//!   (`KUBELET_ARGS`), `20-kubelet-cloud-provider.conf` (`KUBELET_CLOUD_PROVIDER`),
//!   `30-kubelet-extra-args.conf` (`KUBELET_EXTRA_ARGS`);
//! - on Outposts, `/etc/hosts` entries for the API server.
//!
//! Shape: [`Settings::new`] validates input (pure), [`facts::gather`] reads IMDS, EC2 and the
//! host, [`render::render`] turns both into files (pure), [`output`] writes or prints them.

pub mod args;
pub mod cloud;
pub mod cluster_dns;
pub mod error;
pub mod facts;
pub mod hosts;
pub mod max_pods;
pub mod node_config;
pub mod output;
pub mod render;
pub mod reserved;
pub mod settings;
pub mod version;

use std::io::Write;
use std::time::Duration;

pub use args::BootstrapArgs;
pub use error::BootstrapError;
pub use render::{NodeFile, Plan};
pub use settings::Settings;

use cloud::{Ec2, Imds};
use facts::{Host, Retry};
use node_config::NodeConfig;

/// Reads and parses `--config`, if given.
///
/// Errors: [`BootstrapError::NodeConfig`] when unreadable or invalid.
pub fn load_node_config(args: &BootstrapArgs) -> Result<Option<NodeConfig>, BootstrapError> {
    let Some(path) = &args.config else {
        return Ok(None);
    };
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| BootstrapError::NodeConfig {
        path: label.clone(),
        problem: format!(
            "cannot read: {e}. Fix: pass --config with a readable NodeConfig YAML file"
        ),
    })?;
    NodeConfig::parse(&label, &text).map(Some)
}

/// Validates the input and gathers facts, without writing: the plan a run would apply.
pub async fn plan(
    args: &BootstrapArgs,
    imds: &impl Imds,
    ec2: &impl Ec2,
    host: &impl Host,
) -> Result<Plan, BootstrapError> {
    let nc = load_node_config(args)?;
    let settings = Settings::new(args, nc.as_ref())?;
    let retry = Retry {
        budget: Duration::from_secs_f64(args.private_dns_timeout),
        max_attempts: args.private_dns_attempts,
        first_delay: Duration::from_millis(args.retry_delay_ms),
    };
    let facts = facts::gather(&settings, imds, ec2, host, args.vcpus, retry).await?;
    Ok(render::render(&settings, &facts))
}

/// A whole run: plan, then write under `args.root` (or print with `--dry-run`) to `out`.
/// Warnings go to `warn`. Nothing is written unless every check and read succeeded.
pub async fn run(
    args: &BootstrapArgs,
    imds: &impl Imds,
    ec2: &impl Ec2,
    host: &impl Host,
    out: &mut impl Write,
    warn: &mut impl Write,
) -> anyhow::Result<Plan> {
    let plan = plan(args, imds, ec2, host).await?;
    for w in &plan.warnings {
        writeln!(warn, "warning: {w}")?;
    }
    if args.dry_run {
        output::print_dry_run(&plan.files, out)?;
    } else {
        for (path, change) in output::apply(&args.root, &plan.files)? {
            writeln!(
                out,
                "{:<9} {}",
                change.as_str(),
                facts::under_root(&args.root, &path).display()
            )?;
        }
    }
    writeln!(
        warn,
        "vpcnet-bootstrap: max pods {} ({}), cloud provider {}",
        plan.max_pods, plan.max_pods_origin, plan.cloud_provider
    )?;
    Ok(plan)
}
