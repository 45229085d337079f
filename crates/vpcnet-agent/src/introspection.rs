//! Introspection HTTP server (default 127.0.0.1:61679): /v1/enis, /v1/env-settings,
//! /v1/pods, /healthz, with the documents of the `vpcnet-introspection` crate. Answers from
//! memory only; never waits on EC2 or IMDS, and holds the pool lock only to copy the pool.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use anyhow::Context;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use vpcnet_introspection as doc;
use vpcnet_ipam::{Assignment, PodKey, Pool};

use crate::clock::now_ms;
use crate::state::{NodeFacts, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(doc::HEALTHZ, get(healthz))
        .route(doc::ENIS, get(enis))
        .route(doc::PODS, get(pods))
        .route(doc::ENV_SETTINGS, get(env_settings))
        .route(doc::APISERVER, get(apiserver))
        .route(doc::ENICONFIG, get(eniconfig))
        .route(doc::DATAPATH, get(datapath))
        .with_state(shared)
}

/// `/healthz`: 200 once the pool has been filled; 503 while starting, as soon as an essential
/// task has stopped (the body names it; the process exits right after), and while the datapath
/// audit finds a problem that cuts every pod off and cannot repair it (`datapath: ...`).
async fn healthz(State(s): State<Arc<Shared>>) -> (axum::http::StatusCode, String) {
    if let Some(why) = s.failure() {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("failed: {why}\n"),
        )
    } else if let Some(why) = s.datapath_not_ready() {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("datapath: {why}\n"),
        )
    } else if s.is_ready() {
        (axum::http::StatusCode::OK, "ok\n".into())
    } else {
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "starting\n".into(),
        )
    }
}

/// `/v1/datapath`: the datapath audit's last pass (answers from memory).
async fn datapath(State(s): State<Arc<Shared>>) -> axum::Json<doc::DatapathDoc> {
    axum::Json(s.health().datapath())
}

/// `/v1/apiserver`: the Kubernetes API client's state (answers from memory).
async fn apiserver(State(s): State<Arc<Shared>>) -> axum::Json<doc::ApiServerDoc> {
    axum::Json(s.kube().api_doc())
}

/// `/v1/eniconfig`: the node's ENIConfig under custom networking (state `disabled` without).
async fn eniconfig(State(s): State<Arc<Shared>>) -> axum::Json<doc::EniConfigDoc> {
    axum::Json(match s.kube().eniconfig() {
        Some(tx) => tx.borrow().doc(s.opts.api.node_name.as_deref()),
        None => doc::EniConfigDoc::default(),
    })
}

/// `/v1/enis` of the agent now: the pool is copied under its lock, the document built from
/// the copy.
pub fn enis_doc(s: &Shared) -> doc::EnisDoc {
    let pool = s.pool().clone();
    let last_error = s.health().last_error();
    let mut doc = build_enis_doc(&s.facts, &pool, last_error, now_ms());
    doc.provisioning = s.opts.provisioning.label().into();
    doc
}

/// `/v1/enis` of `pool` at `now_ms`, in one pass over its addresses.
pub fn build_enis_doc(
    facts: &NodeFacts,
    pool: &Pool,
    last_error: Option<String>,
    now_ms: u64,
) -> doc::EnisDoc {
    let cooldown_ms = pool.config().cooldown_ms;
    let mut owners: HashMap<Ipv4Addr, (&PodKey, &Assignment)> = HashMap::new();
    for (k, a) in pool.assignments() {
        owners.entry(a.ip).or_insert((k, a));
    }
    let released: HashMap<Ipv4Addr, u64> = pool.cooldowns().collect();
    let enis = pool
        .enis()
        .map(|e| doc::Eni {
            id: e.info.id.clone(),
            mac: e.info.mac.clone(),
            device_number: e.info.device_number,
            network_card: e.info.network_card,
            subnet_id: e.info.subnet_id.clone(),
            subnet_cidr: e.info.subnet_cidr.to_string(),
            primary: e.info.primary,
            primary_ip: e.info.primary_ip.to_string(),
            deleting: e.deleting,
            interface_gone: pool.interface_gone(&e.info.id),
            prefixes: e.prefixes.keys().map(|p| p.to_string()).collect(),
            addresses: e
                .addresses()
                .map(|(ip, added_at_ms)| {
                    let released_at_ms = released.get(&ip).copied();
                    doc::Address {
                        ip: ip.to_string(),
                        added_at_ms,
                        assigned: owners.get(&ip).map(|(k, a)| doc::Assigned {
                            container_id: k.container_id.clone(),
                            if_name: k.if_name.clone(),
                            namespace: a.pod.namespace.clone(),
                            name: a.pod.name.clone(),
                            assigned_at_ms: a.assigned_at_ms,
                        }),
                        released_at_ms,
                        cooling: pool.is_cooling(ip, now_ms),
                        cooldown_ends_at_ms: released_at_ms.map(|t| t + cooldown_ms),
                    }
                })
                .collect(),
        })
        .collect();
    doc::EnisDoc {
        instance_id: facts.instance_id.clone(),
        instance_type: facts.instance_type.clone(),
        summary: pool.summary(now_ms),
        plan: pool.plan(now_ms),
        orphaned: pool
            .orphaned()
            .into_iter()
            .map(|(k, ip)| doc::Orphaned {
                container_id: k.container_id,
                if_name: k.if_name,
                ip: ip.to_string(),
            })
            .collect(),
        enis,
        last_error,
        provisioning: String::new(),
    }
}

/// `/v1/pods` of `pool`: a copy of its assignments.
pub fn pods_doc(pool: &Pool) -> doc::Pods {
    pool.assignments()
        .map(|(k, a)| doc::Pod {
            container_id: k.container_id.clone(),
            if_name: k.if_name.clone(),
            namespace: a.pod.namespace.clone(),
            name: a.pod.name.clone(),
            ip: a.ip.to_string(),
            eni_id: a.eni_id.clone(),
            assigned_at_ms: a.assigned_at_ms,
        })
        .collect()
}

async fn enis(State(s): State<Arc<Shared>>) -> Json<doc::EnisDoc> {
    Json(enis_doc(&s))
}

async fn pods(State(s): State<Arc<Shared>>) -> Json<doc::Pods> {
    // Copying the assignments is all that happens under the lock.
    let pods = pods_doc(&s.pool());
    Json(pods)
}

async fn env_settings(State(s): State<Arc<Shared>>) -> Json<doc::EnvSettings> {
    Json(s.opts.env_settings.iter().cloned().collect())
}

/// Serves `router` on an already bound listener (TCP or Unix) until `stop` flips.
pub async fn serve<L>(router: Router, listener: L, mut stop: tokio::sync::watch::Receiver<bool>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let res = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = res {
        tracing::error!("HTTP server failed: {}", crate::errors::chain(&e));
    }
}

/// Binds a Unix socket for an HTTP endpoint (stale socket removed, mode 0660).
pub fn bind_unix(path: &std::path::Path, what: &str) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot bind {what} on unix:{}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(l)
}

/// Prometheus metrics (default :61678/metrics).
pub fn metrics_router(metrics: Arc<crate::metrics::Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        crate::metrics::CONTENT_TYPE,
                    )],
                    m.encode(),
                )
            }
        }),
    )
}
