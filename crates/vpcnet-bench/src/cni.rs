//! `vpcnet-bench cni`: ADD and DEL latency of vpcnet-cni (warm pool from the fake agent) against
//! the reference `ptp` + `host-local` plugins, same namespaces, same run, interleaved.
//!
//! Each iteration creates a pod namespace (not timed), then times the plugin's ADD and DEL as the
//! runtime sees them (fork, exec, run, exit), run inside a "node" namespace created for the
//! benchmark. Prints p50, p90 and p99 per plugin and verb, and the ptp/vpcnet ratio. (With few
//! iterations p99 is the largest sample or next to it: use 200 or more for a meaningful p99.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use serde_json::json;
use vpcnet_cni_harness::fake_agent::{FakeAgent, FakeConfig};
use vpcnet_cni_harness::netns::TestNetns;
use vpcnet_cni_harness::runtime::{dir_of, Attachment, Runtime};

#[derive(ClapArgs)]
pub struct Args {
    /// The vpcnet-cni binary (build it with `cargo build --release -p vpcnet-cni`).
    #[arg(long)]
    plugin: PathBuf,
    /// Directory of the reference plugins (ptp, host-local).
    #[arg(long, default_value = "/usr/lib/cni")]
    cni_dir: PathBuf,
    /// Iterations per plugin (after one warm-up).
    #[arg(long, default_value_t = 50)]
    iterations: usize,
}

