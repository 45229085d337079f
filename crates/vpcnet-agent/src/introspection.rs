//! Introspection HTTP server (default 127.0.0.1:61679): /v1/enis, /v1/env-settings,
//! /v1/pods, /healthz. Answers from memory only; never waits on EC2 or IMDS.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::state::{now_ms, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/enis", get(enis))
        .route("/v1/pods", get(pods))
        .route("/v1/env-settings", get(env_settings))
        .with_state(shared)
}

async fn healthz(State(s): State<Arc<Shared>>) -> (axum::http::StatusCode, &'static str) {
    if s.is_ready() {
        (axum::http::StatusCode::OK, "ok\n")
    } else {
        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// ENIs with their addresses, assignments and cooldowns, plus pool counts.
pub fn enis_json(s: &Shared) -> Value {
    let now = now_ms();
    let pool = s.pool();
    let cooldown_ms = pool.config().cooldown_ms;
    let enis: Vec<Value> = pool
        .enis()
        .map(|e| {
            let addrs: Vec<Value> = e
                .addresses()
                .map(|(ip, added)| {
                    let owner = pool.assignments().find(|(_, a)| a.ip == ip);
                    let cooldown = pool.cooldowns().find(|(c, _)| *c == ip).map(|(_, t)| t);
                    json!({
                        "ip": ip.to_string(),
                        "added_at_ms": added,
                        "assigned": owner.map(|(k, a)| json!({
                            "container_id": k.container_id, "if_name": k.if_name,
                            "namespace": a.pod.namespace, "name": a.pod.name, "assigned_at_ms": a.assigned_at_ms,
                        })),
                        "released_at_ms": cooldown,
                        "cooling": pool.is_cooling(ip, now),
                        "cooldown_ends_at_ms": cooldown.map(|t| t + cooldown_ms),
                    })
                })
                .collect();
            json!({
                "id": e.info.id, "mac": e.info.mac, "device_number": e.info.device_number,
                "network_card": e.info.network_card, "subnet_id": e.info.subnet_id,
                "subnet_cidr": e.info.subnet_cidr.to_string(), "primary": e.info.primary,
                "primary_ip": e.info.primary_ip.to_string(), "deleting": e.deleting,
                "prefixes": e.prefixes.keys().map(|p| p.to_string()).collect::<Vec<_>>(),
                "addresses": addrs,
            })
        })
        .collect();
    json!({
        "instance_id": s.facts.instance_id,
        "instance_type": s.facts.instance_type,
        "summary": pool.summary(now),
        "plan": pool.plan(now),
        "orphaned": pool.orphaned().into_iter().map(|(k, ip)| json!({"container_id": k.container_id, "if_name": k.if_name, "ip": ip.to_string()})).collect::<Vec<_>>(),
        "enis": enis,
        "last_error": s.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    })
}

async fn enis(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(enis_json(&s))
}

async fn pods(State(s): State<Arc<Shared>>) -> Json<Value> {
    let pool = s.pool();
    Json(Value::Array(
        pool.assignments()
            .map(|(k, a)| json!({"container_id": k.container_id, "if_name": k.if_name, "namespace": a.pod.namespace, "name": a.pod.name, "ip": a.ip.to_string(), "eni_id": a.eni_id, "assigned_at_ms": a.assigned_at_ms}))
            .collect(),
    ))
}

async fn env_settings(State(s): State<Arc<Shared>>) -> Json<Value> {
    let map: serde_json::Map<String, Value> = s
        .opts
        .env_settings
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    Json(Value::Object(map))
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
        tracing::error!("HTTP server failed: {e}");
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
        .map_err(|e| anyhow::anyhow!("cannot bind {what} on unix:{}: {e}", path.display()))?;
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
