//! `vpcnet-bench`: vpcnet measured against its peer in the same run, one subcommand per
//! benchmark, each driven by its script (`scripts/bench-<name>.sh`, which builds what it needs
//! first). Every table ends with the ratios; the figures go into `docs/benchmarks.md`.
//!
//! - `pods` ([`pods`]): pod start-up, vpcnet against Debian's bridge + host-local.
//! - `peer` ([`peer`]): vpcnet against AWS's VPC CNI on two nodes of one lab.
//! - `targets` ([`targets`]): vpcnet-targets against aws-load-balancer-controller.
//! - `cni` ([`cni`]): the CNI plugin's ADD and DEL alone against ptp + host-local.
//! - `policy` ([`policy`]): NetworkPolicy enforcement at cluster scale: the agent's memory
//!   and the time changes take to reach the node's rules.

use clap::{Parser, Subcommand};

mod cni;
mod peer;
mod pod_timing;
mod pods;
mod policy;
mod report;
mod targets;

#[derive(Parser)]
#[command(
    name = "vpcnet-bench",
    version,
    about = "vpcnet's benchmarks against their peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pod start-up: vpcnet vs Debian's bridge + host-local on the same kubelet (a burst
    /// Deployment, then single pods), one lab, one run (scripts/bench-pods.sh).
    Pods(pods::Args),
    /// vpcnet against AWS's VPC CNI: two nodes of one type, `n1` on the VPC CNI, `n2` on
    /// vpcnet, one run (scripts/bench-peer.sh).
    Peer(peer::Args),
    /// vpcnet-targets against aws-load-balancer-controller: one lab, the same
    /// TargetGroupBinding, rollout and load for each, one after the other
    /// (scripts/bench-targets.sh).
    Targets(targets::Args),
    /// ADD and DEL latency of the vpcnet-cni binary against ptp + host-local, same namespaces,
    /// interleaved (scripts/bench-cni.sh).
    Cni(cni::Args),
    /// NetworkPolicy at cluster scale: the agent's memory with thousands of pods and hundreds
    /// of policies in the cluster, under churn, and the time from a policy or peer pod change
    /// to the node's rules (scripts/bench-policy.sh).
    Policy(policy::Args),
}

/// Runs the benchmark; an error is printed once, as its cause chain, with exit 1.
fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Pods(a) => pods::run(&a),
        Command::Peer(a) => peer::run(&a),
        Command::Targets(a) => targets::run(&a),
        Command::Cni(a) => cni::run(&a),
        Command::Policy(a) => policy::run(&a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parses(args: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("vpcnet-bench").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .command
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every flag the scripts' usage lines document (scripts/bench-*.sh) still parses.
    #[test]
    fn the_scripts_flags_parse() {
        assert!(matches!(
            parses(&[
                "pods",
                "--name",
                "p",
                "--replicas",
                "3",
                "--singles",
                "2",
                "--instance-type",
                "m5.large",
                "--agent-env",
                "WARM_IP_TARGET=5"
            ]),
            Command::Pods(_)
        ));
        assert!(matches!(
            parses(&[
                "peer",
                "--name",
                "p",
                "--singles",
                "2",
                "--rolls",
                "1",
                "--idle-secs",
                "5",
                "--instance-type",
                "m5.large",
                "--kernel-state",
                "/tmp/k",
                "--timings",
                "/tmp/t"
            ]),
            Command::Peer(_)
        ));
        assert!(matches!(
            parses(&[
                "targets",
                "--name",
                "t",
                "--replicas",
                "2",
                "--scale-to",
                "4",
                "--connections",
                "2",
                "--max-load-secs",
                "60",
                "--logs",
                "/tmp/l"
            ]),
            Command::Targets(_)
        ));
        assert!(matches!(
            parses(&["cni", "--plugin", "/x/vpcnet-cni", "--iterations", "5"]),
            Command::Cni(_)
        ));
        assert!(Cli::try_parse_from(["vpcnet-bench", "peer", "--no-such-flag"]).is_err());
    }
}
