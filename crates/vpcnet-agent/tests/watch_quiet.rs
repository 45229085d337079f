//! Issue 32 item 2: watches that stay open. The ENIConfig watcher runs with the agent's own
//! watch client against the mock API server (`common::fake_kube`) served over loopback HTTP.
//! A watch kept quiet is not cut (it was every 10 s by the client's read timeout): one watch
//! per resource, no relist, no restart counted; a change then is applied with its one event.
//!
//! On the real clock (`QUIET` seconds), not a paused one: with real sockets, tokio's
//! auto-advance of a paused clock lets kube-rs's client-side idle deadline (server timeout + 5
//! s) overtake the server's end of the stream, a race real clocks never run, and the watch
//! under test stops receiving.

// std's clocks (banned by the workspace clippy.toml): the real agent process against a real watch: wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::fake_kube::{self, FakeKube};
use k8s_openapi::api::core::v1::Node;
use vpcnet_agent::kubernetes::eniconfig::EniConfig;
use vpcnet_agent::kubernetes::eniconfig_watch::EniConfigTracked;
use vpcnet_agent::kubernetes::{Endpoint, EndpointSource};

/// Seconds the watches stay quiet: more than twice the client read timeout the watches had
/// before (10 s), far less than the server's `timeoutSeconds` (290 s).
const QUIET: u64 = 25;

fn node(eniconfig: &str) -> Node {
    fake_kube::node("n1", &[("k8s.amazonaws.com/eniConfig", eniconfig)], None)
}

fn eniconfig(name: &str, subnet: &str) -> EniConfig {
    fake_kube::eniconfig(name, subnet, &["sg-1"])
}

/// A service-account directory: a CA certificate (unused over plain HTTP, required by the
/// client's configuration) and a token.
fn service_account(dir: &std::path::Path) {
    let ca = rcgen::generate_simple_self_signed(vec!["ca".into()]).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.cert.pem()).unwrap();
    std::fs::write(dir.join("token"), "t0ken").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_not_restarted_and_a_change_applies_within_one_event() {
    let api = FakeKube::new();
    api.put_node(&node("a"));
    api.put_eniconfig(&eniconfig("a", "subnet-a"));
    api.put_eniconfig(&eniconfig("b", "subnet-b"));
    let listed_at = api.resource_version();
    let addr = api.serve_tcp().await;

    let sa = tempfile::tempdir().unwrap();
    service_account(sa.path());
    let ep = Endpoint {
        url: format!("http://{addr}"),
        source: EndpointSource::ClusterEndpoint,
    };
    let client = vpcnet_agent::kubernetes::client::watch_client(&ep, sa.path()).unwrap();
    let (_clients_tx, mut rx, metrics) = fake_kube::spawn_eniconfig_watch(client);
    let chosen = |t: &EniConfigTracked| t.choice().map(|c| c.name.clone());
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|t| chosen(t).is_some()),
    )
    .await
    .expect("ENIConfig resolved")
    .unwrap();
    assert_eq!(chosen(&rx.borrow()), Some("a".into()));

    tokio::time::sleep(Duration::from_secs(QUIET)).await;
    let requests: Vec<(String, BTreeMap<String, String>)> = api
        .requests()
        .into_iter()
        .map(|r| (r.path, r.query))
        .collect();
    for path in [
        "/api/v1/nodes",
        "/apis/crd.k8s.amazonaws.com/v1alpha1/eniconfigs",
    ] {
        let of = |watching: bool| {
            requests
                .iter()
                .filter(|(p, q)| {
                    p == path && (q.get("watch").map(String::as_str) == Some("true")) == watching
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(of(false).len(), 1, "{path} relisted: {requests:?}");
        let watches = of(true);
        // One watch, kept open (the server ends it after 290 s; it then resumes at the list's
        // resourceVersion without a relist).
        assert_eq!(
            watches.len(),
            1,
            "{path} watched {} times in {QUIET} quiet seconds",
            watches.len()
        );
        for (_, q) in &watches {
            assert_eq!(
                q.get("resourceVersion").map(String::as_str),
                Some(listed_at.to_string().as_str()),
                "{q:?}"
            );
            assert_eq!(
                q.get("timeoutSeconds").map(String::as_str),
                Some("290"),
                "{q:?}"
            );
        }
    }
    let restarts: Vec<String> = metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with("vpcnet_k8s_watch_restarts{"))
        .map(str::to_string)
        .collect();
    assert!(restarts.is_empty(), "watch restarts: {restarts:?}");

    // A change now is applied with its one event.
    api.put_node(&node("b"));
    if tokio::time::timeout(
        Duration::from_secs(1),
        rx.wait_for(|t| chosen(t).as_deref() == Some("b")),
    )
    .await
    .is_err()
    {
        let r = api.requests();
        panic!(
            "change not applied; requests: {:?}; now {:?}",
            &r[r.len().saturating_sub(6)..],
            rx.borrow().status
        );
    }
    let applied = metrics.encode();
    assert!(
        applied.contains("vpcnet_k8s_watch_event_apply_seconds_count{resource=\"Node\"}"),
        "{applied}"
    );

    // Figures on the real clock: change (event sent by the API server) → applied, 50 changes.
    let mut took = Vec::new();
    for i in 0..50u64 {
        let name = if i % 2 == 0 { "a" } else { "b" };
        let t0 = std::time::Instant::now();
        api.put_node(&node(name));
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|t| chosen(t).as_deref() == Some(name)),
        )
        .await
        .expect("change applied")
        .unwrap();
        took.push(t0.elapsed());
    }
    took.sort();
    eprintln!(
        "FIGURE: watch event -> ENIConfig change applied: p50 {:?}, p99 {:?} (50 changes, fake API server over loopback HTTP)",
        took[24],
        took[49]
    );
}
