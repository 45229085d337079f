//! `vpcnet-bench pods`: pod start-up on one node with vpcnet and with Debian's reference
//! `bridge` + `host-local` plugins on the same kubelet, in one run (scripts/bench-pods.sh).
//!
//! [`use_bridge_cni`] puts a bridge conflist in the node's `/etc/cni/net.d` that sorts before
//! vpcnet's (containerd's CRI uses the first), and removes it again.

use std::time::Duration;

use anyhow::Result;
use clap::Args as ClapArgs;
use serde_json::json;
use vpcnet_introspection::text::table;
use vpcnet_lab::lab::{parse_agent_env, progress, with_lab, Lab, UpOptions};

use crate::pod_timing::{self, quantile, PodTimes};

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name.
    #[arg(long, default_value = "bench-pods")]
    name: String,
    /// EC2 instance type of the node.
    #[arg(long, default_value = "m5.xlarge")]
    instance_type: String,
    /// Replicas of the burst Deployment.
    #[arg(long, default_value_t = 30)]
    replicas: usize,
    /// Single pods created one after another.
    #[arg(long, default_value_t = 20)]
    singles: usize,
    /// Extra agent environment, KEY=VALUE; repeatable.
    #[arg(long = "agent-env", value_name = "KEY=VALUE")]
    agent_env: Vec<String>,
}

/// File name of the bridge conflist (sorts before `10-vpcnet.conflist`).
pub const BRIDGE_CONFLIST: &str = "05-bench-bridge.conflist";

/// Debian's reference plugins: a Linux bridge `cni0` with the gateway, host-local addresses
/// from a node-local /24, masquerade of pod traffic, portmap (the usual single-node setup).
pub fn bridge_conflist() -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "bench-bridge",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true,
             "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// Makes the node's containerd use the bridge + host-local conflist (`on`) or vpcnet's
/// again (`off`), waiting 2 s for containerd to reload its CNI configuration.
fn use_bridge_cni(lab: &Lab, node_name: &str, on: bool) -> Result<()> {
    let s = lab.state()?;
    let path = s.node(node_name)?.cni_conf_dir().join(BRIDGE_CONFLIST);
    if on {
        std::fs::write(&path, bridge_conflist())?;
    } else if path.exists() {
        std::fs::remove_file(&path)?;
    }
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// One plugin's figures.
struct Row {
    plugin: &'static str,
    burst: (Duration, Duration),
    singles: Vec<PodTimes>,
}

fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .unwrap_or("-".into())
}

fn q(v: &[PodTimes], f: fn(&PodTimes) -> Option<Duration>, p: f64) -> Option<Duration> {
    quantile(&v.iter().filter_map(f).collect::<Vec<_>>(), p)
}

pub fn run(a: &Args) -> Result<()> {
    let mut o = UpOptions::new(&a.name);
    o.instance_type = a.instance_type.clone();
    o.agent_env = parse_agent_env(&a.agent_env)?;
    let rows = with_lab(&o, |lab| measure(lab, a))?;
    print!("{}", render(a, &rows));
    Ok(())
}

fn measure(lab: &Lab, a: &Args) -> Result<Vec<Row>> {
    let timeout = Duration::from_secs(300);
    let mut rows = Vec::new();
    for (plugin, bridge) in [("vpcnet", false), ("bridge + host-local", true)] {
        use_bridge_cni(lab, "n1", bridge)?;
        progress(&format!("{plugin}: burst of {} pods", a.replicas));
        let tag = if bridge { "br" } else { "vn" };
        let burst = pod_timing::burst(lab, &format!("burst-{tag}"), a.replicas, None, timeout)?;
        progress(&format!("{plugin}: {} single pods", a.singles));
        let singles = pod_timing::singles(lab, &format!("single-{tag}"), a.singles, None, timeout)?;
        rows.push(Row {
            plugin,
            burst,
            singles,
        });
    }
    use_bridge_cni(lab, "n1", false)?;
    Ok(rows)
}

fn render(a: &Args, rows: &[Row]) -> String {
    let mut t = vec![vec![
        "PLUGIN".to_string(),
        format!("{} PODS: ALL RUNNING ms", a.replicas),
        "ALL READY ms".into(),
        "ONE POD: RUNNING p50 ms".into(),
        "p90".into(),
        "READY p50 ms".into(),
        "p90".into(),
    ]];
    let cells = |r: &Row| {
        vec![
            Some(r.burst.0),
            Some(r.burst.1),
            q(&r.singles, |t| t.running, 0.5),
            q(&r.singles, |t| t.running, 0.9),
            q(&r.singles, |t| t.ready, 0.5),
            q(&r.singles, |t| t.ready, 0.9),
        ]
    };
    for r in rows {
        let mut line = vec![r.plugin.to_string()];
        line.extend(cells(r).into_iter().map(ms));
        t.push(line);
    }
    if let [v, b] = rows {
        let mut line = vec!["ratio vpcnet / bridge".to_string()];
        for (x, y) in cells(v).into_iter().zip(cells(b)) {
            line.push(match (x, y) {
                (Some(x), Some(y)) if !y.is_zero() => {
                    format!("{:.2}", x.as_secs_f64() / y.as_secs_f64())
                }
                _ => "-".into(),
            });
        }
        t.push(line);
    }
    table(&t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_conflist_is_a_valid_chain() {
        let v: serde_json::Value = serde_json::from_str(&bridge_conflist()).unwrap();
        assert_eq!(v["plugins"][0]["type"], "bridge");
        assert_eq!(v["plugins"][0]["ipam"]["type"], "host-local");
    }
}
