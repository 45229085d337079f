//! `vpcnet-init`: the node install step (init container). See the library's documentation.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use tracing::info;
use vpcnet_init::install::{self, Outcome};
use vpcnet_init::plugins::Chain;
use vpcnet_init::{primary, sysctl};

#[derive(Parser, Debug)]
#[command(
    name = "vpcnet-init",
    about = "Install vpcnet-cni and the reference plugins the conflist chains into the host's CNI bin directory, and set the node sysctls (the aws-node init container's job)"
)]
struct Args {
    /// Where the image keeps the plugins to install.
    #[arg(
        long,
        env = "VPCNET_CNI_SOURCE_DIR",
        default_value = "/opt/vpcnet/cni/bin"
    )]
    source_dir: PathBuf,
    /// The host's CNI bin directory as mounted in this container (the VPC CNI's name).
    #[arg(long, env = "HOST_CNI_BIN_PATH", default_value = "/host/opt/cni/bin")]
    host_cni_bin_dir: PathBuf,
    /// The node's primary interface; default: the interface of the IPv4 default route.
    #[arg(long, env = "PRIMARY_INTERFACE")]
    primary_interface: Option<String>,
    /// The sysctl tree to write.
    #[arg(long, default_value = "/proc/sys", hide = true)]
    proc_sys: PathBuf,
    /// Only install the plugins; leave the sysctls alone.
    #[arg(long)]
    skip_sysctls: bool,
}

const ROUTES: &str = "/proc/net/route";

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(e) = run(Args::parse()) {
        tracing::error!("{e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let env = |n: &str| std::env::var(n).ok();
    let chain = Chain::from_env(&env)?;
    // Check the sysctl settings before touching the node, so a refused setting changes nothing.
    let primary = if args.skip_sysctls {
        None
    } else {
        Some(match &args.primary_interface {
            Some(p) => p.clone(),
            None => {
                let text =
                    std::fs::read_to_string(ROUTES).with_context(|| format!("reading {ROUTES}"))?;
                primary::default_route_interface(ROUTES, &text)?
            }
        })
    };
    let settings = match &primary {
        Some(p) => sysctl::plan(p, &env)?,
        None => vec![],
    };
    for name in chain.binaries() {
        let src = args.source_dir.join(name);
        let outcome = install::install(&src, &args.host_cni_bin_dir, name)?;
        let dest = args.host_cni_bin_dir.join(name);
        match outcome {
            Outcome::Installed => info!(plugin = name, path = %dest.display(), "installed"),
            Outcome::Unchanged => info!(plugin = name, path = %dest.display(), "already installed"),
        }
    }
    if let Some(p) = &primary {
        info!(interface = %p, "primary interface");
    }
    for s in &settings {
        match sysctl::apply(&args.proc_sys, s)? {
            sysctl::Applied::Changed { before, after } => {
                info!(sysctl = %s.key, %before, %after, "updated")
            }
            sysctl::Applied::Unchanged => info!(sysctl = %s.key, value = %s.value, "already set"),
            sysctl::Applied::Absent => info!(sysctl = %s.key, "not in this kernel; skipped"),
        }
    }
    info!("node install step done");
    Ok(())
}
