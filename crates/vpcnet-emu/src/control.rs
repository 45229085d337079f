//! The JSON control API under `/_emu/`, mirroring the in-process methods of [`Emulator`].
//!
//! | method and path | body → answer |
//! |---|---|
//! | `POST /_emu/vpcs` | `{"cidr","extra_cidrs"?,"ipv6_cidr"?}` (IPv6: a /56) → `{"vpc_id","default_security_group_id"}` |
//! | `POST /_emu/subnets` | `{"vpc_id","cidr","availability_zone","ipv6_cidr"?,"assign_ipv6_address_on_creation"?}` (IPv6: a /64 of the VPC's /56) → `{"subnet_id"}` |
//! | `POST /_emu/subnets/{id}/fragment` | → `{"addresses":[..]}`: one address taken in every free aligned /28 (prefixes fail with `InsufficientCidrBlocks`); `DELETE` gives them back |
//! | `POST /_emu/security-groups` | `{"vpc_id","name"}` → `{"group_id"}` |
//! | `POST /_emu/instance-types` | [`InstanceTypeSpec`] → `{}` |
//! | `POST /_emu/instances` | [`RunInstance`] → [`crate::InstanceInfo`] |
//! | `GET /_emu/instances`, `GET /_emu/instances/{id}` | → instance(s) |
//! | `DELETE /_emu/instances/{id}` | terminate → `{}` |
//! | `GET /_emu/instances/{id}/imds` | → `{"url"}` (a per-instance IMDS listener) |
//! | `GET /_emu/enis`, `GET /_emu/enis/{id}` | → one or all [`crate::EniInfo`] |
//! | `POST /_emu/enis/{id}/unassign` | `{"ips":[..],"prefixes":[..]}` → `{}` (behind the agent's back) |
//! | `POST /_emu/enis/{id}/detach` | → `{}` (behind the agent's back) |
//! | `GET /_emu/faults`, `PUT /_emu/faults` | [`Faults`] |
//! | `PUT /_emu/faults/actions/{action}` | [`ActionFaults`]; `DELETE` clears |
//! | `GET /_emu/account-limits` | → [`crate::AccountLimitsView`]: the account's rate limits and every live bucket (level, calls admitted and throttled) |
//! | `PUT /_emu/account-limits` | [`crate::AccountLimits`] → `{}` (every account bucket restarts full); `DELETE` turns them off |
//! | `PUT /_emu/imds-lag` | `{"instance_id"?,"ms"}` |
//! | `PUT /_emu/empty-private-dns-names` | `{"calls"}` |
//! | `GET /_emu/calls` | → [`crate::CallCounts`]; `DELETE` resets |
//! | `GET /_emu/requests?since=SEQ` | → [`crate::RequestLog`] (records with `seq > SEQ`, default 0); `DELETE` clears |
//! | `POST /_emu/eks/clusters` | [`crate::model::EksClusterSpec`] → [`crate::model::EksCluster`] |
//! | `GET /_emu/eks/clusters`, `GET /_emu/eks/clusters/{name}` | → cluster(s); `DELETE` removes one |
//! | `GET`/`PUT /_emu/elbv2/limits` | ELBv2 quotas: [`crate::elbv2::control`] (ELBv2 faults and calls: the rows above, keyed `elbv2:<Action>`) |
//!
//! Errors answer `{"code","message"}` with EC2's status for the code (400 for bad JSON, naming
//! the problem).

use std::net::Ipv4Addr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use http::StatusCode;
use ipnet::{Ipv4Net, Ipv6Net};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use vpcnet_limits::{Hypervisor, InstanceLimits, NetworkCard};

use crate::emulator::{Emulator, RunInstance};
use crate::error::Ec2Error;
use crate::faults::{ActionFaults, Faults};

/// An instance type to register (JSON shape of `POST /_emu/instance-types`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceTypeSpec {
    pub instance_type: String,
    /// IPv4 addresses per ENI, the primary included.
    pub ipv4_per_eni: u32,
    /// ENIs per network card: `[{"index":0,"max_enis":3}]`.
    pub network_cards: Vec<CardSpec>,
    #[serde(default)]
    pub default_network_card: u32,
    /// `nitro` (default) or `xen`.
    #[serde(default = "nitro")]
    pub hypervisor: String,
    #[serde(default)]
    pub bare_metal: bool,
    #[serde(default)]
    pub vcpus: Option<u32>,
}

