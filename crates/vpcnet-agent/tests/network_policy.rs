//! NetworkPolicy enforcement in the agent (`crate::network_policy`): an in-process agent with
//! enforcement on, on the paused clock, with the fake cloud, the mock API server
//! (`common::fake_kube`: Namespaces, Pods and NetworkPolicies, watched by the agent's own
//! watches) and a fake node that records the nftables scripts it is given
//! (`common::fake_node`). What each ADD, DEL and API change programs, checked on those
//! scripts: the pod's rules are in force when its ADD returns, an ADD whose rules cannot be
//! computed or applied fails and hands out no address, policies and namespace labels changed
//! later reach the node in place.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use common::fake_cloud::{fake_deps, fake_options, FakeCloud};
use common::fake_kube::FakeKube;
use common::fake_node::{veth_of, FakeNode};
use common::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{json, Value};
use vpcnet_agent::network_policy::ADMIT_TIMEOUT;
use vpcnet_agent::AgentHandle;
use vpcnet_ipam::PodKey;
use vpcnet_policy::Mode;

/// The policy table as the scripts name it.
const TABLE: &str = "inet vpcnet_policy";

/// How a full program (a replacement of the whole table) starts.
const FULL: &str =
    "table inet vpcnet_policy {}\ndelete table inet vpcnet_policy\ntable inet vpcnet_policy {\n";

/// The address of a pod on another node (a peer, never local).
const CLIENT_IP: &str = "10.0.99.9";

fn namespace(name: &str, labels: Value) -> Namespace {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }))
    .unwrap()
}

/// The Pod `namespace/name` with `labels`, running with `ip` when given (a pod on another
/// node), else just created (kubelet writes its address after the ADD).
fn pod(namespace: &str, name: &str, labels: Value, ip: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "app"}]},
        "status": ip.map(|ip| json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]})),
    }))
    .unwrap()
}

fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// `default/web-ingress`: pods `app=web` accept TCP 80 from pods `role=client` of their
/// namespace, nothing else (egress stays open).
fn web_ingress() -> NetworkPolicy {
    policy(
        "default",
        "web-ingress",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                "ports": [{"protocol": "TCP", "port": 80}],
            }],
        }),
    )
}

/// An API server with namespace `default` and a client pod (`role=client`, [`CLIENT_IP`],
/// on another node).
fn cluster() -> FakeKube {
    let kube = FakeKube::new();
    kube.put_namespace(&namespace("default", json!({})));
    kube.put_pod(&pod(
        "default",
        "client",
        json!({"role": "client"}),
        Some(CLIENT_IP),
    ));
    kube
}

/// An agent enforcing in `mode` against `kube`, on a fake cloud and a fake node.
struct Agent {
    agent: AgentHandle,
    node: Arc<FakeNode>,
    _fake: FakeCloud,
    dir: tempfile::TempDir,
}

impl Agent {
    async fn start(kube: &FakeKube, mode: Mode) -> Agent {
        Self::start_with(kube, mode, false).await
    }

    /// With `event_logs`, policy event logs go to `events.log` in the agent's directory.
    async fn start_with(kube: &FakeKube, mode: Mode, event_logs: bool) -> Agent {
        let fake = FakeCloud::new("m5.large");
        let dir = tempfile::tempdir().unwrap();
        let node = Arc::new(FakeNode::default());
        let mut opts = fake_options(dir.path());
        opts.network_policy = Some(mode);
        if event_logs {
            opts.policy_event_log = Some(dir.path().join("events.log").display().to_string());
        }
        let deps = fake_deps(&fake)
            .with_kube(kube.client())
            .with_node_network(node.clone());
        let agent = vpcnet_agent::start(opts, deps).await.unwrap();
        Agent {
            agent,
            node,
            _fake: fake,
            dir,
        }
    }

    async fn client(
        &self,
    ) -> vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel> {
        client(&self.dir.path().join("agent.sock")).await
    }

    fn scripts(&self) -> Vec<String> {
        self.node.policy_scripts()
    }

