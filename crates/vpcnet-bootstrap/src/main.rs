//! `vpcnet-bootstrap`: see the library docs. Exit codes: 0 done, 1 failed, 2 bad input.

use clap::Parser;
use vpcnet_bootstrap::cloud::{AwsEc2, Imds};
use vpcnet_bootstrap::facts::RealHost;
use vpcnet_bootstrap::{BootstrapArgs, BootstrapError};

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = BootstrapArgs::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    // Bad input fails here, before IMDS or EC2 is contacted.
    if let Err(e) = vpcnet_bootstrap::load_node_config(&args)
        .and_then(|nc| vpcnet_bootstrap::Settings::new(&args, nc.as_ref()))
    {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    let result = rt.block_on(async {
        let imds = vpcnet_ec2::Imds::new();
        // EC2 is called in the instance's own region; the client is only built if needed.
        let region = Imds::get(&imds, "placement/region").await.ok().flatten();
        let ec2 = AwsEc2::new(vpcnet_ec2::Ec2Options {
            region,
            calls: vpcnet_bootstrap::cloud::bootstrap_call_settings(),
            ..Default::default()
        });
        let host = RealHost {
            root: args.root.clone(),
        };
        vpcnet_bootstrap::run(
            &args,
            &imds,
            &ec2,
            &host,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )
        .await
    });
    match result {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let bad_input = matches!(
                e.downcast_ref::<BootstrapError>(),
                Some(
                    BootstrapError::Invalid { .. }
                        | BootstrapError::Missing { .. }
                        | BootstrapError::NodeConfig { .. }
                )
            );
            std::process::ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}
