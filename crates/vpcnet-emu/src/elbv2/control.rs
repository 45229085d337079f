//! ELBv2's part of the JSON control API, under `/_emu/elbv2/`:
//!
//! | method and path | body → answer |
//! |---|---|
//! | `GET /_emu/elbv2/faults`, `PUT /_emu/elbv2/faults` | [`Faults`] (`actions` only) |
//! | `PUT /_emu/elbv2/faults/actions/{action}` | [`ActionFaults`]; `DELETE` clears |
//! | `GET /_emu/elbv2/limits`, `PUT /_emu/elbv2/limits` | [`Limits`] |
//! | `GET /_emu/elbv2/calls` | → [`CallCounts`]; `DELETE` resets |
//!
//! [`CallCounts`]: crate::faults::CallCounts

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::Router;
use serde_json::json;

use super::model::Limits;
use crate::control::{ok, parse, ApiResult};
use crate::emulator::Emulator;
use crate::faults::{ActionFaults, Faults};

pub(crate) fn router() -> Router<Emulator> {
    Router::new()
        .route("/faults", get(get_faults).put(put_faults))
        .route(
            "/faults/actions/{action}",
            axum::routing::put(put_action).delete(delete_action),
        )
        .route("/limits", get(get_limits).put(put_limits))
        .route("/calls", get(calls).delete(reset_calls))
}

async fn get_faults(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.elbv2_faults())
}

async fn put_faults(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let f: Faults = parse(&body)?;
    emu.set_elbv2_faults(f)?;
    ok(json!({}))
}

async fn put_action(
    State(emu): State<Emulator>,
    Path(action): Path<String>,
    body: Bytes,
) -> ApiResult {
    let f: ActionFaults = parse(&body)?;
    emu.set_elbv2_action_faults(&action, Some(f))?;
    ok(json!({}))
}

async fn delete_action(State(emu): State<Emulator>, Path(action): Path<String>) -> ApiResult {
    emu.set_elbv2_action_faults(&action, None)?;
    ok(json!({}))
}

async fn get_limits(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.elbv2_limits())
}

async fn put_limits(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let l: Limits = parse(&body)?;
    emu.set_elbv2_limits(l);
    ok(json!({}))
}

async fn calls(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.elbv2_calls())
}

async fn reset_calls(State(emu): State<Emulator>) -> ApiResult {
    emu.reset_elbv2_calls();
    ok(json!({}))
}
