//! `vpcnet-agent` binary: configuration from the environment (the VPC CNI's variable
//! names), then run until SIGTERM. `vpcnet-agent export-vpc-cni-checkpoint` writes the
//! checkpoint in the VPC CNI's format instead (the rollback; [`vpcnet_agent::vpc_cni_checkpoint`]).

use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = match vpcnet_agent::config::Config::from_process_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vpcnet-agent: invalid configuration: {e}");
            return std::process::ExitCode::from(2);
        }
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
        Err(e) => {
            tracing::error!("vpcnet-agent failed: {e:#}");
            eprintln!("vpcnet-agent: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
