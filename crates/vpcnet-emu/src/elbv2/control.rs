//! ELBv2's part of the JSON control API, under `/_emu/elbv2/` (faults and call counts are the
//! emulator's own, `/_emu/faults` and `/_emu/calls`, keyed `elbv2:<Action>`):
//!
//! | method and path | body → answer |
//! |---|---|
//! | `GET /_emu/elbv2/limits`, `PUT /_emu/elbv2/limits` | [`Limits`] (fields left out keep their defaults) |

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use serde_json::json;

use super::model::Limits;
use crate::control::{ok, parse, ApiResult};
use crate::emulator::Emulator;

pub(crate) fn router() -> Router<Emulator> {
    Router::new().route("/limits", get(get_limits).put(put_limits))
}

async fn get_limits(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.elbv2_limits())
}

async fn put_limits(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let l: Limits = parse(&body)?;
    emu.set_elbv2_limits(l);
    ok(json!({}))
}
