//! The agent's Kubernetes code against a mock API server (`common::fake_kube`: the real kube-rs
//! client over an in-memory tower service), on the paused clock: the connection loop's
//! backoff and reconnects, the Node capacity check and its Warning Event, and the ENIConfig
//! watch with its Node condition and Events, including the server ending watches.

mod common;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::Method;
use common::eventually;
use common::fake_kube::{self, FakeKube};
use k8s_openapi::api::core::v1::Node;
use tokio::sync::watch;
use vpcnet_agent::kubernetes::capacity::CapacityCheck;
use vpcnet_agent::kubernetes::client::{self, CapacityInput, SharedStatus, Source};
use vpcnet_agent::kubernetes::eniconfig::EniConfig;
use vpcnet_agent::kubernetes::eniconfig_watch::{EniConfigTracked, CONDITION_TYPE};
use vpcnet_agent::metrics::Metrics;
use vpcnet_introspection::{ApiServerDoc, ApiState};

const ANNOTATION: &str = "k8s.amazonaws.com/eniConfig";

/// The Node `n1` with kubelet's `capacity.pods` and the ENIConfig annotation.
fn node(pods: u32, eniconfig: Option<&str>) -> Node {
    let annotations: Vec<(&str, &str)> = eniconfig.map(|c| (ANNOTATION, c)).into_iter().collect();
    fake_kube::node("n1", &annotations, Some(pods))
}

fn eniconfig(name: &str, subnet: &str) -> EniConfig {
    fake_kube::eniconfig(name, subnet, &["sg-1"])
}

fn metric(metrics: &Metrics, series: &str) -> Option<String> {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with(series))
        .map(str::to_string)
}