    /// Waits for the program that follows the first complete read of the API objects (no
    /// local pod yet): a full replacement of the table.
    async fn first_program(&self) -> String {
        eventually(
            "the first network policy program after the API objects were read",
            Duration::from_secs(10),
            || !self.scripts().is_empty(),
        )
        .await;
        let scripts = self.scripts();
        assert_eq!(
            scripts.len(),
            1,
            "the first read of the API objects programmed the node more than once: {scripts:#?}"
        );
        assert!(
            scripts[0].starts_with(FULL),
            "the first program after a start must replace the whole table in one transaction, got:\n{}",
            scripts[0]
        );
        scripts[0].clone()
    }

    /// The pod of `add_req(id)` now runs: its route and veth are on the node (so the pod
    /// reclaim keeps its address).
    fn running(&self, id: &str, ip: Ipv4Addr) {
        self.node.routes.lock().unwrap().insert(ip);
        self.node.links.lock().unwrap().insert(veth_of(id));
    }

    /// Scripts applied after the first `n`, each asserted to be an in-place update.
    fn updates_since(&self, n: usize) -> Vec<String> {
        let later: Vec<String> = self.scripts().into_iter().skip(n).collect();
        for s in &later {
            assert!(
                !s.contains("delete table"),
                "a program after the first replaced the whole table instead of changing it in place:\n{s}"
            );
        }
        later
    }
}

/// ADD of `add_req(id)` (pod `default/pod-<id>`), which must succeed; its address.
async fn add(
    c: &mut vpcnet_proto::cni_backend_client::CniBackendClient<tonic::transport::Channel>,
    id: &str,
) -> Ipv4Addr {
    let r = add_retry(c, id, Duration::from_secs(10))
        .await
        .unwrap_or_else(|s| panic!("ADD of pod-{id} failed: {s:?}"));
    r.ipv4_addr.parse().unwrap()
}

/// The rules `script` gives `chain`: the body of its `chain <chain> { … }` block in a full
/// program, or its `add rule` lines in an update.
fn rules_of(script: &str, chain: &str) -> Vec<String> {
    let add = format!("add rule {TABLE} {chain} ");
    let open = format!("chain {chain} {{");
    let mut rules = Vec::new();
    let mut inside = false;
    for line in script.lines().map(str::trim) {
        if inside {
            if line == "}" {
                inside = false;
            } else {
                rules.push(line.to_string());
            }
        } else if line == open {
            inside = true;
        } else if let Some(rule) = line.strip_prefix(&add) {
            rules.push(rule.to_string());
        }
    }
    rules
}

/// Whether `script` puts `veth` in the map of `dir` (`ingress` or `egress`) with a jump to its
/// chain, in a full program or an update.
fn maps(script: &str, dir: &str, veth: &str) -> bool {
    let chain = chain(dir, veth);
    let element = format!("\"{veth}\" : jump {chain}");
    let full = script.starts_with(FULL) && {
        // The element is inside `map <dir> { … }`.
        let map = format!("  map {dir} {{\n");
        script
            .split_once(&map)
            .and_then(|(_, rest)| rest.split_once("\n  }"))
            .is_some_and(|(body, _)| body.contains(&element))
    };
    full || script.contains(&format!("add element {TABLE} {dir} {{ {element} }}"))
}

/// Whether `script` (an update) takes `veth` out of the map of `dir` and deletes its chain.
fn unmaps(script: &str, dir: &str, veth: &str) -> bool {
    script.contains(&format!("delete element {TABLE} {dir} {{ \"{veth}\" }}"))
        && script.contains(&format!("delete chain {TABLE} {}", chain(dir, veth)))
}

/// The chain of `veth` in direction `dir` (`ingress` or `egress`).
fn chain(dir: &str, veth: &str) -> String {
    match dir {
        "ingress" => vpcnet_datapath::policy::ingress_chain(veth),
        "egress" => vpcnet_datapath::policy::egress_chain(veth),
        _ => unreachable!("{dir}"),
    }
}

/// The chain rules of a pod isolated in `dir` with nothing allowed: reaching itself, then
/// the drop.
fn drop_all(dir: &str, veth: &str) -> Vec<String> {
    let side = if dir == "ingress" {
        "iifname"
    } else {
        "oifname"
    };
    vec![format!("{side} \"{veth}\" return"), "counter drop".into()]
}

