//! End-to-end acceptance of the lab's load balancers: ELBv2 on the lab cloud through
//! aws-sdk-elasticloadbalancingv2, HAProxy carrying the traffic inside the lab's namespaces,
//! three `httpd` containers on two nodes registered by IP behind a `network` load balancer.
//! Needs root, `haproxy` and the workspace binaries (`cargo build --workspace --all-targets`);
//! fails when not root.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use common::{sh, wait_until, with_lab};
use vpcnet_elbv2::{HealthCheck, HealthState, LoadBalancerType};
use vpcnet_lab::containers::ContainerInfo;
use vpcnet_lab::lab::Lab;
use vpcnet_lab::lbctl::{LabLb, LbSettings};
use vpcnet_lab::procs::ProcRecord;
use vpcnet_lab::web::httpd_command;

const INTERVAL: u32 = 5;
const TIMEOUT: u32 = 2;
const HEALTHY: u32 = 2;
const UNHEALTHY: u32 = 2;
const DELAY: u32 = 10;

fn state_of(lab: &Lab, lb: &str, ip: Ipv4Addr) -> Option<(HealthState, Option<String>)> {
    lab.lbs()
        .target_health(lb)
        .unwrap()
        .into_iter()
        .find(|h| h.target.id == ip.to_string())
        .map(|h| (h.state, h.reason))
}

/// Sends load through load balancer `web` from node `from` for `secs` seconds; asserts no request failed and
/// returns the targets that answered.
fn answered_by(lab: &Lab, from: &str, secs: u64) -> Vec<String> {
    let r = lab
        .lbs()
        .load("web", from, "/", 4, Duration::from_secs(secs))
        .unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.errors, 0, "{r:?}");
    assert!(r.requests > 10, "{r:?}");
    r.by_responder.keys().cloned().collect()
}

