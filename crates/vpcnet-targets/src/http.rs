//! `/healthz` (200 once the caches synced and the desired sets were computed, 503 before) and
//! `/metrics` (OpenMetrics text) on one listener.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::controller::Synced;
use crate::metrics::{Metrics, CONTENT_TYPE};

/// The router of the two endpoints.
pub fn router(metrics: Metrics, synced: Synced) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let ok = synced.load(Ordering::Relaxed);
                async move {
                    if ok {
                        (StatusCode::OK, "ok\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet\n")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let text = metrics.encode();
                async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response() }
            }),
        )
}

/// Serves [`router`] on `addr` until the process ends. Errors: the address cannot be bound.
pub async fn serve(addr: SocketAddr, metrics: Metrics, synced: Synced) -> Result<()> {
    let l = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("binding the health/metrics listener on {addr} (set --http-addr)")
    })?;
    axum::serve(l, router(metrics, synced))
        .await
        .context("serving /healthz and /metrics")
}