/// The peer set a rule names (`@p_…`).
fn set_named(rule: &str) -> Option<&str> {
    rule.split_whitespace().find_map(|w| w.strip_prefix('@'))
}

fn pod_gets(kube: &FakeKube, name: &str) -> usize {
    let path = format!("/api/v1/namespaces/default/pods/{name}");
    kube.requests()
        .iter()
        .filter(|r| r.method == axum::http::Method::GET && r.path == path)
        .count()
}

fn checkpointed_containers(dir: &std::path::Path) -> Vec<String> {
    match vpcnet_agent::checkpoint_file::load(&dir.join("ipam.json"), vpcnet_agent::clock::now_ms())
    {
        vpcnet_agent::checkpoint_file::Loaded::Valid(cp) => cp
            .assignments
            .iter()
            .map(|a| a.container_id.clone())
            .collect(),
        other => panic!("checkpoint not valid: {other:?}"),
    }
}

/// The ADD of a pod a policy selects programs its rules before it returns: an in-place update
/// (after the full program of the first read) that adds the pod's ingress chain, its map
/// element and the policy's allow rule with the peer set holding the client's address. The
/// pod came through the watch, so it was not read again.
/// With policy event logs, the pod's chain logs before its allow rule and before its drop, to
/// the NFLOG group the reader binds, within the node-wide limit the full program declares.
#[tokio::test(start_paused = true)]
async fn with_event_logs_the_pods_rules_log_accepts_and_denies_to_nflog() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start_with(&kube, Mode::Standard, true).await;
    let veth = veth_of("a");
    let first = t.first_program().await;
    assert!(
        first.contains("limit vpcnet_events { rate 100/second burst 500 packets }"),
        "the full program does not declare the event limit:\n{first}"
    );
    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let updates = t.updates_since(1);
    let s = &updates[0];
    let rules = rules_of(s, &chain("ingress", &veth));
    assert_eq!(
        rules.len(),
        5,
        "chain in_{veth} should be: itself, the accept's log, the allow, the deny's log, the drop; got {rules:#?}"
    );
    assert!(
        rules[1].ends_with(&format!(
            "limit name \"vpcnet_events\" log group 1717 prefix \"A in {veth} default/web-ingress\""
        )) && rules[1].contains("meta l4proto tcp th dport 80"),
        "{rules:#?}"
    );
    assert!(
        rules[2].ends_with("counter return comment \"default/web-ingress\""),
        "{rules:#?}"
    );
    assert_eq!(
        rules[3],
        format!("limit name \"vpcnet_events\" log group 1717 prefix \"D in {veth}\"")
    );
    assert_eq!(rules[4], "counter drop");
    // The reader opened its file at start (the fake node has no NFLOG to read).
    assert!(t.dir.path().join("events.log").exists());
    t.agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_added_pod_has_its_policy_in_force_when_the_add_returns() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, Mode::Standard).await;
    let veth = veth_of("a");
    let first = t.first_program().await;
    assert!(
        !first.contains(&veth),
        "the first program, before any ADD, already has the pod's interface {veth}:\n{first}"
    );

    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    // Read at once: the ADD's reply came after its program.
    let updates = t.updates_since(1);
    assert_eq!(
        updates.len(),
        1,
        "the ADD should program the node once, before it returns: {updates:#?}"
    );
    let s = &updates[0];
    assert!(
        maps(s, "ingress", &veth),
        "the ADD's program does not put {veth} in the ingress map:\n{s}"
    );
    let rules = rules_of(s, &chain("ingress", &veth));
    assert_eq!(
        rules.len(),
        3,
        "chain in_{veth} should be: itself, the policy's allow, the drop; got {rules:#?} in:\n{s}"
    );
    let allow = &rules[1];
    assert!(
        allow.contains("meta l4proto tcp th dport 80")
            && allow.ends_with("counter return comment \"default/web-ingress\""),
        "the allow rule of in_{veth} does not carry TCP 80 and the policy default/web-ingress: {allow}"
    );
    assert_eq!(
        rules[2], "counter drop",
        "in_{veth} does not end in the drop"
    );
    let set =
        set_named(allow).unwrap_or_else(|| panic!("the allow rule names no peer set: {allow}"));
    assert!(
        s.contains(&format!("add element {TABLE} {set} {{ {CLIENT_IP} }}")),
        "peer set {set} does not hold the client pod's address {CLIENT_IP}:\n{s}"
    );
    assert!(
        !maps(s, "egress", &veth) && rules_of(s, &chain("egress", &veth)).is_empty(),
        "an ingress-only policy isolated the pod's egress:\n{s}"
    );
    assert_eq!(
        pod_gets(&kube, "pod-a"),
        0,
        "the pod was read from the API server although the watch had delivered it"
    );
    t.agent.shutdown().await;
}

