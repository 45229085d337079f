//! An in-memory Kubernetes API server for agent tests, reached through a real kube-rs client:
//! [`FakeKube::client`] is `kube::Client::new` over this server's axum router as its tower
//! service, with no socket in between, so the tests run on a paused clock. It keeps Nodes,
//! ENIConfigs, Namespaces, Pods and NetworkPolicies and answers what the agent's client and
//! watches call: `GET /version`, get, list and watch (newline-delimited events from the
//! requested `resourceVersion` on, ended at the request's `timeoutSeconds` as kube-apiserver
//! ends them) of each collection, namespaced ones across all namespaces or in one,
//! strategic-merge status patches of a Node's conditions, and Events (kept).
//! [`FakeKube::set_down`] makes every call fail with 503 until it is up again;
//! [`FakeKube::hold_watches`] keeps changes from the watches (a watch lagging behind the
//! server) until released. [`FakeKube::serve_tcp`] serves the same over loopback HTTP.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::broadcast;

const NODES: &str = "/api/v1/nodes";
const ENICONFIGS: &str = "/apis/crd.k8s.amazonaws.com/v1alpha1/eniconfigs";
const NAMESPACES: &str = "/api/v1/namespaces";
const PODS: &str = "/api/v1/pods";
const NETWORKPOLICIES: &str = "/apis/networking.k8s.io/v1/networkpolicies";

/// Every served collection: its path across namespaces, and whether its objects are
/// namespaced (then also served under `<group>/namespaces/<ns>/<resource>`).
const COLLECTIONS: [(&str, bool); 5] = [
    (NODES, false),
    (ENICONFIGS, false),
    (NAMESPACES, false),
    (PODS, true),
    (NETWORKPOLICIES, true),
];

