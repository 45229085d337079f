//! `vpcnet-bootstrap`: see the library docs. Exit codes: 0 done, 1 failed, 2 bad input.

use clap::Parser;
use vpcnet_bootstrap::cloud::{AwsEc2, AwsEks};
use vpcnet_bootstrap::facts::RealHost;
use vpcnet_bootstrap::startup::Systemctl;
use vpcnet_bootstrap::{Adapters, BootstrapArgs, BootstrapError};

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
    if let Err(e) = vpcnet_bootstrap::check_input(&args) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    let result = rt.block_on(async {
        let imds = vpcnet_imds::Imds::new();
        // IMDS may refuse connections early in boot: wait for it (bounded), then call EC2 and
        // EKS in the instance's own region. Clients are only built if needed.
        let region =
            vpcnet_bootstrap::facts::await_imds(&imds, vpcnet_bootstrap::imds_budget(&args))
                .await?;
        let ec2 = AwsEc2::new(vpcnet_ec2::Ec2Options {
            region: Some(region.clone()),
            calls: vpcnet_bootstrap::cloud::bootstrap_call_settings(),
            ..Default::default()
        });
        let eks = AwsEks::new(vpcnet_eks::EksOptions {
            region: Some(region),
            ..Default::default()
        });
        let host = RealHost {
            root: args.root.clone(),
        };
        let adapters = Adapters {
            imds: &imds,
            ec2: &ec2,
            eks: &eks,
            host: &host,
            system: &Systemctl,
        };
        vpcnet_bootstrap::run(
            &args,
            &adapters,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )
        .await
    });
    match result {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let bad_input = e
                .downcast_ref::<BootstrapError>()
                .is_some_and(BootstrapError::is_bad_input);
            std::process::ExitCode::from(if bad_input { 2 } else { 1 })
        }
    }
}