/// A pod the watch has not delivered yet (created just before its ADD) is read from the API
/// server: it gets its policy's rules, not the fail-closed drop of a pod with unknown labels.
/// A pod the API server does not know at all is isolated both ways.
#[tokio::test(start_paused = true)]
async fn a_pod_the_watch_has_not_delivered_is_read_from_the_api_server() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    kube.hold_watches(true);
    kube.put_pod(&pod("default", "pod-b", json!({"app": "web"}), None));

    let mut c = t.client().await;
    let ip = add(&mut c, "b").await;
    t.running("b", ip);
    let veth = veth_of("b");
    assert_eq!(
        pod_gets(&kube, "pod-b"),
        1,
        "the ADD of a pod the watch has not delivered should read it from the API server once"
    );
    let updates = t.updates_since(1);
    let s = updates
        .last()
        .unwrap_or_else(|| panic!("the ADD programmed nothing: {:#?}", t.scripts()));
    let rules = rules_of(s, &chain("ingress", &veth));
    assert!(
        maps(s, "ingress", &veth)
            && rules
                .iter()
                .any(|r| r.contains("comment \"default/web-ingress\"")),
        "pod-b's labels (app=web, read from the API server) did not select it for default/web-ingress; in_{veth}: {rules:#?} in:\n{s}"
    );
    assert!(
        !maps(s, "egress", &veth),
        "pod-b is isolated for egress as if its labels were unknown:\n{s}"
    );

    // Unknown to the API server: nothing to select it by, so nothing gets in or out.
    let ghost = veth_of("ghost");
    let before = t.scripts().len();
    let ip = add(&mut c, "ghost").await;
    t.running("ghost", ip);
    assert_eq!(
        pod_gets(&kube, "pod-ghost"),
        1,
        "pod-ghost was not looked up"
    );
    let updates = t.updates_since(before);
    let s = updates
        .last()
        .unwrap_or_else(|| panic!("the ADD of pod-ghost programmed nothing"));
    for dir in ["ingress", "egress"] {
        assert!(
            maps(s, dir, &ghost),
            "a pod unknown to the API server is not isolated for {dir}:\n{s}"
        );
        assert_eq!(
            rules_of(s, &chain(dir, &ghost)),
            drop_all(dir, &ghost),
            "a pod unknown to the API server should allow nothing {dir}:\n{s}"
        );
    }

    // The watch catches up (the held pods, then a second client): only the peer set
    // changes; the pods' rules stay as the ADDs made them.
    kube.hold_watches(false);
    let n = t.scripts().len();
    kube.put_pod(&pod(
        "default",
        "client2",
        json!({"role": "client"}),
        Some("10.0.99.20"),
    ));
    eventually(
        "the second client programmed",
        Duration::from_secs(5),
        || t.scripts().len() > n,
    )
    .await;
    let s = t.updates_since(n).concat();
    assert!(
        s.lines()
            .any(|l| l.starts_with("add element inet vpcnet_policy p_")
                && l.ends_with("{ 10.0.99.20 }")),
        "the second client's address did not join the peer set as one element:\n{s}"
    );
    assert!(
        !s.contains(&veth) && !s.contains(&ghost),
        "the watch delivering the pods late changed their rules:\n{s}"
    );
    t.agent.shutdown().await;
}

