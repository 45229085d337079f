//! `vpcnet max-pods` (issue 5 builds this out).

use clap::Args as ClapArgs;

#[derive(ClapArgs)]
pub struct Args {
    /// Instance types, e.g. m5.large.
    #[arg(long = "instance-type", num_args = 0..)]
    instance_type_flag: Vec<String>,
    types: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    for t in args.instance_type_flag.iter().chain(&args.types) {
        let l = vpcnet_limits::lookup(t).ok_or_else(|| anyhow::anyhow!("unknown instance type {t}"))?;
        println!("{}", vpcnet_limits::max_pods(l, Default::default()).max_pods);
    }
    Ok(())
}
