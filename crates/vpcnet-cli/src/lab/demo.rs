//! `vpcnet lab demo` with Kubernetes: two nodes, a Deployment of busybox `httpd` pods behind a
//! ClusterIP Service, the cluster as kubectl shows it, which ENI each pod's address lives on,
//! pings pod→pod (same ENI, across ENIs, across nodes) and pod→node, and an HTTP request from a
//! pod to the Service's ClusterIP (through kube-proxy). The lab is torn down at the end, also on
//! failure.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{bail, Result};
use vpcnet_lab::kube::workload::{httpd_manifest, Placement, PodInfo};
use vpcnet_lab::lab::{progress, Lab, UpOptions};

use vpcnet_introspection::text::table;

/// The demo Deployment's and Service's name.
pub const APP: &str = "web";

/// One connectivity check of the demo.
struct Check {
    kind: &'static str,
    from: String,
    to: String,
    result: Result<String>,
}

/// Runs the demo; errors if a pod did not start on an ENI address or a check failed.
pub fn run(opts: &UpOptions, count: usize) -> Result<()> {
    let failed = vpcnet_lab::lab::with_lab(opts, |lab| steps(lab, count))?;
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    println!(
        "demo passed: every pod runs with a VPC IP of an ENI on its node; all pings and the ClusterIP request answered"
    );
    Ok(())
}

fn steps(lab: &Lab, count: usize) -> Result<usize> {
    let kubectl = lab.kube().kubectl()?;
    // Most pods on n1 (within 8 of the other nodes), so n1 needs more addresses than its
    // primary ENI's secondary IPs and pods on a second ENI appear.
    let placement = Placement {
        prefer_node: Some("n1".into()),
        max_skew: 8,
        ..Default::default()
    };
    progress(&format!(
        "creating Deployment {APP} ({count} busybox httpd pods, image imported on each node) and Service {APP}"
    ));
    kubectl.apply(&httpd_manifest(APP, count as u32, &placement))?;
    let pods =
        lab.workloads()
            .wait_pods_ready(&format!("app={APP}"), count, Duration::from_secs(240))?;
    println!();
    print!("{}", kubectl.run(&["get", "nodes", "-o", "wide"])?);
    println!();
    print!(
        "{}",
        kubectl.run(&["get", "pods", "-o", "wide", "-l", &format!("app={APP}")])?
    );
    println!();
    let enis = lab.cloud().enis()?;
    let s = lab.state()?;
    let lab_node = |k8s: &str| {
        s.nodes
            .iter()
            .find(|n| n.k8s_name == k8s)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| k8s.to_string())
    };
    let mut placed: Vec<(PodInfo, String, Option<vpcnet_lab::cloud::Owner>)> = pods
        .into_iter()
        .map(|p| {
            let owner = p.ip.and_then(|ip| vpcnet_lab::cloud::owner(&enis, ip));
            let node = lab_node(&p.node);
            (p, node, owner)
        })
        .collect();
    placed.sort_by_key(|(p, n, o)| {
        (
            n.clone(),
            o.as_ref().map(|o| o.device_index),
            p.ip.map(u32::from),
        )
    });
    let mut rows = vec![vec![
        "POD".into(),
        "NODE".into(),
        "IP".into(),
        "ENI".into(),
        "DEVICE".into(),
    ]];
    let mut misplaced = 0;
    for (p, node, owner) in &placed {
        let instance = s
            .nodes
            .iter()
            .find(|n| &n.name == node)
            .map(|n| n.instance_id.as_str());
        let (eni, dev) = match owner {
            Some(o) if Some(o.instance_id.as_str()) == instance => {
                (o.eni_id.clone(), format!("eth{}", o.device_index))
            }
            _ => {
                misplaced += 1;
                ("(not an ENI of this node!)".into(), "-".into())
            }
        };
        rows.push(vec![
            p.name.clone(),
            node.clone(),
            p.ip.map(|i| i.to_string()).unwrap_or_default(),
            eni,
            dev,
        ]);
    }
    print!("{}", table(&rows));
    println!();
    print!("{}", crate::lab::enis_table(lab, &enis)?);
    println!();
    if misplaced > 0 {
        bail!("{misplaced} pod(s) have an address that is not on an ENI of their node");
    }

    let checks = connectivity(lab, &placed)?;
    let mut rows = vec![vec![
        "CHECK".into(),
        "FROM".into(),
        "TO".into(),
        "RESULT".into(),
    ]];
    let mut failed = 0;
    for c in checks {
        let result = match c.result {
            Ok(r) => r,
            Err(e) => {
                failed += 1;
                format!("FAILED: {e:#}")
            }
        };
        rows.push(vec![c.kind.into(), c.from, c.to, result]);
    }
    print!("{}", table(&rows));
    println!();
    Ok(failed)
}