/// With the API server down from the start, an ADD waits ADMIT_TIMEOUT for the first read,
/// then fails UNAVAILABLE naming network policy and the API, and its address is taken back:
/// not assigned, not cooling, not in the checkpoint, and nothing was programmed. Once the
/// API server is up, the retried ADD gets the same address and its rules.
#[tokio::test(start_paused = true)]
async fn an_add_fails_and_hands_out_nothing_until_the_api_objects_are_read() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    kube.set_down(true);
    let t = Agent::start(&kube, Mode::Standard).await;
    let mut c = t.client().await;
    let key = PodKey::new("a", "eth0");

    let started = tokio::time::Instant::now();
    let mut c2 = c.clone();
    let pending = tokio::spawn(async move { c2.add_network(add_req("a")).await });
    // While the ADD waits for the API objects its address is assigned (and checkpointed).
    eventually("the ADD's assignment", Duration::from_secs(2), || {
        t.agent.shared.pool().assignment(&key).is_some()
    })
    .await;
    let tried = t.agent.shared.pool().assignment(&key).unwrap().ip;
    eventually(
        "the ADD's assignment checkpointed",
        Duration::from_secs(2),
        || checkpointed_containers(t.dir.path()).contains(&"a".to_string()),
    )
    .await;
    let status = pending
        .await
        .unwrap()
        .expect_err("an ADD succeeded although the API objects were never read");
    let waited = started.elapsed();
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "the ADD should fail UNAVAILABLE (the runtime retries): {status:?}"
    );
    let msg = status.message();
    assert!(
        msg.contains("network policy")
            && msg.contains("Kubernetes API")
            && msg.contains("not handed out"),
        "the ADD's error should name network policy, the Kubernetes API and say the address was not handed out: {msg}"
    );
    assert!(
        waited >= ADMIT_TIMEOUT && waited < ADMIT_TIMEOUT + Duration::from_secs(1),
        "the ADD failed after {waited:?}, not after waiting ADMIT_TIMEOUT ({ADMIT_TIMEOUT:?})"
    );
    {
        let pool = t.agent.shared.pool();
        assert!(
            pool.assignment(&key).is_none(),
            "the failed ADD left its assignment in the pool"
        );
        let holder: Vec<_> = pool.assignments().filter(|(_, a)| a.ip == tried).collect();
        assert!(
            holder.is_empty(),
            "{tried} is still assigned after the failed ADD: {holder:?}"
        );
        assert!(
            !pool.is_cooling(tried, vpcnet_agent::clock::now_ms()),
            "{tried} cools down although no pod ever used it"
        );
    }
    let checkpointed = checkpointed_containers(t.dir.path());
    assert!(
        checkpointed.is_empty(),
        "the checkpoint still records the failed ADD: {checkpointed:?}"
    );
    assert!(
        t.scripts().is_empty(),
        "the node was programmed from API objects never read: {:#?}",
        t.scripts()
    );

    // The API server is back: the retried ADD gets the address back, with its rules.
    kube.set_down(false);
    let ip = add_retry(&mut c, "a", Duration::from_secs(30))
        .await
        .unwrap_or_else(|s| panic!("the retried ADD failed with the API server up: {s:?}"))
        .ipv4_addr
        .parse::<Ipv4Addr>()
        .unwrap();
    t.running("a", ip);
    assert_eq!(
        ip, tried,
        "the retried ADD got another address than the one the failed ADD gave back"
    );
    let scripts = t.scripts();
    assert!(
        scripts.first().is_some_and(|s| s.starts_with(FULL)),
        "the first program is not a full replacement: {scripts:#?}"
    );
    t.updates_since(1);
    let veth = veth_of("a");
    let all = scripts.concat();
    assert!(
        scripts.iter().any(|s| maps(s, "ingress", &veth)),
        "the retried ADD's pod is not in the ingress map: {scripts:#?}"
    );
    assert!(
        rules_of(&all, &chain("ingress", &veth))
            .iter()
            .any(|r| r.contains("comment \"default/web-ingress\"")),
        "the retried ADD's pod does not get default/web-ingress: {scripts:#?}"
    );
    assert_eq!(
        t.agent.shared.pool().assignments().count(),
        1,
        "the failed attempts left assignments behind"
    );
    t.agent.shutdown().await;
}

