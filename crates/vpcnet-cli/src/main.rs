//! `vpcnet`: the operator CLI.
//!
//! Subcommands live in one module each: `max_pods` (kubelet max pods per instance type),
//! `plan` (capacity planning: subnet addresses and EC2 calls of a fleet),
//! `lab` (the local VPC lab; cargo feature `lab`, on by default, off for node builds),
//! `inspect` (agent state as tables).

use clap::{Parser, Subcommand};

mod inspect;
#[cfg(feature = "lab")]
mod lab;
#[cfg(feature = "lab")]
mod lab_lb;
mod max_pods;
mod plan;

#[derive(Parser)]
#[command(name = "vpcnet", version, about = "vpcnet operator CLI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Max pods for instance types (flags of AWS's max-pods-calculator.sh).
    MaxPods(max_pods::Args),
    /// Capacity planning: the subnet addresses a fleet takes, each subnet's headroom and
    /// run-out point, /28 fragmentation risk, and the EC2 calls and time floor of a scale-out.
    Plan(plan::Args),
    /// The local VPC lab: namespaces, emulated EC2, containerd + vpcnet on one machine.
    #[cfg(feature = "lab")]
    Lab(lab::Args),
    /// An agent's state as tables: ENIs and addresses, pods, settings, health (introspection).
    Inspect(inspect::Args),
}

/// Runs the command; an error is printed once, as its cause chain (no backtrace), with exit 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::MaxPods(args) => max_pods::run(args),
        Command::Plan(args) => plan::run(args),
        #[cfg(feature = "lab")]
        Command::Lab(args) => lab::run(args),
        Command::Inspect(args) => inspect::run(args),
    }
}