/// The Node `name` with `annotations` and, when given, kubelet's `capacity.pods`.
pub fn node(
    name: &str,
    annotations: &[(&str, &str)],
    capacity_pods: Option<u32>,
) -> k8s_openapi::api::core::v1::Node {
    use k8s_openapi::api::core::v1::{Node, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        status: capacity_pods.map(|pods| NodeStatus {
            capacity: Some(BTreeMap::from([(
                "pods".to_string(),
                Quantity(pods.to_string()),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The ENIConfig `name`: new ENIs in `subnet` with `security_groups`.
pub fn eniconfig(
    name: &str,
    subnet: &str,
    security_groups: &[&str],
) -> vpcnet_agent::kubernetes::eniconfig::EniConfig {
    vpcnet_agent::kubernetes::eniconfig::EniConfig::new(
        name,
        vpcnet_agent::kubernetes::eniconfig::EniConfigSpec {
            subnet: subnet.into(),
            security_groups: security_groups.iter().map(|s| s.to_string()).collect(),
        },
    )
}

/// The agent's ENIConfig watch of Node `n1` with `client`, spawned. The first value returned
/// is the clients' sender, to hold: dropping it tells the watch no API server will be reached.
pub fn spawn_eniconfig_watch(
    client: kube::Client,
) -> (
    tokio::sync::watch::Sender<Option<kube::Client>>,
    tokio::sync::watch::Receiver<vpcnet_agent::kubernetes::eniconfig_watch::EniConfigTracked>,
    Arc<vpcnet_agent::metrics::Metrics>,
) {
    use vpcnet_agent::kubernetes::eniconfig_watch::{self, EniConfigTracked};
    let (clients_tx, clients) = tokio::sync::watch::channel(Some(client));
    let (tx, rx) = tokio::sync::watch::channel(EniConfigTracked::initial(0));
    let metrics = Arc::new(vpcnet_agent::metrics::Metrics::new());
    tokio::spawn(eniconfig_watch::run(
        Some("n1".into()),
        Default::default(),
        clients,
        tx,
        metrics.clone(),
    ));
    (clients_tx, rx, metrics)
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub body: Value,
}

impl Seen {
    /// Whether this is a watch (`?watch=true`).
    pub fn is_watch(&self) -> bool {
        self.query.get("watch").map(String::as_str) == Some("true")
    }
}

/// One change of a collection: its resourceVersion, the object's namespace (empty for a
/// cluster-scoped object) and name, and the watch line.
#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    collection: &'static str,
    namespace: String,
    name: String,
    line: String,
}

#[derive(Default)]
struct Store {
    rv: u64,
    /// collection path → key (`<namespace>/<name>`, or the name of a cluster-scoped object)
    /// → object.
    objects: BTreeMap<&'static str, BTreeMap<String, Value>>,
    history: Vec<Change>,
    /// Changes kept from the watches while they are held ([`FakeKube::hold_watches`]).
    held: Option<Vec<Change>>,
}

/// The store key of `namespace`/`name`.
fn key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// An object's `metadata.namespace` (empty when cluster-scoped) and `metadata.name`.
fn namespace_and_name(obj: &Value) -> (String, String) {
    let field = |f: &str| obj["metadata"][f].as_str().unwrap_or_default().to_string();
    (field("namespace"), field("name"))
}

struct Inner {
    store: Mutex<Store>,
    seen: Mutex<Vec<Seen>>,
    changes: broadcast::Sender<Change>,
    down: AtomicBool,
}

/// The fake API server (cheap to clone: shared state).
#[derive(Clone)]
pub struct FakeKube(Arc<Inner>);

impl Default for FakeKube {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeKube {
    /// An API server with no objects, up.
    pub fn new() -> Self {
        FakeKube(Arc::new(Inner {
            store: Mutex::new(Store {
                rv: 10,
                ..Store::default()
            }),
            seen: Mutex::new(Vec::new()),
            changes: broadcast::channel(1024).0,
            down: AtomicBool::new(false),
        }))
    }

    fn router(&self) -> Router {
        Router::new().fallback(handle).with_state(self.clone())
    }

    /// A kube-rs client whose service is this server, in memory.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// Serves this API over plain HTTP on a loopback port; returns its address.
    pub async fn serve_tcp(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = self.router();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    /// The current resourceVersion (what a list returns now).
    pub fn resource_version(&self) -> u64 {
        self.0.store.lock().unwrap().rv
    }

    /// Every call fails with 503 while `down`.
    pub fn set_down(&self, down: bool) {
        self.0.down.store(down, Ordering::SeqCst);
    }

    /// While `held`, changes reach the store (get and list see them) but no watch: a watch
    /// lagging behind the API server. Releasing (`false`) delivers the held changes in order.
    pub fn hold_watches(&self, held: bool) {
        let mut st = self.0.store.lock().unwrap();
        match (held, st.held.take()) {
            (true, kept) => st.held = Some(kept.unwrap_or_default()),
            (false, kept) => {
                for change in kept.unwrap_or_default() {
                    st.history.push(change.clone());
                    let _ = self.0.changes.send(change);
                }
            }
        }
    }

    /// Creates or replaces the Node `node` (its `metadata.name`).
    pub fn put_node(&self, node: &k8s_openapi::api::core::v1::Node) {
        self.put(NODES, serde_json::to_value(node).unwrap());
    }

    /// Creates or replaces an ENIConfig.
    pub fn put_eniconfig(&self, c: &vpcnet_agent::kubernetes::eniconfig::EniConfig) {
        self.put(ENICONFIGS, serde_json::to_value(c).unwrap());
    }

    /// Deletes the ENIConfig `name`.
    pub fn delete_eniconfig(&self, name: &str) {
        self.delete(ENICONFIGS, "", name);
    }

    /// Creates or replaces the Namespace `ns`.
    pub fn put_namespace(&self, ns: &k8s_openapi::api::core::v1::Namespace) {
        self.put(NAMESPACES, serde_json::to_value(ns).unwrap());
    }

    /// Deletes the Namespace `name` (not the objects in it).
    pub fn delete_namespace(&self, name: &str) {
        self.delete(NAMESPACES, "", name);
    }

    /// Creates or replaces the Pod `pod` (its `metadata.namespace` and `metadata.name`).
    pub fn put_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        self.put(PODS, serde_json::to_value(pod).unwrap());
    }

    /// Deletes the Pod `namespace`/`name`.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.delete(PODS, namespace, name);
    }

    /// Creates or replaces the NetworkPolicy `policy`.
    pub fn put_network_policy(&self, policy: &k8s_openapi::api::networking::v1::NetworkPolicy) {
        self.put(NETWORKPOLICIES, serde_json::to_value(policy).unwrap());
    }

    /// Deletes the NetworkPolicy `namespace`/`name`.
    pub fn delete_network_policy(&self, namespace: &str, name: &str) {
        self.delete(NETWORKPOLICIES, namespace, name);
    }

    /// The Node `name` as stored now (with the status patches applied).
    pub fn node(&self, name: &str) -> Option<k8s_openapi::api::core::v1::Node> {
        let st = self.0.store.lock().unwrap();
        let v = st.objects.get(NODES)?.get(name)?.clone();
        Some(serde_json::from_value(v).unwrap())
    }

    /// The condition `type_` of the Node `name`: (status, reason, message).
    pub fn node_condition(&self, name: &str, type_: &str) -> Option<(String, String, String)> {
        let n = self.node(name)?;
        let c = n
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == type_)?;
        Some((
            c.status,
            c.reason.unwrap_or_default(),
            c.message.unwrap_or_default(),
        ))
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.0.seen.lock().unwrap().clone()
    }

    /// The Events sent so far, in order: (type, reason, note), one per creation and one per
    /// repeat (kube-rs's recorder sends a repeat of an Event it sent before as a patch of that
    /// Event's series).
    pub fn events(&self) -> Vec<(String, String, String)> {
        let mut created: BTreeMap<String, Value> = BTreeMap::new();
        let mut sent = Vec::new();
        for r in self.requests() {
            let event = if r.method == Method::POST && r.path.ends_with("/events") {
                let name = r.body["metadata"]["name"].as_str().unwrap_or_default();
                created.insert(name.to_string(), r.body.clone());
                r.body
            } else if r.method == Method::PATCH && r.path.contains("/events/") {
                let name = r.path.rsplit('/').next().unwrap_or_default();
                created.get(name).cloned().unwrap_or_default()
            } else {
                continue;
            };
            let s = |k: &str| event[k].as_str().unwrap_or_default().to_string();
            sent.push((s("type"), s("reason"), s("note")));
        }
        sent
    }

    fn put(&self, collection: &'static str, obj: Value) {
        let mut st = self.0.store.lock().unwrap();
        self.put_locked(&mut st, collection, obj);
    }

    fn put_locked(&self, st: &mut Store, collection: &'static str, mut obj: Value) {
        let (namespace, name) = namespace_and_name(&obj);
        assert!(!name.is_empty(), "an object without metadata.name: {obj}");
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let kind = match st
            .objects
            .entry(collection)
            .or_default()
            .insert(key(&namespace, &name), obj.clone())
        {
            Some(_) => "MODIFIED",
            None => "ADDED",
        };
        self.record(st, collection, kind, obj);
    }

    /// Deletes `namespace`/`name` (`namespace` empty for a cluster-scoped object), if there.
    fn delete(&self, collection: &'static str, namespace: &str, name: &str) {
        let mut st = self.0.store.lock().unwrap();
        let Some(mut obj) = st
            .objects
            .entry(collection)
            .or_default()
            .remove(&key(namespace, name))
        else {
            return;
        };
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        self.record(&mut st, collection, "DELETED", obj);
    }

    fn record(&self, st: &mut Store, collection: &'static str, kind: &str, obj: Value) {
        let (namespace, name) = namespace_and_name(&obj);
        let change = Change {
            rv: st.rv,
            collection,
            namespace,
            name,
            line: format!("{}\n", json!({"type": kind, "object": obj})),
        };
        if let Some(held) = st.held.as_mut() {
            held.push(change);
            return;
        }
        st.history.push(change.clone());
        let _ = self.0.changes.send(change);
    }

    /// Merges a strategic-merge patch of `status.conditions` (keyed by `type`) into the Node
    /// as it is now, under one lock: like the API server's status subresource, it never
    /// changes anything but the status, whatever else changed the Node meanwhile.
    fn patch_node_status(&self, name: &str, patch: &Value) -> Option<Value> {
        let mut st = self.0.store.lock().unwrap();
        let mut node = st.objects.get(NODES)?.get(name)?.clone();
        let mut conditions = node["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in patch["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            conditions.retain(|old| old["type"] != c["type"]);
            conditions.push(c.clone());
        }
        node["status"]["conditions"] = Value::Array(conditions);
        self.put_locked(&mut st, NODES, node.clone());
        Some(node)
    }
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

async fn handle(
    State(api): State<FakeKube>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    api.0.seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        body: body.clone(),
    });
    if api.0.down.load(Ordering::SeqCst) {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "down",
        );
    }
    if path == "/version" {
        let v = "v1.34.0-fake";
        return axum::Json(json!({
            "major": "1", "minor": "34", "gitVersion": v, "gitCommit": "0", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26", "compiler": "gc",
            "platform": "linux/amd64",
        }))
        .into_response();
    }
    if method == Method::POST && path.ends_with("/events") {
        return (StatusCode::CREATED, axum::Json(body)).into_response();
    }
    if method == Method::PATCH && path.contains("/events/") {
        return axum::Json(body).into_response();
    }
    let Some((collection, namespace, segments)) = route(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{path}: not served"),
        );
    };
    let namespaced = COLLECTIONS.iter().any(|(c, n)| *c == collection && *n);
    let filter = Filter {
        namespace: namespace.map(str::to_string),
        name: selected_name(&query),
    };
    match (method, segments.as_slice()) {
        (Method::GET, []) if query.get("watch").map(String::as_str) == Some("true") => {
            watch(&api, collection, filter, &query)
        }
        (Method::GET, []) => list(&api, collection, &filter),
        // A namespaced object is read under its namespace only.
        (Method::GET, [name]) if namespaced == namespace.is_some() => {
            let st = api.0.store.lock().unwrap();
            let k = key(namespace.unwrap_or_default(), name);
            match st.objects.get(collection).and_then(|o| o.get(&k)) {
                Some(o) => axum::Json(o.clone()).into_response(),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{name} not found"),
                ),
            }
        }
        (Method::PATCH, [name, "status"]) if collection == NODES => {
            match api.patch_node_status(name, &body) {
                Some(n) => axum::Json(n).into_response(),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{name} not found"),
                ),
            }
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &path),
    }
}

/// The collection a request path names, the namespace for a namespaced path
/// (`<group>/namespaces/<ns>/<resource>/…`), and the segments after the collection: none
/// (list, watch), `[name]` (get) or `[name, subresource]`.
fn route(path: &str) -> Option<(&'static str, Option<&str>, Vec<&str>)> {
    fn segments(rest: &str) -> Vec<&str> {
        rest.split('/').filter(|s| !s.is_empty()).collect()
    }
    for (collection, namespaced) in COLLECTIONS {
        if !namespaced {
            continue;
        }
        let (group, resource) = collection.rsplit_once('/').unwrap();
        let Some(rest) = path
            .strip_prefix(group)
            .and_then(|r| r.strip_prefix("/namespaces/"))
        else {
            continue;
        };
        if let [ns, r, tail @ ..] = segments(rest).as_slice() {
            if *r == resource {
                return Some((collection, Some(*ns), tail.to_vec()));
            }
        }
    }
    COLLECTIONS.iter().find_map(|(collection, _)| {
        let rest = path.strip_prefix(collection)?;
        (rest.is_empty() || rest.starts_with('/')).then(|| (*collection, None, segments(rest)))
    })
}

/// Which objects of a collection a list or watch asks for: one namespace's (a namespaced
/// path), one name (`fieldSelector=metadata.name=<name>`), or all.
#[derive(Clone)]
struct Filter {
    namespace: Option<String>,
    name: Option<String>,
}

impl Filter {
    fn matches(&self, namespace: &str, name: &str) -> bool {
        self.namespace.as_ref().is_none_or(|n| n == namespace)
            && self.name.as_ref().is_none_or(|n| n == name)
    }
}

/// The name a `fieldSelector=metadata.name=<name>` asks for.
fn selected_name(query: &BTreeMap<String, String>) -> Option<String> {
    query
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .map(str::to_string)
}

fn list(api: &FakeKube, collection: &'static str, filter: &Filter) -> Response {
    let st = api.0.store.lock().unwrap();
    let items: Vec<Value> = st
        .objects
        .get(collection)
        .into_iter()
        .flat_map(|o| o.values())
        .filter(|v| {
            let (ns, name) = namespace_and_name(v);
            filter.matches(&ns, &name)
        })
        .cloned()
        .collect();
    axum::Json(json!({
        "apiVersion": "v1", "kind": "List",
        "metadata": {"resourceVersion": st.rv.to_string()}, "items": items,
    }))
    .into_response()
}

fn watch(
    api: &FakeKube,
    collection: &'static str,
    filter: Filter,
    query: &BTreeMap<String, String>,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout: u64 = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(1800);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let wanted =
        move |c: &Change| c.collection == collection && filter.matches(&c.namespace, &c.name);
    // Subscribed before the history is read, so no change falls between the two.
    let live = api.0.changes.subscribe();
    let replay: Vec<Change> = {
        let st = api.0.store.lock().unwrap();
        st.history
            .iter()
            .filter(|c| c.rv > from && wanted(c))
            .cloned()
            .collect()
    };
    let last = replay.last().map_or(from, |c| c.rv);
    let replayed =
        futures::stream::iter(replay.into_iter().map(|c| Ok::<_, std::io::Error>(c.line)));
    let live = futures::stream::unfold((live, last), move |(mut rx, last)| {
        let wanted = wanted.clone();
        async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return None,
                    c = rx.recv() => match c {
                        Ok(c) if c.rv > last && wanted(&c) => {
                            let rv = c.rv;
                            return Some((Ok(c.line), (rx, rv)));
                        }
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(_) => return None,
                    },
                }
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(replayed.chain(live).boxed()))
        .unwrap()
}