fn nitro() -> String {
    "nitro".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CardSpec {
    pub index: u32,
    pub max_enis: u32,
}

impl InstanceTypeSpec {
    /// Convert to the limits table's shape. Errors name the bad field.
    pub fn to_limits(&self) -> Result<InstanceLimits, Ec2Error> {
        let bad = |m: &str| {
            Err(Ec2Error::invalid_value(format!(
                "instance type {}: {m}",
                self.instance_type
            )))
        };
        if self.instance_type.is_empty() {
            return bad("instance_type must not be empty");
        }
        if self.ipv4_per_eni == 0 {
            return bad("ipv4_per_eni must be >= 1");
        }
        let Some(default) = self
            .network_cards
            .iter()
            .find(|c| c.index == self.default_network_card)
        else {
            return bad("network_cards must include default_network_card");
        };
        let hypervisor = match self.hypervisor.as_str() {
            "nitro" => Hypervisor::Nitro,
            "xen" => Hypervisor::Xen,
            "" => Hypervisor::Unknown,
            _ => return bad("hypervisor must be nitro or xen"),
        };
        Ok(InstanceLimits {
            instance_type: self.instance_type.clone(),
            eni_limit: default.max_enis,
            ipv4_per_eni: self.ipv4_per_eni,
            default_network_card: self.default_network_card,
            network_cards: self
                .network_cards
                .iter()
                .map(|c| NetworkCard {
                    index: c.index,
                    max_enis: c.max_enis,
                })
                .collect(),
            hypervisor,
            bare_metal: self.bare_metal,
            vcpus: self.vcpus,
        })
    }
}

pub(crate) struct ApiError(Ec2Error);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::BAD_REQUEST);
        (
            status,
            Json(json!({"code": self.0.code, "message": self.0.message})),
        )
            .into_response()
    }
}

impl From<Ec2Error> for ApiError {
    fn from(e: Ec2Error) -> Self {
        ApiError(e)
    }
}

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError(Ec2Error::invalid_value(format!("bad JSON body: {e}"))))
}

pub(crate) fn ok(v: impl Serialize) -> ApiResult {
    Ok(Json(v).into_response())
}

fn not_found(what: &str, id: &str) -> ApiError {
    ApiError(match what {
        "eni" => Ec2Error::eni_not_found(id),
        _ => Ec2Error::instance_not_found(id),
    })
}

