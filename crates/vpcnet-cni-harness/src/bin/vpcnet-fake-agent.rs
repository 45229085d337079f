//! `vpcnet-fake-agent --socket PATH`: serves the fake CniBackend until killed (for benchmarks
//! and manual runs of vpcnet-cni without the real agent).

use clap::Parser;
use vpcnet_cni_harness::fake_agent::{FakeAgent, FakeConfig};

#[derive(Parser)]
struct Args {
    /// Unix socket to listen on.
    #[arg(long, default_value = "/var/run/vpcnet/agent.sock")]
    socket: std::path::PathBuf,
    /// Pool size (addresses from 10.0.1.10 on).
    #[arg(long, default_value_t = 200)]
    count: u32,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let _agent = FakeAgent::start(
        &a.socket,
        FakeConfig {
            count: a.count,
            ..Default::default()
        },
    )?;
    eprintln!("fake agent listening on {}", a.socket.display());
    loop {
        std::thread::park();
    }
}
