//! HAProxy in HTTP mode as an application load balancer's data plane, checked on its own (the
//! lab has one zone, and application load balancers need two): the rendered configuration runs,
//! targets added through the runtime API start down and come up after `rise` HTTP checks on the
//! health-check path, a target answering a status outside the matcher is reported as ELBv2's
//! `ResponseCodeMismatch`, and requests reach only healthy targets. Needs root and `haproxy`;
//! runs in a network namespace it creates and deletes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use vpcnet_emu::elbv2::{
    CheckFailure, HealthCheck, HealthCheckPort, LbSpec, LbType, ListenerSpec, PlaneAddress,
    Protocol, TargetGroupSpec, TargetSpec,
};
use vpcnet_lab::haproxy::{self, Files};
use vpcnet_lab::load::{self, LoadOptions};
use vpcnet_lab::spawn::Place;
use vpcnet_lab::{netns, procs};

/// Deletes the namespace (and so everything in it) when the test ends, pass or fail.
struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        for pid in netns::pids_in(&self.0) {
            procs::kill_pid(pid);
        }
        let _ = netns::delete(&self.0);
    }
}

fn ip(ns: &str, args: &[&str]) {
    let mut v = vec!["-n", ns];
    v.extend_from_slice(args);
    assert!(
        Command::new("ip").args(&v).status().unwrap().success(),
        "ip {v:?}"
    );
}

/// busybox httpd on `addr` serving `body` at `/` and `/healthz` answering with `health`
/// (a file, or nothing: 404).
fn httpd(ns: &str, dir: &Path, addr: &str, body: &str, healthy: bool) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("index.html"), format!("{body}\n")).unwrap();
    if healthy {
        std::fs::write(dir.join("healthz"), "ok\n").unwrap();
    }
    let mut c = Command::new("busybox");
    c.args(["httpd", "-f", "-p", addr, "-h"]).arg(dir);
    procs::spawn("httpd", c, &Place::netns(ns), &dir.join("httpd.log")).unwrap();
}

fn wait(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn http_mode_checks_path_and_matcher_and_routes_to_healthy_targets() {
    vpcnet_cni_harness::netns::require_root();
    let ns = Ns(format!("vlhx{}", std::process::id()));
    let tmp = tempfile::tempdir().unwrap();
    netns::create(&ns.0).unwrap();
    ip(&ns.0, &["addr", "add", "10.9.0.1/24", "dev", "lo"]);
    httpd(&ns.0, &tmp.path().join("a"), "10.9.0.1:8081", "a", true);
    httpd(&ns.0, &tmp.path().join("b"), "10.9.0.1:8082", "b", false);

    let tg = TargetGroupSpec {
        arn: "arn:tg/web".into(),
        name: "web".into(),
        protocol: Protocol::Http,
        health: HealthCheck {
            enabled: true,
            protocol: Protocol::Http,
            port: HealthCheckPort::TrafficPort,
            path: Some("/healthz".into()),
            interval_seconds: 1,
            timeout_seconds: 1,
            healthy_threshold: 2,
            unhealthy_threshold: 2,
            matcher: Some("200".into()),
        },
        targets: vec![],
        terminate_on_removal: false,
    };
    let spec = LbSpec {
        arn: "arn:lb/web".into(),
        name: "web".into(),
        lb_type: LbType::Application,
        addresses: vec![PlaneAddress {
            eni_id: "eni-0".into(),
            mac: "02:00:00:00:00:09".into(),
            ip: "10.9.0.1".parse().unwrap(),
            subnet_cidr: "10.9.0.0/24".parse().unwrap(),
        }],
        listeners: vec![ListenerSpec {
            port: 8000,
            protocol: Protocol::Http,
            target_group: tg.arn.clone(),
        }],
        target_groups: vec![tg.clone()],
    };
    let files = Files {
        dir: tmp.path().join("lb"),
    };
    std::fs::create_dir_all(&files.dir).unwrap();
    std::fs::write(
        files.config(),
        haproxy::render(&spec, &files, &BTreeMap::new()).unwrap(),
    )
    .unwrap();
    let mut c = Command::new("haproxy");
    c.arg("-W")
        .arg("-S")
        .arg(files.master_socket())
        .arg("-f")
        .arg(files.config());
    let log = tmp.path().join("haproxy.log");
    let p = procs::spawn("haproxy test", c, &Place::netns(&ns.0), &log).unwrap();
    wait("haproxy answers", Duration::from_secs(10), || {
        haproxy::worker_pid(&files.admin_socket()).is_ok()
    });
    let admin = files.admin_socket();
    for port in [8081, 8082] {
        let t = TargetSpec {
            ip: "10.9.0.1".parse().unwrap(),
            port,
            draining: false,
        };
        for cmd in haproxy::add_server_command("tg-web", &tg, &t) {
            haproxy::checked(&admin, &cmd).unwrap();
        }
    }
    let stat = |port: u16| {
        let csv = haproxy::command(&admin, "show stat -1 4 -1").unwrap();
        haproxy::parse_stat(&csv)
            .into_iter()
            .find(|s| s.server == format!("10.9.0.1-{port}"))
            .unwrap()
    };
    // both start down (ELBv2's initial)
    assert!(!stat(8081).up() && !stat(8082).up());
    wait(
        "a up after 2 passing HTTP checks",
        Duration::from_secs(6),
        || stat(8081).up(),
    );
    wait("b's check failed", Duration::from_secs(6), || {
        stat(8082).checked()
    });
    let b = stat(8082);
    assert!(!b.up());
    assert_eq!(
        b.failure(),
        Some(CheckFailure::ResponseCode(Some(404))),
        "{b:?}"
    );

    let report = netns_load(&ns.0);
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(
        report.by_responder.keys().cloned().collect::<Vec<_>>(),
        vec!["a"],
        "only the healthy target answers: {report:?}"
    );
    p.stop(Duration::from_secs(5));
}

fn netns_load(ns: &str) -> load::LoadReport {
    load::run_in_netns(
        ns,
        LoadOptions {
            target: "10.9.0.1:8000".parse().unwrap(),
            path: "/".into(),
            connections: 2,
            duration: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            stop: None,
        },
    )
    .unwrap()
}