/// After the first read an API outage does not stop the ADD of a pod the watch has read (its
/// rules come from what was read); the ADD of a pod it has not read fails UNAVAILABLE naming
/// the pod, hands out nothing, and succeeds once the API server answers again.
#[tokio::test(start_paused = true)]
async fn after_the_first_read_an_api_outage_fails_only_pods_not_read_yet() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    kube.set_down(true);
    let mut c = t.client().await;

    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let veth = veth_of("a");
    let s = t.updates_since(1).concat();
    assert!(
        rules_of(&s, &chain("ingress", &veth))
            .iter()
            .any(|r| r.contains("comment \"default/web-ingress\"")),
        "with the API server down, a pod already read did not get its policy:\n{s}"
    );

    let status = c
        .add_network(add_req("c"))
        .await
        .expect_err("the ADD of a pod never read succeeded with the API server down");
    let msg = status.message();
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "the ADD of a pod that cannot be read should fail UNAVAILABLE: {status:?}"
    );
    assert!(
        msg.contains("network policy")
            && msg.contains("default/pod-c")
            && msg.contains("Kubernetes API")
            && msg.contains("not handed out"),
        "the ADD's error should name network policy, the pod, the Kubernetes API and say the address was not handed out: {msg}"
    );
    assert!(
        t.agent
            .shared
            .pool()
            .assignment(&PodKey::new("c", "eth0"))
            .is_none(),
        "the ADD of the unreadable pod kept its address"
    );

    kube.put_pod(&pod("default", "pod-c", json!({"app": "web"}), None));
    kube.set_down(false);
    let ip = add_retry(&mut c, "c", Duration::from_secs(30))
        .await
        .unwrap_or_else(|s| panic!("the retried ADD failed with the API server up: {s:?}"))
        .ipv4_addr
        .parse::<Ipv4Addr>()
        .unwrap();
    t.running("c", ip);
    let s = t.updates_since(1).concat();
    assert!(
        rules_of(&s, &chain("ingress", &veth_of("c")))
            .iter()
            .any(|r| r.contains("comment \"default/web-ingress\"")),
        "pod-c did not get its policy once the API server answered:\n{s}"
    );
    t.agent.shutdown().await;
}

/// nft refusing the ADD's program fails the ADD (UNAVAILABLE, the address taken back); the
/// next program replaces the whole table, since what the node holds is no longer known.
#[tokio::test(start_paused = true)]
async fn a_failed_program_fails_the_add_and_the_next_program_is_full() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    *t.node.policy_error.lock().unwrap() = Some("nft: Error: Could not process rule".into());
    let mut c = t.client().await;
    let status = c
        .add_network(add_req("a"))
        .await
        .expect_err("the ADD succeeded although its rules could not be applied");
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "a failed program should fail the ADD UNAVAILABLE: {status:?}"
    );
    assert!(
        status.message().contains("nftables")
            && status.message().contains("Could not process rule")
            && status.message().contains("not handed out"),
        "the ADD's error should say nftables failed, why, and that the address was not handed out: {}",
        status.message()
    );
    assert!(
        t.agent
            .shared
            .pool()
            .assignment(&PodKey::new("a", "eth0"))
            .is_none(),
        "the ADD whose rules failed kept its address"
    );

    *t.node.policy_error.lock().unwrap() = None;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let scripts = t.scripts();
    assert_eq!(
        scripts.len(),
        2,
        "expected the first program and the retried ADD's: {scripts:#?}"
    );
    assert!(
        scripts[1].starts_with(FULL),
        "after a failed program the next one must replace the whole table, got:\n{}",
        scripts[1]
    );
    assert!(
        maps(&scripts[1], "ingress", &veth_of("a")),
        "the retried ADD's full program lacks the pod:\n{}",
        scripts[1]
    );
    t.agent.shutdown().await;
}