pub(crate) fn router() -> Router<Emulator> {
    Router::new()
        .route("/vpcs", post(create_vpc))
        .route("/subnets", post(create_subnet))
        .route(
            "/subnets/{id}/fragment",
            post(fragment_subnet).delete(defragment_subnet),
        )
        .route("/security-groups", post(create_group))
        .route("/instance-types", post(register_type))
        .route("/instances", post(run_instance).get(list_instances))
        .route("/instances/{id}", get(get_instance).delete(terminate))
        .route("/instances/{id}/imds", get(imds_endpoint))
        .route("/enis", get(list_enis))
        .route("/enis/{id}", get(get_eni))
        .route("/enis/{id}/unassign", post(unassign))
        .route("/enis/{id}/detach", post(detach))
        .route("/faults", get(get_faults).put(put_faults))
        .route(
            "/faults/actions/{action}",
            put(put_action).delete(delete_action),
        )
        .route(
            "/account-limits",
            get(get_account_limits)
                .put(put_account_limits)
                .delete(delete_account_limits),
        )
        .route("/imds-lag", put(imds_lag))
        .route("/empty-private-dns-names", put(empty_dns))
        .route("/calls", get(calls).delete(reset_calls))
        .route("/requests", get(requests).delete(clear_requests))
        .merge(crate::eks::control_routes())
        .merge(crate::ecr::control_routes())
        .nest("/elbv2", crate::elbv2::control::router())
        .fallback(|| async {
            ApiError(Ec2Error::new(
                "NotFound",
                "no such control endpoint; see vpcnet_emu::control docs",
            ))
        })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVpc {
    cidr: Ipv4Net,
    #[serde(default)]
    extra_cidrs: Vec<Ipv4Net>,
    #[serde(default)]
    ipv6_cidr: Option<Ipv6Net>,
}

async fn create_vpc(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: CreateVpc = parse(&body)?;
    ok(emu.create_vpc_with_ipv6(r.cidr, &r.extra_cidrs, r.ipv6_cidr)?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSubnet {
    vpc_id: String,
    cidr: Ipv4Net,
    availability_zone: String,
    #[serde(default)]
    ipv6_cidr: Option<Ipv6Net>,
    #[serde(default)]
    assign_ipv6_address_on_creation: bool,
}

async fn create_subnet(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: CreateSubnet = parse(&body)?;
    let id = emu.create_subnet_with_ipv6(
        &r.vpc_id,
        r.cidr,
        &r.availability_zone,
        r.ipv6_cidr,
        r.assign_ipv6_address_on_creation,
    )?;
    ok(json!({ "subnet_id": id }))
}

async fn fragment_subnet(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    ok(json!({"addresses": emu.fragment_subnet(&id)?}))
}

async fn defragment_subnet(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    ok(json!({"addresses": emu.defragment_subnet(&id)?}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateGroup {
    vpc_id: String,
    name: String,
}

async fn create_group(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: CreateGroup = parse(&body)?;
    ok(json!({"group_id": emu.create_security_group(&r.vpc_id, &r.name)?}))
}

async fn register_type(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: InstanceTypeSpec = parse(&body)?;
    emu.register_instance_type(r.to_limits()?);
    ok(json!({}))
}

async fn run_instance(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: RunInstance = parse(&body)?;
    ok(emu.run_instance(r).await?)
}

async fn list_instances(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.instances())
}

async fn get_instance(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    ok(emu
        .instance(&id)
        .ok_or_else(|| not_found("instance", &id))?)
}

async fn terminate(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    emu.terminate_instance(&id).await?;
    ok(json!({}))
}

async fn imds_endpoint(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    ok(json!({"url": emu.imds_endpoint(&id).await?}))
}

async fn list_enis(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.enis())
}

async fn get_eni(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    ok(emu.eni(&id).ok_or_else(|| not_found("eni", &id))?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Unassign {
    #[serde(default)]
    ips: Vec<Ipv4Addr>,
    #[serde(default)]
    prefixes: Vec<Ipv4Net>,
}

async fn unassign(State(emu): State<Emulator>, Path(id): Path<String>, body: Bytes) -> ApiResult {
    let r: Unassign = parse(&body)?;
    emu.unassign_behind_back(&id, &r.ips, &r.prefixes).await?;
    ok(json!({}))
}

async fn detach(State(emu): State<Emulator>, Path(id): Path<String>) -> ApiResult {
    emu.detach_behind_back(&id).await?;
    ok(json!({}))
}

async fn get_faults(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.faults())
}

async fn put_faults(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let f: Faults = parse(&body)?;
    emu.set_faults(f)?;
    ok(json!({}))
}

async fn put_action(
    State(emu): State<Emulator>,
    Path(action): Path<String>,
    body: Bytes,
) -> ApiResult {
    let f: ActionFaults = parse(&body)?;
    emu.set_action_faults(&action, Some(f))?;
    ok(json!({}))
}

async fn delete_action(State(emu): State<Emulator>, Path(action): Path<String>) -> ApiResult {
    emu.set_action_faults(&action, None)?;
    ok(json!({}))
}

async fn get_account_limits(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.account_limits())
}

async fn put_account_limits(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    emu.set_account_limits(parse(&body)?)?;
    ok(json!({}))
}

async fn delete_account_limits(State(emu): State<Emulator>) -> ApiResult {
    emu.set_account_limits(Default::default())?;
    ok(json!({}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImdsLag {
    #[serde(default)]
    instance_id: Option<String>,
    ms: u64,
}

async fn imds_lag(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: ImdsLag = parse(&body)?;
    emu.set_imds_lag(r.instance_id.as_deref(), Duration::from_millis(r.ms));
    ok(json!({}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyDns {
    calls: u32,
}

async fn empty_dns(State(emu): State<Emulator>, body: Bytes) -> ApiResult {
    let r: EmptyDns = parse(&body)?;
    emu.set_empty_private_dns_names(r.calls);
    ok(json!({}))
}

async fn calls(State(emu): State<Emulator>) -> ApiResult {
    ok(emu.calls())
}

async fn reset_calls(State(emu): State<Emulator>) -> ApiResult {
    emu.reset_calls();
    ok(json!({}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Since {
    #[serde(default)]
    since: u64,
}

async fn requests(
    State(emu): State<Emulator>,
    axum::extract::Query(q): axum::extract::Query<Since>,
) -> ApiResult {
    ok(emu.requests(q.since))
}

async fn clear_requests(State(emu): State<Emulator>) -> ApiResult {
    emu.clear_requests();
    ok(json!({}))
}