/// The connection loop of an m5.large agent (secondary-IP mode: 29 pods fit) on `kube`.
fn start_client(
    kube: &FakeKube,
) -> (
    SharedStatus,
    Arc<Metrics>,
    watch::Receiver<Option<kube::Client>>,
) {
    let status = Arc::new(RwLock::new(ApiServerDoc::default()));
    let metrics = Arc::new(Metrics::new());
    let limits = vpcnet_limits::lookup("m5.large").unwrap().clone();
    let capacity = CapacityInput {
        instance_type: "m5.large".into(),
        check: Box::new(move |pods| Some(CapacityCheck::new(pods, &limits, Default::default()))),
    };
    let (tx, rx) = watch::channel(None);
    tokio::spawn(client::run(
        Ok(Some(Source::Given(kube.client()))),
        Some("n1".into()),
        status.clone(),
        metrics.clone(),
        tokio::time::Instant::now(),
        capacity,
        tx,
    ));
    (status, metrics, rx)
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_max_pods_exceeds_its_addresses_is_warned_once_per_capacity() {
    let kube = FakeKube::new();
    kube.put_node(&node(110, None));
    let (status, metrics, _clients) = start_client(&kube);
    let doc = || status.read().unwrap().clone();
    eventually("the capacity check", Duration::from_secs(5), || {
        doc().node.is_some_and(|n| n.exceeded)
    })
    .await;
    let n = doc().node.unwrap();
    assert_eq!((n.capacity_pods, n.supported_pods), (110, 29));
    assert_eq!(doc().state, ApiState::Connected);
    assert_eq!(doc().server_version.as_deref(), Some("v1.34.0-fake"));
    assert_eq!(
        metric(&metrics, "vpcnet_max_pods_exceeds_pod_ips").as_deref(),
        Some("vpcnet_max_pods_exceeds_pod_ips 1")
    );
    let events = kube.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let (type_, reason, note) = &events[0];
    assert_eq!(
        (type_.as_str(), reason.as_str()),
        ("Warning", "MaxPodsExceedsPodIPs")
    );
    assert!(
        note.contains("maxPods is 110") && note.contains("at most 29 pods"),
        "{note}"
    );

    // Checked again every CHECK_INTERVAL: the same capacity is not warned again.
    tokio::time::sleep(client::CHECK_INTERVAL * 4).await;
    assert_eq!(kube.events().len(), 1, "{:?}", kube.events());
    let gets = kube
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/nodes/n1")
        .count();
    assert!(gets >= 4, "the Node was read {gets} times in 4 intervals");

    // kubelet's maxPods lowered to what fits: cleared, no Event.
    kube.put_node(&node(29, None));
    eventually("the check clears", client::CHECK_INTERVAL * 2, || {
        doc().node.is_some_and(|n| !n.exceeded)
    })
    .await;
    assert_eq!(
        metric(&metrics, "vpcnet_max_pods_exceeds_pod_ips").as_deref(),
        Some("vpcnet_max_pods_exceeds_pod_ips 0")
    );
    assert_eq!(kube.events().len(), 1);

    // Raised again to another value: warned again, once.
    kube.put_node(&node(120, None));
    eventually("a second warning", client::CHECK_INTERVAL * 2, || {
        kube.events().len() == 2
    })
    .await;
    assert!(
        kube.events()[1].2.contains("maxPods is 120"),
        "{:?}",
        kube.events()
    );
    tokio::time::sleep(client::CHECK_INTERVAL * 3).await;
    assert_eq!(kube.events().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_api_server_is_retried_with_backoff_then_reached_and_lost() {
    let kube = FakeKube::new();
    kube.set_down(true);
    let (status, metrics, mut clients) = start_client(&kube);
    let doc = || status.read().unwrap().clone();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let d = doc();
    assert_eq!(d.state, ApiState::Connecting);
    // Backoff from 0.5 s doubling to 10 s (equal jitter): 5 to 12 attempts in 30 s, not a
    // busy loop.
    assert!(
        (5..=12).contains(&d.attempts),
        "{} attempts in 30 s",
        d.attempts
    );
    assert!(
        d.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("/version"),
        "{:?}",
        d.last_error
    );
    assert!(clients.borrow().is_none(), "no client before a connection");
    assert_eq!(
        metric(&metrics, "vpcnet_apiserver_connected").as_deref(),
        Some("vpcnet_apiserver_connected 0")
    );

    // Up: reached within one backoff step, the watches get the client.
    kube.set_down(false);
    let up = tokio::time::Instant::now();
    tokio::time::timeout(client::BACKOFF_MAX, clients.wait_for(|c| c.is_some()))
        .await
        .expect("a client for the watches")
        .unwrap();
    assert_eq!(doc().state, ApiState::Connected);
    assert!(up.elapsed() <= client::BACKOFF_MAX, "{:?}", up.elapsed());
    let first = doc().first_connected_after_ms.unwrap();
    assert!(first >= 30_000, "first connected {first} ms after start");
    assert_eq!(
        metric(&metrics, "vpcnet_apiserver_connected").as_deref(),
        Some("vpcnet_apiserver_connected 1")
    );

    // Down again: the connectivity check notices within one interval, and it reconnects.
    kube.set_down(true);
    eventually("the loss noticed", client::CHECK_INTERVAL * 2, || {
        doc().state == ApiState::Connecting
    })
    .await;
    assert_eq!(
        metric(&metrics, "vpcnet_apiserver_connected").as_deref(),
        Some("vpcnet_apiserver_connected 0")
    );
    kube.set_down(false);
    eventually("reconnected", client::BACKOFF_MAX * 2, || {
        doc().state == ApiState::Connected
    })
    .await;
    assert_eq!(
        doc().first_connected_after_ms,
        Some(first),
        "the first connection is kept"
    );
}

fn chosen(t: &EniConfigTracked) -> Option<String> {
    t.choice().map(|c| c.name.clone())
}

#[tokio::test(start_paused = true)]
async fn the_eniconfig_watch_follows_the_node_and_its_eniconfig_and_reports_on_the_node() {
    let kube = FakeKube::new();
    kube.put_node(&node(29, Some("pods-a")));
    let (_clients, mut rx, metrics) = fake_kube::spawn_eniconfig_watch(kube.client());

    // The chosen ENIConfig does not exist: unresolved, said on the Node and in a Warning.
    eventually(
        "ENIConfigNotFound on the Node",
        Duration::from_secs(5),
        || {
            kube.node_condition("n1", CONDITION_TYPE)
                .is_some_and(|(s, r, _)| s == "False" && r == "ENIConfigNotFound")
        },
    )
    .await;
    assert_eq!(chosen(&rx.borrow()), None);
    let (_, _, message) = kube.node_condition("n1", CONDITION_TYPE).unwrap();
    assert!(message.contains("pods-a"), "{message}");
    eventually("the Warning", Duration::from_secs(5), || {
        kube.events()
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "ENIConfigNotFound")
    })
    .await;

    // Created: resolved with one watch event, the condition True, a Normal Event.
    kube.put_eniconfig(&eniconfig("pods-a", "subnet-a"));
    tokio::time::timeout(Duration::from_secs(1), rx.wait_for(|t| chosen(t).is_some()))
        .await
        .expect("resolved")
        .unwrap();
    let c = rx.borrow().choice().cloned().unwrap();
    assert_eq!((c.name.as_str(), c.subnet.as_str()), ("pods-a", "subnet-a"));
    assert_eq!(
        metric(&metrics, "vpcnet_eniconfig_resolved").as_deref(),
        Some("vpcnet_eniconfig_resolved 1")
    );
    eventually("the condition True", Duration::from_secs(5), || {
        kube.node_condition("n1", CONDITION_TYPE)
            .is_some_and(|(s, r, _)| s == "True" && r == "ENIConfigResolved")
    })
    .await;
    eventually("the Normal Event", Duration::from_secs(5), || {
        kube.events().iter().any(|(t, _, _)| t == "Normal")
    })
    .await;

    // The Node re-annotated: the new choice with one event, an invalid one refused by name.
    kube.put_eniconfig(&eniconfig("pods-b", "subnet-b"));
    kube.put_eniconfig(&eniconfig("empty", ""));
    kube.put_node(&node(29, Some("pods-b")));
    tokio::time::timeout(
        Duration::from_secs(1),
        rx.wait_for(|t| chosen(t).as_deref() == Some("pods-b")),
    )
    .await
    .expect("the new choice")
    .unwrap();
    kube.put_node(&node(29, Some("empty")));
    eventually("InvalidENIConfig", Duration::from_secs(5), || {
        kube.node_condition("n1", CONDITION_TYPE)
            .is_some_and(|(s, r, _)| s == "False" && r == "InvalidENIConfig")
    })
    .await;
    assert_eq!(chosen(&rx.borrow()), None);

    // Quiet for 10 minutes: the server ends each watch at its timeoutSeconds (290 s) and the
    // watcher resumes from the last resourceVersion: no relist, no restart counted.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let requests = kube.requests();
    let lists = requests
        .iter()
        .filter(|r| {
            r.method == Method::GET
                && !r.is_watch()
                && (r.path == "/api/v1/nodes" || r.path.ends_with("/eniconfigs"))
        })
        .count();
    assert_eq!(lists, 2, "one list per collection, no relist: {requests:?}");
    for path in [
        "/api/v1/nodes",
        "/apis/crd.k8s.amazonaws.com/v1alpha1/eniconfigs",
    ] {
        let watches: Vec<_> = requests
            .iter()
            .filter(|r| r.path == path && r.is_watch())
            .collect();
        assert!(
            (2..=4).contains(&watches.len()),
            "{path}: {} watches in 10 minutes",
            watches.len()
        );
        for w in &watches {
            assert_eq!(
                w.query.get("timeoutSeconds").map(String::as_str),
                Some("290")
            );
        }
    }
    assert_eq!(metric(&metrics, "vpcnet_k8s_watch_restarts{"), None);

    // A change after the resumed watches still arrives with its one event.
    kube.put_node(&node(29, Some("pods-a")));
    tokio::time::timeout(
        Duration::from_secs(1),
        rx.wait_for(|t| chosen(t).as_deref() == Some("pods-a")),
    )
    .await
    .expect("applied after the watches were resumed")
    .unwrap();

    // The chosen ENIConfig deleted: unresolved again, with a Warning.
    let warnings = |k: &FakeKube| {
        k.events()
            .iter()
            .filter(|(t, r, _)| t == "Warning" && r == "ENIConfigNotFound")
            .count()
    };
    let before = warnings(&kube);
    kube.delete_eniconfig("pods-a");
    tokio::time::timeout(Duration::from_secs(1), rx.wait_for(|t| chosen(t).is_none()))
        .await
        .expect("unresolved on delete")
        .unwrap();
    eventually("another Warning", Duration::from_secs(5), || {
        warnings(&kube) == before + 1
    })
    .await;
}
