//! Issue 32 item 2: watches that stay open. The ENIConfig watcher runs with the agent's own
//! watch client against a fake API server (list + watch of Nodes and ENIConfigs over HTTP).
//! A watch kept quiet is not cut (it was every 10 s by the client's read timeout): one watch
//! per resource, no relist, no restart counted; a change then is applied with its one event.
//!
//! On the real clock (`QUIET` seconds), not a paused one: with real sockets, tokio's
//! auto-advance of a paused clock lets kube-rs's client-side idle deadline (server timeout + 5
//! s) overtake the server's end of the stream, a race real clocks never run, and the watch
//! under test stops receiving.

// std's clocks (banned by the workspace clippy.toml): the real agent process against a real watch: wall time.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::Uri;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::StreamExt;
use tokio::sync::{broadcast, watch};
use vpcnet_agent::kubernetes::eniconfig::SelectionKeys;
use vpcnet_agent::kubernetes::eniconfig_watch::{self, EniConfigTracked};
use vpcnet_agent::kubernetes::{Endpoint, EndpointSource};
use vpcnet_agent::metrics::Metrics;

/// Seconds the watches stay quiet: more than twice the client read timeout the watches had
/// before (10 s), far less than the server's `timeoutSeconds` (290 s).
const QUIET: u64 = 25;

/// The fake API server's state: the Node, every request (path and query), and the watch
/// events to push.
struct FakeApi {
    node: Mutex<serde_json::Value>,
    requests: Mutex<Vec<(String, BTreeMap<String, String>)>>,
    events: broadcast::Sender<(String, String)>,
}

fn node(eniconfig: &str, rv: u64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "resourceVersion": rv.to_string(),
                     "annotations": {"k8s.amazonaws.com/eniConfig": eniconfig}},
    })
}

fn eniconfig(name: &str, subnet: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "crd.k8s.amazonaws.com/v1alpha1", "kind": "ENIConfig",
        "metadata": {"name": name, "resourceVersion": "5"},
        "spec": {"subnet": subnet, "securityGroups": ["sg-1"]},
    })
}

async fn handle(
    State(api): State<Arc<FakeApi>>,
    uri: Uri,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let path = uri.path().to_string();
    api.requests.lock().unwrap().push((path.clone(), q.clone()));
    let (kind, items) = match path.as_str() {
        "/api/v1/nodes" => ("NodeList", vec![api.node.lock().unwrap().clone()]),
        "/apis/crd.k8s.amazonaws.com/v1alpha1/eniconfigs" => (
            "ENIConfigList",
            vec![eniconfig("a", "subnet-a"), eniconfig("b", "subnet-b")],
        ),
        // Status patches and Events of the reporter: accepted, nothing more.
        _ => return (axum::http::StatusCode::OK, "{}").into_response(),
    };
    if q.get("watch").map(String::as_str) != Some("true") {
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "10"}, "items": items,
        });
        return axum::Json(list).into_response();
    }
    // A watch: quiet until an event for this path is pushed; ended by the server at its
    // timeoutSeconds, as kube-apiserver does.
    let timeout: u64 = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(1800);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let rx = api.events.subscribe();
    let stream = futures::stream::unfold((rx, path), move |(mut rx, path)| async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return None,
                ev = rx.recv() => match ev {
                    Ok((p, line)) if p == path => {
                        return Some((Ok::<_, std::io::Error>(format!("{line}\n")), (rx, path)))
                    }
                    Ok(_) => continue,
                    Err(_) => return None,
                },
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream.boxed()))
        .unwrap()
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
    let (events, _) = broadcast::channel(16);
    let api = Arc::new(FakeApi {
        node: Mutex::new(node("a", 10)),
        requests: Mutex::new(Vec::new()),
        events,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(handle).with_state(api.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let sa = tempfile::tempdir().unwrap();
    service_account(sa.path());
    let ep = Endpoint {
        url: format!("http://{addr}"),
        source: EndpointSource::ClusterEndpoint,
    };
    let client = vpcnet_agent::kubernetes::client::watch_client(&ep, sa.path()).unwrap();
    let (_clients_tx, clients) = watch::channel(Some(client));
    let (tx, mut rx) = watch::channel(EniConfigTracked::initial(0));
    let metrics = Arc::new(Metrics::new());
    tokio::spawn(eniconfig_watch::run(
        Some("n1".into()),
        SelectionKeys::default(),
        clients,
        tx,
        metrics.clone(),
    ));
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
    let requests = api.requests.lock().unwrap().clone();
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
                Some("10"),
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
    *api.node.lock().unwrap() = node("b", 11);
    let ev = serde_json::json!({"type": "MODIFIED", "object": node("b", 11)}).to_string();
    api.events.send(("/api/v1/nodes".into(), ev)).unwrap();
    if tokio::time::timeout(
        Duration::from_secs(1),
        rx.wait_for(|t| chosen(t).as_deref() == Some("b")),
    )
    .await
    .is_err()
    {
        let r = api.requests.lock().unwrap().clone();
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
        let rv = 12 + i;
        *api.node.lock().unwrap() = node(name, rv);
        let ev = serde_json::json!({"type": "MODIFIED", "object": node(name, rv)}).to_string();
        let t0 = std::time::Instant::now();
        api.events.send(("/api/v1/nodes".into(), ev)).unwrap();
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
