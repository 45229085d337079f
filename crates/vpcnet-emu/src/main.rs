//! `vpcnet-emu`: serve the emulated EC2 (and its control API under `/_emu/`), optionally IMDS.
//!
//! ```text
//! vpcnet-emu --listen 127.0.0.1:8080 --seed 1 --config lab.json [--imds-listen 169.254.169.254:80]
//!            [--account-limits off|aws-defaults]
//! ```
//! Prints the IDs created from the config as one JSON line on stdout, then serves until killed.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use vpcnet_emu::config::{apply, LabConfig};
use vpcnet_emu::{AccountLimits, Emulator, EmulatorOptions};

/// `--account-limits`: whether the account's EC2 and ELBv2 rate limits apply.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum AccountLimitsFlag {
    /// No account limit (the config's `account_limits` is ignored).
    Off,
    /// AWS's documented buckets, with the config's `account_limits` overrides if any.
    AwsDefaults,
}

#[derive(Parser, Debug)]
#[command(
    name = "vpcnet-emu",
    about = "Lab cloud: EC2 Query API, ELBv2 and IMDSv2 with AWS's limits, errors and faults"
)]
struct Args {
    /// Address for the EC2 endpoint and the control API (`/_emu/`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Seed for every random choice, so runs reproduce.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// JSON setup file (VPCs, subnets, security groups, instances, faults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also serve IMDS here, knowing callers by source address (an instance's primary IP).
    #[arg(long)]
    imds_listen: Option<SocketAddr>,
    /// Meter calls with the account's EC2 and ELBv2 rate limits (`aws-defaults`), or not
    /// (`off`); without the flag the config's `account_limits` decides (off by default).
    #[arg(long, value_enum)]
    account_limits: Option<AccountLimitsFlag>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut cfg: LabConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --config {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("--config {} is not a valid lab config", p.display()))?
        }
        None => LabConfig::default(),
    };
    if let Some(flag) = args.account_limits {
        let limits = cfg
            .account_limits
            .get_or_insert_with(AccountLimits::aws_defaults);
        limits.enabled = matches!(flag, AccountLimitsFlag::AwsDefaults);
    }
    let emu = Emulator::with_options(EmulatorOptions {
        seed: args.seed,
        region: cfg.region.clone().unwrap_or_else(|| "us-east-1".into()),
        account_id: "123456789012".into(),
    });
    let ids = apply(&emu, &cfg).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let imds = match args.imds_listen {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .with_context(|| format!("cannot listen on {a}"))?,
        ),
        None => None,
    };
    println!(
        "{}",
        serde_json::json!({"endpoint": format!("http://{}", listener.local_addr()?), "ids": ids})
    );
    if let Some(l) = imds {
        let e = emu.clone();
        tokio::spawn(async move { e.serve_imds(l).await });
    }
    emu.serve(listener).await.context("server stopped")
}