struct Series {
    add: Vec<Duration>,
    del: Vec<Duration>,
    both: Vec<Duration>,
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn one(rt: &Runtime, name: &str, i: usize) -> anyhow::Result<(Duration, Duration)> {
    let pod = TestNetns::create()?;
    let att = Attachment {
        container_id: format!("bench-{}-{i}", name.replace('+', "-")),
        netns: pod.path().display().to_string(),
        ifname: "eth0".into(),
        args: vec![
            ("IgnoreUnknown".into(), "1".into()),
            ("K8S_POD_NAMESPACE".into(), "bench".into()),
            (
                "K8S_POD_NAME".into(),
                format!("{}-{i}", name.replace('+', "-")),
            ),
        ],
        capability_args: json!({}),
    };
    let t = Instant::now();
    rt.add(&att).map_err(|e| anyhow::anyhow!("{e}"))?;
    let add = t.elapsed();
    let t = Instant::now();
    rt.del(&att).map_err(|e| anyhow::anyhow!("{e}"))?;
    let del = t.elapsed();
    Ok((add, del))
}

/// The kernel's share: one veth pair created (peer straight into a pod namespace) and deleted
/// over netlink from inside this process (no fork/exec), as vpcnet-cni does it.
fn kernel_veth(
    rt: &tokio::runtime::Runtime,
    node: &TestNetns,
    i: usize,
) -> anyhow::Result<(Duration, Duration)> {
    use vpcnet_datapath::{netns, nl, pod};
    let pod_ns = TestNetns::create()?;
    rt.block_on(async {
        let node_fd = netns::open(&node.path())?;
        let h = netns::connect_in(&node_fd, &node.path())?;
        let pod_fd = netns::open(&pod_ns.path())?;
        let spec = pod::PodSpec {
            ip: std::net::Ipv4Addr::new(10, 98, 0, 1),
            host_veth: format!("benchk{i}"),
            container_ifname: "eth0".into(),
            mtu: 9001,
            route_table: 0,
            interface: 0,
        };
        let t = Instant::now();
        pod::create_veth(&h, &pod_fd, &spec).await?;
        let create = t.elapsed();
        let link = nl::link_by_name(&h, &spec.host_veth)
            .await?
            .expect("veth just created");
        let t = Instant::now();
        nl::delete_link(&h, link.index, &spec.host_veth).await?;
        Ok((create, t.elapsed()))
    })
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let node = TestNetns::create()?;
    let tmp = tempfile_dir()?;
    let _agent = FakeAgent::start(
        &tmp.join("agent.sock"),
        FakeConfig {
            secondary_from: 0,
            ..Default::default()
        },
    )?;
    let cni_path = vec![dir_of(&a.plugin), a.cni_dir.clone()];
    let plugin_type = a.plugin.file_name().unwrap().to_string_lossy().to_string();
    let vpcnet_list = json!({
        "cniVersion": "1.0.0", "name": "aws-cni",
        "plugins": [{ "type": a.plugin.file_name().unwrap().to_string_lossy(),
            "vethPrefix": "eni", "mtu": "9001",
            "agentSocket": tmp.join("agent.sock"), "agentTimeout": "5s",
            "pluginLogFile": "", "pluginLogLevel": "Info" }]
    });
    let ptp_list = json!({
        "cniVersion": "1.0.0", "name": "bench-ptp",
        "plugins": [{ "type": "ptp", "ipMasq": false, "mtu": 9001,
            "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.99.0.0/16" }]],
                      "dataDir": tmp.join("host-local") } }]
    });
    // The same reference plugins with `ipMasq: true`, the common ptp configuration: ptp then
    // installs a per-pod iptables SNAT chain (in the bench's node namespace) on ADD and removes
    // it on DEL. vpcnet does SNAT once per node in the agent, so this row is what a pod start
    // costs with a typical ptp conflist; the row above is ptp at its leanest.
    let ptp_masq_list = json!({
        "cniVersion": "1.0.0", "name": "bench-ptp-masq",
        "plugins": [{ "type": "ptp", "ipMasq": true, "mtu": 9001,
            "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.98.0.0/16" }]],
                      "dataDir": tmp.join("host-local-masq") } }]
    });
    let runs: Vec<(&str, Runtime)> = vec![
        (
            "vpcnet-cni",
            Runtime::new(
                &vpcnet_list.to_string(),
                cni_path.clone(),
                Some(node.path()),
            )?,
        ),
        (
            "ptp+host-local",
            Runtime::new(&ptp_list.to_string(), cni_path.clone(), Some(node.path()))?,
        ),
        (
            "ptp+h-l-ipmasq",
            Runtime::new(
                &ptp_masq_list.to_string(),
                cni_path.clone(),
                Some(node.path()),
            )?,
        ),
    ];
    let mut series: Vec<Series> = runs
        .iter()
        .map(|_| Series {
            add: vec![],
            del: vec![],
            both: vec![],
        })
        .collect();
    for (name, rt) in &runs {
        one(rt, name, usize::MAX)?; // warm-up (page cache, first socket)
    }
    for i in 0..a.iterations {
        for ((name, rt), s) in runs.iter().zip(series.iter_mut()) {
            let (add, del) = one(rt, name, i)?;
            s.add.push(add);
            s.del.push(del);
            s.both.push(add + del);
        }
    }
    // Process floor: the same fork/exec/setns path running vpcnet-cni VERSION (no netlink, no agent).
    let mut spawn = Vec::new();
    for _ in 0..a.iterations {
        let e = runs[0].1.exec(
            &plugin_type,
            "VERSION",
            None,
            &json!({"cniVersion": "1.0.0"}),
        )?;
        anyhow::ensure!(e.status == 0, "VERSION failed: {}", e.stdout);
        spawn.push(e.elapsed);
    }
    let mut kernel = Series {
        add: vec![],
        del: vec![],
        both: vec![],
    };
    for i in 0..a.iterations {
        let (c, d) = kernel_veth(&rt, &node, i)?;
        kernel.add.push(c);
        kernel.del.push(d);
        kernel.both.push(c + d);
    }
    println!(
        "{} iterations each, interleaved; times in ms (fork+exec+run, as a runtime sees it)",
        a.iterations
    );
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "plugin", "ADD p50", "p90", "p99", "DEL p50", "p90", "p99", "A+D p50", "p90", "p99"
    );
    let row = |name: &str, s: &Series| {
        format!(
            "{:<16} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
            name,
            ms(pct(&s.add, 0.5)),
            ms(pct(&s.add, 0.9)),
            ms(pct(&s.add, 0.99)),
            ms(pct(&s.del, 0.5)),
            ms(pct(&s.del, 0.9)),
            ms(pct(&s.del, 0.99)),
            ms(pct(&s.both, 0.5)),
            ms(pct(&s.both, 0.9)),
            ms(pct(&s.both, 0.99)),
        )
    };
    for ((name, _), s) in runs.iter().zip(&series) {
        println!("{}", row(name, s));
    }
    println!(
        "{}   <- kernel only: one veth pair create / delete over netlink, in-process",
        row("(veth floor)", &kernel)
    );
    println!(
        "{:<16} {:>8.2} {:>8.2} {:>8.2}   <- process only: vpcnet-cni VERSION through the same fork/exec path",
        "(spawn floor)",
        ms(pct(&spawn, 0.5)),
        ms(pct(&spawn, 0.9)),
        ms(pct(&spawn, 0.99)),
    );
    for (peer, (name, _)) in runs.iter().enumerate().skip(1) {
        let ratio = |f: fn(&Series) -> &Vec<Duration>| {
            ms(pct(f(&series[peer]), 0.5)) / ms(pct(f(&series[0]), 0.5))
        };
        println!(
            "ratio {name} / vpcnet-cni (medians): ADD {:.1}x, DEL {:.1}x, ADD+DEL {:.1}x (goal >= 10x)",
            ratio(|s| &s.add),
            ratio(|s| &s.del),
            ratio(|s| &s.both)
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("vpcnet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
