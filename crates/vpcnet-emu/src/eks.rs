//! EKS: `DescribeCluster`, REST-JSON (`GET /clusters/{name}`), as aws-sdk-eks calls it through
//! its endpoint override, and the control API for cluster records (`/_emu/eks/clusters`).
//!
//! Requests signed with SigV4 must be scoped to service `eks` and the emulator's region
//! (otherwise `InvalidSignatureException`, 403, as EKS answers). Calls are counted under
//! `DescribeCluster` in [`crate::CallCounts`] and take the action's faults
//! ([`Emulator::set_action_faults`]): a throttled call answers `ThrottlingException` (429),
//! an injected error its code (`ServerException` → 500, `ServiceUnavailableException` → 503,
//! `AccessDeniedException` → 403, others 400). Errors carry `x-amzn-ErrorType` and a JSON body
//! `{"message": ...}`.

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use http::StatusCode;
use serde_json::json;

use crate::emulator::Emulator;
use crate::error::Ec2Error;
use crate::model::{cluster_not_found, EksCluster, EksClusterSpec};

/// The action name calls are counted and faulted under.
pub const DESCRIBE_CLUSTER: &str = "DescribeCluster";

/// HTTP status EKS answers error `code` with.
fn status_for(code: &str) -> u16 {
    match code {
        "ResourceNotFoundException" | "NotFoundException" => 404,
        "ResourceInUseException" => 409,
        "AccessDeniedException" | "InvalidSignatureException" | "UnrecognizedClientException" => {
            403
        }
        "ThrottlingException" | "TooManyRequestsException" => 429,
        "ServerException" | "InternalFailure" | "InternalError" => 500,
        "ServiceUnavailableException" | "Unavailable" => 503,
        _ => 400,
    }
}

fn error(e: &Ec2Error, request_id: &str) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status_for(&e.code)).unwrap_or(StatusCode::BAD_REQUEST))
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("x-amzn-errortype", e.code.as_str())
        .header("x-amzn-requestid", request_id)
        .body(Body::from(json!({ "message": e.message }).to_string()))
        .expect("static response parts")
}

/// The DescribeCluster body for `c`, in EKS's JSON shape.
fn describe_body(c: &EksCluster) -> serde_json::Value {
    let mut net = json!({ "ipFamily": c.ip_family });
    if let Some(v4) = &c.service_ipv4_cidr {
        net["serviceIpv4Cidr"] = json!(v4);
    }
    if let Some(v6) = &c.service_ipv6_cidr {
        net["serviceIpv6Cidr"] = json!(v6);
    }
    let mut cluster = json!({
        "name": c.name,
        "arn": c.arn,
        "createdAt": c.created_at,
        "version": c.version,
        "endpoint": c.endpoint,
        "status": c.status,
        "certificateAuthority": { "data": c.certificate_authority },
        "kubernetesNetworkConfig": net,
        "platformVersion": "eks.1",
        "tags": {},
    });
    if let Some(id) = &c.id {
        cluster["id"] = json!(id);
    }
    if !c.outpost_arns.is_empty() {
        cluster["outpostConfig"] = json!({
            "outpostArns": c.outpost_arns,
            "controlPlaneInstanceType": "m5.large",
        });
    }
    json!({ "cluster": cluster })
}

/// The SigV4 credential scope in `headers`' `Authorization`, `(region, service)`.
pub(crate) fn signing_scope_of(headers: &http::HeaderMap) -> Option<(String, String)> {
    let auth = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let cred = auth.split("Credential=").nth(1)?;
    let scope: Vec<&str> = cred.split([',', ' ']).next()?.split('/').collect();
    // AKID/DATE/REGION/SERVICE/aws4_request
    (scope.len() == 5).then(|| (scope[2].to_string(), scope[3].to_string()))
}