/// A policy created while the pod runs isolates it in place; deleting it takes the pod's map
/// element and chain away again.
#[tokio::test(start_paused = true)]
async fn a_policy_created_later_isolates_the_running_pod_until_it_is_deleted() {
    let kube = cluster();
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let veth = veth_of("a");
    let before = t.scripts();
    assert!(
        before.iter().all(|s| !s.contains(&veth)),
        "a pod no policy selects was given rules (standard mode): {before:#?}"
    );

    kube.put_network_policy(&policy(
        "default",
        "deny-web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}),
    ));
    let n = before.len();
    eventually("the new policy programmed", Duration::from_secs(5), || {
        t.scripts().len() > n
    })
    .await;
    let updates = t.updates_since(n);
    let s = updates.concat();
    assert!(
        maps(&s, "ingress", &veth),
        "the new policy default/deny-web did not put the pod in the ingress map:\n{s}"
    );
    assert_eq!(
        rules_of(&s, &chain("ingress", &veth)),
        drop_all("ingress", &veth),
        "a policy with no ingress rule should let nothing in:\n{s}"
    );
    assert!(
        !maps(&s, "egress", &veth),
        "an ingress-only policy isolated egress:\n{s}"
    );

    kube.delete_network_policy("default", "deny-web");
    let n = t.scripts().len();
    eventually(
        "the policy's deletion programmed",
        Duration::from_secs(5),
        || t.scripts().len() > n,
    )
    .await;
    let s = t.updates_since(n).concat();
    assert!(
        unmaps(&s, "ingress", &veth),
        "deleting the only policy of the pod did not remove its map element and chain:\n{s}"
    );
    t.agent.shutdown().await;
}

/// A namespace selector follows namespace labels and the pods in the namespace: the peer
/// set changes in place (flushed and refilled), the pod's chain is not touched.
#[tokio::test(start_paused = true)]
async fn namespace_labels_and_peer_pods_change_the_peer_set_in_place() {
    let kube = cluster();
    kube.put_namespace(&namespace("other", json!({})));
    kube.put_pod(&pod("other", "peer", json!({}), Some("10.0.77.7")));
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    kube.put_network_policy(&policy(
        "default",
        "from-blue",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "blue"}}}]}],
        }),
    ));
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let veth = veth_of("a");
    let s = t.scripts().concat();
    let rules = rules_of(&s, &chain("ingress", &veth));
    let set = rules
        .iter()
        .find(|r| r.contains("comment \"default/from-blue\""))
        .and_then(|r| set_named(r))
        .unwrap_or_else(|| {
            panic!("in_{veth} has no rule of default/from-blue with a set: {rules:#?}")
        })
        .to_string();
    assert!(
        !s.contains("10.0.77.7"),
        "a pod of a namespace without team=blue is in the peer set:\n{s}"
    );

    let n = t.scripts().len();
    kube.put_namespace(&namespace("other", json!({"team": "blue"})));
    eventually(
        "the namespace's labels programmed",
        Duration::from_secs(5),
        || t.scripts().len() > n,
    )
    .await;
    let s = t.updates_since(n).concat();
    assert!(
        s.contains(&format!("flush set {TABLE} {set}"))
            && s.contains(&format!("add element {TABLE} {set} {{ 10.0.77.7 }}")),
        "labelling namespace other team=blue did not refill peer set {set} with its pod 10.0.77.7:\n{s}"
    );
    assert!(
        !s.contains(&chain("ingress", &veth)),
        "a peer set change touched the pod's chain (its counters would be lost):\n{s}"
    );

    let n = t.scripts().len();
    kube.delete_pod("other", "peer");
    eventually(
        "the peer's deletion programmed",
        Duration::from_secs(5),
        || t.scripts().len() > n,
    )
    .await;
    let s = t.updates_since(n).concat();
    assert!(
        s.contains(&format!("flush set {TABLE} {set}")) && !s.contains("10.0.77.7"),
        "deleting the peer pod did not empty peer set {set}:\n{s}"
    );
    t.agent.shutdown().await;
}

