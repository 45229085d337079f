//! ECR: `GetAuthorizationToken` in AWS JSON 1.1 (`POST /`, header
//! `X-Amz-Target: AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken`), as
//! ecr-credential-provider calls it through aws-sdk-go-v2 with `AWS_ENDPOINT_URL_ECR` pointing
//! here, and the control API `GET /_emu/ecr/credentials` that gives the lab's registry the same
//! user name and password.
//!
//! The token is base64 of `AWS:<password>`, as ECR's; the password is fixed per emulator seed
//! (the registry is configured once, tokens stay valid across calls), valid 12 hours as ECR's.
//! Requests signed with SigV4 must be scoped to service `ecr` and the emulator's region
//! (otherwise `InvalidSignatureException`, 403). Calls are counted under
//! `GetAuthorizationToken` in [`crate::CallCounts`] and take that action's faults: throttled
//! calls answer `ThrottlingException` (400, as ECR), injected errors their code
//! (`ServerException` → 500, `AccessDeniedException` → 403, others 400). Other targets answer
//! `UnknownOperationException`.

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine;
use http::{HeaderMap, StatusCode};
use serde_json::json;

use crate::emulator::Emulator;
use crate::error::Ec2Error;

/// The action name calls are counted and faulted under.
pub const GET_AUTHORIZATION_TOKEN: &str = "GetAuthorizationToken";
/// The JSON 1.1 target prefix of the ECR API.
const TARGET_PREFIX: &str = "AmazonEC2ContainerRegistry_V20150921.";
/// ECR's user name in every token.
pub const USER: &str = "AWS";
/// How long a token is valid, as ECR's.
const TOKEN_SECONDS: i64 = 12 * 3600;

/// Whether a request is for the ECR API (by its `X-Amz-Target`).
pub(crate) fn is_ecr(headers: &HeaderMap) -> bool {
    headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with(TARGET_PREFIX))
}

fn status_for(code: &str) -> u16 {
    match code {
        "AccessDeniedException" | "InvalidSignatureException" | "UnrecognizedClientException" => {
            403
        }
        "ServerException" | "InternalFailure" | "InternalError" => 500,
        "ServiceUnavailableException" | "Unavailable" => 503,
        _ => 400,
    }
}

fn error(e: &Ec2Error, request_id: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status_for(&e.code)).unwrap_or(StatusCode::BAD_REQUEST))
        .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.1")
        .header("x-amzn-requestid", request_id)
        .body(Body::from(
            json!({ "__type": e.code, "message": e.message }).to_string(),
        ))
        .expect("static response parts")
}

impl Emulator {
    /// The registry password every token of this emulator carries (user [`USER`]).
    pub fn ecr_password(&self) -> String {
        // Fixed per seed, so a registry configured once accepts every token.
        format!(
            "vpcnet-emu-ecr-{:016x}",
            self.seed().wrapping_mul(0x9e37_79b9_7f4a_7c15)
        )
    }

    /// The registry host of this emulator's account and region, as ECR names it.
    pub fn ecr_registry_host(&self) -> String {
        self.with_cloud(|c| format!("{}.dkr.ecr.{}.amazonaws.com", c.account_id, c.region))
    }
}

/// `POST /` with an ECR `X-Amz-Target` (the server routes it here).
pub(crate) async fn call(emu: Emulator, headers: &HeaderMap) -> Response {
    let request_id = emu.next_request_id();
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let action = target.strip_prefix(TARGET_PREFIX).unwrap_or(target);
    if action != GET_AUTHORIZATION_TOKEN {
        let e = Ec2Error::new(
            "UnknownOperationException",
            format!("vpcnet-emu answers only GetAuthorizationToken of ECR, not {action}"),
        );
        return error(&e, &request_id);
    }
    if let Err(e) = crate::eks::admit_json_call(&emu, GET_AUTHORIZATION_TOKEN, "ecr", headers).await
    {
        return error(&e, &request_id);
    }
    let token =
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{}", emu.ecr_password()));
    let expires = chrono::Utc::now().timestamp() + TOKEN_SECONDS;
    let body = json!({
        "authorizationData": [{
            "authorizationToken": token,
            "expiresAt": expires,
            "proxyEndpoint": format!("https://{}", emu.ecr_registry_host()),
        }]
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.1")
        .header("x-amzn-requestid", request_id)
        .body(Body::from(body.to_string()))
        .expect("static response parts")
}

/// Control API route, nested under `/_emu`: `GET /ecr/credentials` →
/// `{"registry", "username", "password"}` for the lab's registry.
pub(crate) fn control_routes() -> Router<Emulator> {
    Router::new().route("/ecr/credentials", get(credentials))
}

async fn credentials(State(emu): State<Emulator>) -> Response {
    Json(json!({
        "registry": emu.ecr_registry_host(),
        "username": USER,
        "password": emu.ecr_password(),
    }))
    .into_response()
}