/// The front every JSON-protocol call (EKS, ECR) passes: counted under `action`, its SigV4
/// scope checked against `service` and the emulator's region (`InvalidSignatureException`),
/// then its fault admission (latency, injected errors, `ThrottlingException`). `Err` is the
/// error to answer in the service's own error shape.
pub(crate) async fn admit_json_call(
    emu: &Emulator,
    action: &str,
    service: &str,
    headers: &http::HeaderMap,
) -> Result<(), Ec2Error> {
    emu.inner
        .counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .per_action
        .entry(action.to_string())
        .and_modify(|n| *n += 1)
        .or_insert(1);
    if let Some((region, got)) = signing_scope_of(headers) {
        let want = emu.region();
        if got != service || region != want {
            return Err(Ec2Error::new(
                "InvalidSignatureException",
                format!("Credential should be scoped to a valid region and to service '{service}' (got '{region}', '{got}'; this endpoint is '{want}', '{service}')."),
            ));
        }
    }
    let admission = emu
        .inner
        .faults
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .admit(action, Instant::now());
    if !admission.latency.is_zero() {
        tokio::time::sleep(admission.latency).await;
    }
    match admission.error {
        Some(_) if admission.throttled => {
            Err(Ec2Error::new("ThrottlingException", "Rate exceeded"))
        }
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `GET /clusters/{name}`.
pub(crate) async fn describe_cluster(
    State(emu): State<Emulator>,
    Path(name): Path<String>,
    req: Request,
) -> Response {
    let request_id = emu.next_request_id();
    if let Err(e) = admit_json_call(&emu, DESCRIBE_CLUSTER, "eks", req.headers()).await {
        return error(&e, &request_id);
    }
    match emu.with_cloud(|c| c.eks_cluster(&name).cloned()) {
        Some(c) => Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("x-amzn-requestid", request_id)
            .body(Body::from(describe_body(&c).to_string()))
            .expect("static response parts"),
        None => error(&cluster_not_found(&name), &request_id),
    }
}

impl Emulator {
    /// Create an EKS cluster record (answered by DescribeCluster). Errors:
    /// `ResourceInUseException`, `InvalidParameterException` naming the field.
    pub fn create_eks_cluster(&self, spec: EksClusterSpec) -> Result<EksCluster, Ec2Error> {
        let now = chrono::Utc::now().timestamp();
        self.with_cloud_mut(|c| c.create_eks_cluster(spec, now))
    }

    pub fn eks_cluster(&self, name: &str) -> Option<EksCluster> {
        self.with_cloud(|c| c.eks_cluster(name).cloned())
    }

    /// Every cluster, sorted by name.
    pub fn eks_clusters(&self) -> Vec<EksCluster> {
        self.with_cloud(|c| c.eks_clusters().cloned().collect())
    }

    /// Remove a cluster record. Errors: `ResourceNotFoundException`.
    pub fn delete_eks_cluster(&self, name: &str) -> Result<(), Ec2Error> {
        self.with_cloud_mut(|c| c.delete_eks_cluster(name))
    }
}

/// Control API routes, nested under `/_emu`: `POST /eks/clusters` ([`EksClusterSpec`] →
/// [`EksCluster`]), `GET /eks/clusters`, `GET`/`DELETE /eks/clusters/{name}`.
pub(crate) fn control_routes() -> Router<Emulator> {
    Router::new()
        .route("/eks/clusters", get(list).post(create))
        .route("/eks/clusters/{name}", get(get_one).delete(delete))
}

fn control_error(e: Ec2Error) -> Response {
    let status = StatusCode::from_u16(status_for(&e.code)).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(json!({"code": e.code, "message": e.message}))).into_response()
}

async fn create(State(emu): State<Emulator>, body: Bytes) -> Response {
    let spec: EksClusterSpec = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => {
            return control_error(Ec2Error::new(
                "InvalidParameterException",
                format!("bad JSON body: {e}"),
            ))
        }
    };
    match emu.create_eks_cluster(spec) {
        Ok(c) => Json(c).into_response(),
        Err(e) => control_error(e),
    }
}

async fn list(State(emu): State<Emulator>) -> Response {
    Json(emu.eks_clusters()).into_response()
}

async fn get_one(State(emu): State<Emulator>, Path(name): Path<String>) -> Response {
    match emu.eks_cluster(&name) {
        Some(c) => Json(c).into_response(),
        None => control_error(cluster_not_found(&name)),
    }
}

async fn delete(State(emu): State<Emulator>, Path(name): Path<String>) -> Response {
    match emu.delete_eks_cluster(&name) {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => control_error(e),
    }
}