/// DEL takes the pod's map element and chain away (before it returns) and its address back.
#[tokio::test(start_paused = true)]
async fn del_removes_the_pods_rules() {
    let kube = cluster();
    kube.put_network_policy(&web_ingress());
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    let veth = veth_of("a");
    assert!(
        t.scripts().iter().any(|s| maps(s, "ingress", &veth)),
        "the ADD did not isolate the pod: {:#?}",
        t.scripts()
    );

    let n = t.scripts().len();
    let mut del = del_req("a");
    del.k8s_pod_namespace = "default".into();
    del.k8s_pod_name = "pod-a".into();
    c.del_network(del)
        .await
        .unwrap_or_else(|s| panic!("DEL failed: {s:?}"));
    let updates = t.updates_since(n);
    assert_eq!(
        updates.len(),
        1,
        "the DEL should program the node once, before it returns: {updates:#?}"
    );
    assert!(
        unmaps(&updates[0], "ingress", &veth),
        "the DEL did not remove the pod's ingress map element and chain:\n{}",
        updates[0]
    );
    assert!(
        t.agent
            .shared
            .pool()
            .assignment(&PodKey::new("a", "eth0"))
            .is_none(),
        "the DEL kept the pod's address"
    );
    t.agent.shutdown().await;
}

/// The scripts of an agent in `mode` after the ADD of pod-a, which no policy selects.
async fn unselected_pod(mode: Mode) -> (Agent, FakeKube) {
    let kube = cluster();
    kube.put_pod(&pod("default", "pod-a", json!({"app": "web"}), None));
    let t = Agent::start(&kube, mode).await;
    t.first_program().await;
    let mut c = t.client().await;
    let ip = add(&mut c, "a").await;
    t.running("a", ip);
    (t, kube)
}

/// Standard mode leaves a pod no policy selects open (no rules at all); strict mode denies
/// it everything both ways, until a policy selects it: then the Kubernetes semantics apply.
#[tokio::test(start_paused = true)]
async fn strict_mode_denies_an_unselected_pod_and_standard_mode_leaves_it_open() {
    let veth = veth_of("a");

    let (t, _kube) = unselected_pod(Mode::Standard).await;
    let scripts = t.scripts();
    assert!(
        scripts.iter().all(|s| !s.contains(&veth)),
        "standard mode gave a pod no policy selects rules: {scripts:#?}"
    );
    t.agent.shutdown().await;

    let (t, kube) = unselected_pod(Mode::Strict).await;
    let updates = t.updates_since(1);
    let s = updates
        .last()
        .unwrap_or_else(|| panic!("strict mode: the ADD programmed nothing"));
    for dir in ["ingress", "egress"] {
        assert!(
            maps(s, dir, &veth),
            "strict mode: a pod no policy selects is not in the {dir} map:\n{s}"
        );
        assert_eq!(
            rules_of(s, &chain(dir, &veth)),
            drop_all(dir, &veth),
            "strict mode: a pod no policy selects should allow nothing {dir}:\n{s}"
        );
    }

    // Selected by a policy allowing all ingress: ingress allowed, egress open again.
    let n = t.scripts().len();
    kube.put_network_policy(&policy(
        "default",
        "allow-web",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}]}),
    ));
    eventually("the policy programmed", Duration::from_secs(5), || {
        t.scripts().len() > n
    })
    .await;
    let s = t.updates_since(n).concat();
    assert!(
        unmaps(&s, "egress", &veth),
        "strict mode: once a policy selects the pod, its egress (which no policy isolates) should be open:\n{s}"
    );
    let rules = rules_of(&s, &chain("ingress", &veth));
    assert!(
        rules
            .iter()
            .any(|r| r == "counter return comment \"default/allow-web\""),
        "strict mode: default/allow-web's allow-all ingress rule is missing from in_{veth}: {rules:#?}\n{s}"
    );
    t.agent.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_pod_watch_leaves_out_finished_and_host_network_pods() {
    let kube = cluster();
    let t = Agent::start(&kube, Mode::Standard).await;
    t.first_program().await;
    let pod_reads: Vec<_> = kube
        .requests()
        .into_iter()
        .filter(|r| r.path == "/api/v1/pods")
        .collect();
    assert!(!pod_reads.is_empty(), "the agent never read the pods");
    for r in &pod_reads {
        assert_eq!(
            r.query.get("fieldSelector").map(String::as_str),
            Some(vpcnet_agent::network_policy::watch::POD_FIELDS),
            "{r:?}"
        );
    }
    assert_eq!(
        vpcnet_agent::network_policy::watch::POD_FIELDS,
        "status.phase!=Succeeded,status.phase!=Failed,spec.hostNetwork=false"
    );
}