type Placed = (PodInfo, String, Option<vpcnet_lab::cloud::Owner>);

fn ping_result(r: Result<bool>) -> Result<String> {
    match r {
        Ok(true) => Ok("ok".into()),
        Ok(false) => bail!("no reply"),
        Err(e) => Err(e),
    }
}

fn connectivity(lab: &Lab, placed: &[Placed]) -> Result<Vec<Check>> {
    let dev = |x: &Placed| x.2.as_ref().map(|o| o.device_index);
    let label = |x: &Placed| {
        let d = dev(x).map(|d| format!("eth{d}")).unwrap_or("?".into());
        format!("{} ({} {d})", x.0.name, x.1)
    };
    let target = |x: &Placed| {
        let ip = x.0.ip.map(|i| i.to_string()).unwrap_or_default();
        format!("{} {ip}", x.0.name)
    };
    let ping = |kind: &'static str, a: &Placed, b: &Placed| Check {
        kind,
        from: label(a),
        to: target(b),
        result: match b.0.ip {
            Some(ip) => ping_result(lab.workloads().pod_ping(&a.0.name, ip)),
            None => Err(anyhow::anyhow!("{} has no IP", b.0.name)),
        },
    };
    let mut checks = Vec::new();
    let n1_eth0: Vec<&Placed> = placed
        .iter()
        .filter(|x| x.1 == "n1" && dev(x) == Some(0))
        .collect();
    let n1_other = placed.iter().find(|x| x.1 == "n1" && dev(x) > Some(0));
    if n1_eth0.len() >= 2 {
        checks.push(ping("same ENI", n1_eth0[0], n1_eth0[1]));
    }
    if let (Some(a), Some(b)) = (n1_eth0.first(), n1_other) {
        checks.push(ping("across ENIs", b, a));
        checks.push(ping("across ENIs", a, b));
    }
    let n2 = placed.iter().find(|x| x.1 != "n1");
    if let (Some(a), Some(b)) = (n1_other.or(n1_eth0.first().copied()), n2) {
        checks.push(ping("across nodes", a, b));
        checks.push(ping("across nodes", b, a));
    }
    let s = lab.state()?;
    if let Some(a) = placed.first() {
        let ip: Ipv4Addr = s.node(&a.1)?.primary_ip.parse()?;
        checks.push(Check {
            kind: "pod -> node",
            from: label(a),
            to: format!("{} {ip}", a.1),
            result: ping_result(lab.workloads().pod_ping(&a.0.name, ip)),
        });
    }
    let svc = lab.workloads().service_ip(APP)?;
    if let Some(a) = n2.or(placed.first()) {
        checks.push(Check {
            kind: "pod -> ClusterIP (HTTP)",
            from: label(a),
            to: format!("service {APP} {svc}:80"),
            result: lab
                .workloads()
                .wait_http(&a.0.name, svc, 80, Duration::from_secs(30))
                .map(|body| body.trim().to_string()),
        });
    }
    Ok(checks)
}
