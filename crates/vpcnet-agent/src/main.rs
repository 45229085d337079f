//! `vpcnet-agent` binary: configuration from the environment (the VPC CNI's variable
//! names), then run until SIGTERM. `vpcnet-agent export-vpc-cni-checkpoint` writes the
//! checkpoint in the VPC CNI's format instead (the rollback; [`vpcnet_agent::vpc_cni_checkpoint`]).
//! `--help` lists the variables (reference: docs/configuration.md), `--version` the version;
//! any other argument is an error (exit status 2).

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Node agent of vpcnet (the VPC CNI's ipamd role)
///
/// Keeps a warm pool of VPC addresses on the node's ENIs through EC2, hands them to the
/// vpcnet-cni plugin over a Unix socket, checkpoints its state and serves introspection and
/// metrics. Without a command it runs until SIGTERM.
#[derive(Parser)]
#[command(name = "vpcnet-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Write vpcnet's checkpoint in the VPC CNI's format, for a rollback to the VPC CNI
    /// (docs/migration.md). Stop vpcnet-agent first; uses the agent's environment.
    ExportVpcCniCheckpoint {
        /// vpcnet's checkpoint to read [default: $VPCNET_CHECKPOINT_PATH]
        #[arg(long, value_name = "PATH")]
        from: Option<PathBuf>,
        /// The VPC CNI's checkpoint to write [default: $VPCNET_VPC_CNI_CHECKPOINT]
        #[arg(long, value_name = "PATH")]
        to: Option<PathBuf>,
        /// Network name the VPC CNI's DEL looks pods up by [default: aws-cni]
        #[arg(long, value_name = "NAME")]
        network_name: Option<String>,
    },
}

/// Printed after the options by `--help`.
fn configuration_help() -> String {
    format!(
        "Configuration: environment variables only, read once at start. An invalid value, or\n\
         a VPC CNI setting vpcnet refuses, stops the agent with exit status 2, naming each.\n\
         Meaning and accepted values: docs/configuration.md in the vpcnet repository.\n\
         A running agent's values: `vpcnet inspect env`.\n\n\
         Environment variables and defaults:\n{}",
        vpcnet_agent::config::Config::variables_help()
    )
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    use vpcnet_agent::config::{Config, ConfigError};
    // The command line first: --help and --version work whatever the environment holds.
    let matches = Cli::command()
        .after_help(configuration_help())
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let config = match Config::from_process_env() {
        Ok(c) => c,
        Err(e) => return refuse_to_start(&e),
    };
    if let Some(Command::ExportVpcCniCheckpoint {
        from,
        to,
        network_name,
    }) = cli.command
    {
        return match vpcnet_agent::vpc_cni_checkpoint::export_command(
            from,
            to,
            network_name,
            &config,
        ) {
            Ok(line) => {
                println!("{line}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("vpcnet-agent export-vpc-cni-checkpoint: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| {
        EnvFilter::new(
            config
                .log_level
                .to_ascii_lowercase()
                .replace("fatal", "error"),
        )
    });
    let writer = match vpcnet_agent::log_file::open(&config.log_file) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("vpcnet-agent: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(vpcnet_log::JsonLines::new())
        .with_writer(writer)
        .init();
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    let unknown = Config::unknown_variables(names.iter().map(String::as_str));
    if !unknown.is_empty() {
        tracing::warn!(
            "ignoring {}: neither a vpcnet setting nor one of the VPC CNI v{} (a typo, or a \
             setting of another VPC CNI version?)",
            unknown.join(", "),
            vpcnet_agent::config::vpc_cni_names::version()
                .unwrap_or_default()
                .trim_start_matches('v')
        );
    }
    let opts = match vpcnet_agent::options_from_config(&config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("vpcnet-agent: invalid configuration: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    match vpcnet_agent::run(opts, vpcnet_agent::AgentDeps::from_config(&config)).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Already said in the one error line of the task's supervisor.
        Err(e) if e.is::<vpcnet_agent::EssentialTaskFailed>() => std::process::ExitCode::FAILURE,
        // A setting refused once the cloud was asked (ENABLE_SUBNET_DISCOVERY).
        Err(e) if e.is::<ConfigError>() => {
            refuse_to_start(e.downcast_ref::<ConfigError>().unwrap())
        }
        Err(e) => {
            tracing::error!("vpcnet-agent failed: {e:#}");
            eprintln!("vpcnet-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Exit status 2 with every invalid or refused variable, one line each.
fn refuse_to_start(e: &vpcnet_agent::config::ConfigError) -> std::process::ExitCode {
    if e.all().any(|i| i.refused) {
        eprintln!("vpcnet-agent: cannot start with this configuration: {e}");
    } else {
        eprintln!("vpcnet-agent: invalid configuration: {e}");
    }
    std::process::ExitCode::from(2)
}
