//! `vpcnet-emu`: serve the emulated EC2 (and its control API under `/_emu/`), optionally IMDS.
//!
//! ```text
//! vpcnet-emu --listen 127.0.0.1:8080 --seed 1 --config lab.json [--imds-listen 169.254.169.254:80]
//! ```
//! Prints the IDs created from the config as one JSON line on stdout, then serves until killed.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use vpcnet_emu::config::{apply, LabConfig};
use vpcnet_emu::{Emulator, EmulatorOptions};

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let cfg: LabConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --config {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("--config {} is not a valid lab config", p.display()))?
        }
        None => LabConfig::default(),
    };
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
