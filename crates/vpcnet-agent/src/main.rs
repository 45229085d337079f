//! `vpcnet-agent` binary: configuration from the environment (the VPC CNI's variable
//! names), then run until SIGTERM. `vpcnet-agent export-vpc-cni-checkpoint` writes the
//! checkpoint in the VPC CNI's format instead (the rollback; [`vpcnet_agent::vpc_cni_checkpoint`]).

use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    use vpcnet_agent::config::{Config, ConfigError};
    let config = match Config::from_process_env() {
        Ok(c) => c,
        Err(e) => return refuse_to_start(&e),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("export-vpc-cni-checkpoint") {
        return match vpcnet_agent::vpc_cni_checkpoint::export_command(&args[1..], &config) {
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
    tracing_subscriber::fmt().with_env_filter(filter).init();
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
    match vpcnet_agent::run(opts).await {
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