/// Makes container `c` stop answering (its namespace drops TCP to `port`), as a hung server.
fn stop_answering(c: &ContainerInfo, port: u16) {
    let script = format!(
        "table inet lbtest {{\n  chain input {{\n    type filter hook input priority 0;\n    tcp dport {port} drop\n  }}\n}}\n"
    );
    let mut child = std::process::Command::new("nsenter")
        .args([&format!("--net=/proc/{}/ns/net", c.pid), "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "nft in {}", c.id);
}

/// A long-lived HTTP stream through the load balancer, opened from node `from`: returns the
/// target that answers it and the connection, positioned after the first body line.
fn open_stream(lab: &Lab, from: &str, l: &LabLb) -> (String, BufReader<TcpStream>) {
    let netns = lab.state().unwrap().node(from).unwrap().netns.clone();
    let to = l.endpoint();
    let stream = vpcnet_lab::spawn::in_netns(&netns, move || Ok(TcpStream::connect(to)?)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    write!(w, "GET /cgi-bin/stream HTTP/1.0\r\nHost: lb\r\n\r\n").unwrap();
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    // status line and headers
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line == "\n" || line.is_empty() {
            break;
        }
    }
    line.clear();
    r.read_line(&mut line).unwrap();
    (line.trim().to_string(), r)
}

#[test]
fn network_load_balancer_carries_traffic_checks_health_and_drains() {
    let mut haproxy: Option<ProcRecord> = None;
    let kept = &mut haproxy;
    with_lab(
        "lb",
        |o| o.nodes = 2,
        |lab| {
            let port = 8080;
            let serve = |id: &str| httpd_command(id, port);
            let mut cs = lab
                .containers()
                .run_with("n1", &["c1".into(), "c2".into()], &serve)
                .unwrap();
            cs.extend(
                lab.containers()
                    .run_with("n2", &["c3".into()], &serve)
                    .unwrap(),
            );
            let ip = |id: &str| cs.iter().find(|c| c.id == id).unwrap().ip;

            let l = lab
                .lbs()
                .create_lb(&LbSettings {
                    name: "web".into(),
                    lb_type: LoadBalancerType::Network,
                    port: 80,
                    target_port: port,
                    health: HealthCheck {
                        interval_seconds: Some(INTERVAL),
                        timeout_seconds: Some(TIMEOUT),
                        healthy_threshold: Some(HEALTHY),
                        unhealthy_threshold: Some(UNHEALTHY),
                        ..HealthCheck::default()
                    },
                    deregistration_delay: Some(DELAY),
                })
                .unwrap();
            assert_eq!(l.lb.state, "active", "{:?}", l.lb.state_reason);
            assert!("10.0.1.0/24"
                .parse::<ipnet::Ipv4Net>()
                .unwrap()
                .contains(&l.address));

            // HAProxy runs in the lab's own namespace for the load balancer, recorded in the state
            let s = lab.state().unwrap();
            let haproxy: ProcRecord = s
                .processes
                .iter()
                .find(|p| p.role == "haproxy web")
                .cloned()
                .expect("haproxy recorded in the lab state");
            assert!(haproxy.alive());
            let lb_ns = s
                .namespaces
                .iter()
                .find(|n| n.ends_with("-lb1"))
                .cloned()
                .expect("load balancer namespace recorded");
            assert!(
                vpcnet_lab::netns::pids_in(&lb_ns).contains(&haproxy.pid),
                "haproxy runs inside the load balancer's namespace {lb_ns}"
            );
            *kept = Some(haproxy.clone());

            // three targets by IP: initial until HEALTHY checks pass, then healthy
            lab.lbs()
                .register("web", &["c1".into(), "c2".into(), "c3".into()])
                .unwrap();
            let h = lab.lbs().target_health("web").unwrap();
            assert_eq!(h.len(), 3);
            assert!(h.iter().all(|t| t.state == HealthState::Initial), "{h:?}");
            let t0 = Instant::now();
            wait_until("three healthy targets", Duration::from_secs(40), || {
                lab.lbs()
                    .target_health("web")
                    .unwrap()
                    .iter()
                    .all(|t| t.state == HealthState::Healthy)
            });
            eprintln!("healthy after {:?}", t0.elapsed());

            // requests through the load balancer reach all three
            assert_eq!(answered_by(lab, "n1", 3), vec!["c1", "c2", "c3"]);

            // c3 stops answering: unhealthy within interval × threshold (+ the last check's
            // timeout and the time to the first check), then no more requests
            stop_answering(cs.iter().find(|c| c.id == "c3").unwrap(), port);
            let stopped = Instant::now();
            let bound =
                Duration::from_secs(u64::from(INTERVAL * UNHEALTHY + TIMEOUT * UNHEALTHY + 1));
            wait_until("c3 unhealthy", bound, || {
                state_of(lab, "web", ip("c3")).is_some_and(|(s, _)| s == HealthState::Unhealthy)
            });
            let took = stopped.elapsed();
            let (_, reason) = state_of(lab, "web", ip("c3")).unwrap();
            assert_eq!(reason.as_deref(), Some("Target.Timeout"));
            eprintln!(
                "c3 unhealthy after {took:?} (interval {INTERVAL} s × threshold {UNHEALTHY})"
            );
            assert_eq!(
                answered_by(lab, "n2", 2),
                vec!["c1", "c2"],
                "no request reaches the unhealthy target"
            );

            // a long-lived connection on c1, then c1 deregistered: draining for the delay, the
            // connection keeps flowing, no new connection reaches c1
            let mut streams = Vec::new();
            let (mut on_c1, mut rest) = loop {
                let (who, s) = open_stream(lab, "n1", &l);
                if who == "c1" {
                    break (s, streams);
                }
                assert!(who == "c2", "a stream answered by {who:?}");
                streams.push(s);
                assert!(streams.len() < 4, "roundrobin never chose c1");
            };
            rest.clear();
            lab.lbs().deregister("web", &["c1".into()]).unwrap();
            let drained = Instant::now();
            assert_eq!(
                state_of(lab, "web", ip("c1")).map(|(s, r)| (s, r.unwrap_or_default())),
                Some((
                    HealthState::Draining,
                    "Target.DeregistrationInProgress".into()
                ))
            );
            assert_eq!(
                answered_by(lab, "n2", 2),
                vec!["c2"],
                "no new connection to the draining target (nor the unhealthy one)"
            );
            let mut ticks = 0;
            let mut line = String::new();
            while drained.elapsed() < Duration::from_secs(u64::from(DELAY) - 1) {
                line.clear();
                on_c1
                    .read_line(&mut line)
                    .expect("the drained connection keeps flowing");
                assert!(line.starts_with("tick "), "{line:?}");
                ticks += 1;
                assert_eq!(
                    state_of(lab, "web", ip("c1")).map(|(s, _)| s),
                    Some(HealthState::Draining)
                );
            }
            assert!(
                ticks >= (DELAY as usize - 2) * 4,
                "{ticks} ticks in the drain period"
            );
            wait_until("c1 gone after the delay", Duration::from_secs(5), || {
                state_of(lab, "web", ip("c1")).is_none()
            });
            eprintln!("c1 removed {:?} after deregistration", drained.elapsed());

            // deleting a load balancer removes its HAProxy and namespace at once
            let tmp = lab
                .lbs()
                .create_lb(&LbSettings {
                    name: "tmp".into(),
                    lb_type: LoadBalancerType::Network,
                    port: 81,
                    target_port: port,
                    health: HealthCheck::default(),
                    deregistration_delay: None,
                })
                .unwrap();
            let s = lab.state().unwrap();
            let p = s
                .processes
                .iter()
                .find(|p| p.role == "haproxy tmp")
                .cloned()
                .unwrap();
            let ns = s.namespaces.last().cloned().unwrap();
            assert!(ns.ends_with("-lb2"), "{ns}");
            assert_eq!(tmp.lb.name, "tmp");
            lab.lbs().delete("tmp").unwrap();
            assert!(!p.alive(), "haproxy of a deleted load balancer stopped");
            let s = lab.state().unwrap();
            assert!(
                !s.processes.contains(&p) && !s.namespaces.contains(&ns),
                "record cleaned"
            );
            assert!(!sh("ip", &["netns", "list"]).contains(&ns));
            assert!(!vpcnet_lab::netns::exists(&ns));
        },
    );
    // `lab down` (with_lab, which also checks every namespace is gone) stopped HAProxy
    if let Some(p) = haproxy {
        assert!(!p.alive(), "haproxy (pid {}) left after lab down", p.pid);
    }
}
