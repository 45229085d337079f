//! IMDSv2: `PUT /latest/api/token` (header `X-aws-ec2-metadata-token-ttl-seconds`, 1..=21600)
//! then `GET /latest/meta-data/...` with header `X-aws-ec2-metadata-token`; a missing, expired
//! or foreign token answers 401.
//!
//! Served per instance on its own listener ([`Emulator::imds_endpoint`]) or on one shared
//! listener that knows the caller by its source address, the instance's primary private IP
//! ([`Emulator::serve_imds`]; the lab binds it at 169.254.169.254:80 in each node namespace).
//! The network part (`network/interfaces/macs/...`) may lag EC2 (see `Faults::imds_lag_ms`).
//! `/latest/user-data` answers the instance's user data (404 when it has none).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use axum::Router;
use http::{Method, StatusCode};

use crate::emulator::Emulator;
use crate::error::Ec2Error;
use crate::request_log::{Api, RequestRecord};

const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";

/// How an IMDS listener knows which instance is asking.
#[derive(Clone)]
pub(crate) enum Caller {
    Fixed(String),
    BySourceIp,
}

#[derive(Clone)]
pub(crate) struct ImdsState {
    emu: Emulator,
    caller: Caller,
}

fn text(status: StatusCode, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(Body::from(body))
        .expect("static response parts")
}

pub(crate) fn router(emu: Emulator, caller: Caller) -> Router {
    Router::new()
        .fallback(handle)
        .with_state(ImdsState { emu, caller })
}

/// Answers one IMDS request ([`answer`]) and logs it ([`crate::request_log`]).
async fn handle(State(st): State<ImdsState>, req: Request) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let action = format!("{} {}", req.method(), req.uri().path());
    let user_agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (instance, resp) = answer(&st, req);
    let status = resp.status();
    st.emu.log_request(RequestRecord {
        seq: 0,
        at_ms: 0,
        api: Api::Imds,
        action,
        mutating: false,
        instance_id: instance,
        source: peer,
        user_agent,
        access_key: None,
        status: status.as_u16(),
        error_code: (!status.is_success())
            .then(|| status.canonical_reason().unwrap_or("error").to_string()),
    });
    resp
}

/// The answer to one IMDS request, and the instance it was answered for.
fn answer(st: &ImdsState, req: Request) -> (Option<String>, Response) {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let instance = match &st.caller {
        Caller::Fixed(id) => Some(id.clone()),
        Caller::BySourceIp => match peer {
            Some(IpAddr::V4(ip)) => st
                .emu
                .with_cloud(|c| c.instance_by_primary_ip(ip).map(|i| i.id.clone())),
            _ => None,
        },
    };
    let Some(instance) =
        instance.filter(|i| st.emu.instance_state(i) == Some(crate::model::InstanceState::Running))
    else {
        return (
            None,
            text(
                StatusCode::NOT_FOUND,
                "no running instance is known for this caller\n".into(),
            ),
        );
    };
    let r = answer_for(st, &req, &instance);
    (Some(instance), r)
}

fn answer_for(st: &ImdsState, req: &Request, instance: &str) -> Response {
    st.emu.count_imds(instance);
    let path = req.uri().path().to_string();
    let headers = req.headers();
    if path == "/latest/api/token" {
        if req.method() != Method::PUT {
            return text(StatusCode::METHOD_NOT_ALLOWED, String::new());
        }
        if headers.contains_key("x-forwarded-for") {
            return text(StatusCode::FORBIDDEN, String::new());
        }
        let ttl = headers
            .get(TTL_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let Some(ttl) = ttl.filter(|t| (1..=21600).contains(t)) else {
            return text(StatusCode::BAD_REQUEST, String::new());
        };
        let token = st.emu.issue_imds_token(instance, Duration::from_secs(ttl));
        let mut r = text(StatusCode::OK, token);
        r.headers_mut().insert(TTL_HEADER, ttl.into());
        return r;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, String::new());
    }
    let token = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok());
    if !token.is_some_and(|t| st.emu.check_imds_token(t, instance)) {
        return text(StatusCode::UNAUTHORIZED, String::new());
    }
    match st.emu.imds_get(instance, &path) {
        Some(body) => text(StatusCode::OK, body),
        None => text(StatusCode::NOT_FOUND, String::new()),
    }
}

/// The IPv6 keys a MAC lists: each only when it has a value (IMDS answers 404 for the
/// others, as it does on EC2 for an ENI without IPv6).
fn ipv6_keys(n: &crate::model::ImdsInterface) -> Vec<&'static str> {
    let mut keys = Vec::new();
    if !n.ipv6s.is_empty() {
        keys.push("ipv6s");
    }
    if !n.ipv6_prefixes.is_empty() {
        keys.push("ipv6-prefix");
    }
    if n.subnet_ipv6_cidr.is_some() {
        keys.push("subnet-ipv6-cidr-blocks");
    }
    if !n.vpc_ipv6_cidrs.is_empty() {
        keys.push("vpc-ipv6-cidr-blocks");
    }
    keys
}

fn listing(items: &[&str]) -> String {
    items.join("\n")
}

impl Emulator {
    fn issue_imds_token(&self, instance: &str, ttl: Duration) -> String {
        let mut st = self.inner.imds.lock().unwrap_or_else(|e| e.into_inner());
        st.seq += 1;
        let token = format!(
            "AQAEA{:016x}{:08x}{:016x}",
            self.seed(),
            st.seq,
            (st.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ self.seed()
        );
        let now = Instant::now();
        st.tokens.retain(|_, (_, exp)| *exp > now);
        st.tokens
            .insert(token.clone(), (instance.to_string(), now + ttl));
        token
    }

    fn check_imds_token(&self, token: &str, instance: &str) -> bool {
        let st = self.inner.imds.lock().unwrap_or_else(|e| e.into_inner());
        st.tokens
            .get(token)
            .is_some_and(|(i, exp)| i == instance && *exp > Instant::now())
    }

    /// The body IMDS answers for `path` (e.g. `/latest/meta-data/local-ipv4`), None → 404.
    fn imds_get(&self, instance_id: &str, path: &str) -> Option<String> {
        let now = Instant::now();
        let region = self.region();
        self.with_cloud_mut(|c| {
            let net = c.imds_network(instance_id, now)?;
            let i = c.instance(instance_id)?;
            if path == "/latest/user-data" {
                return i.user_data.clone();
            }
            if path == "/latest/dynamic/instance-identity/document" {
                let doc = serde_json::json!({
                    "accountId": c.account_id,
                    "architecture": "x86_64",
                    "availabilityZone": i.az,
                    "imageId": i.image_id,
                    "instanceId": i.id,
                    "instanceType": i.instance_type,
                    "privateIp": i.private_ip.to_string(),
                    "region": region,
                    "version": "2017-09-30",
                });
                return serde_json::to_string_pretty(&doc).ok();
            }
            let rest = path.strip_prefix("/latest/meta-data")?;
            let rest = rest.trim_start_matches('/').trim_end_matches('/');
            let primary_mac = c
                .eni(&i.primary_eni)
                .map(|e| e.mac.clone())
                .unwrap_or_default();
            let az_id = c
                .subnet(&i.subnet_id)
                .map(|s| s.az_id.clone())
                .unwrap_or_default();
            let dns = c.private_dns_name(i.private_ip);
            let primary_ipv6 = net
                .interfaces
                .iter()
                .find(|n| n.device_number == 0 && n.network_card == 0)
                .and_then(|n| n.ipv6s.first().copied());
            let out = match rest {
                "" => {
                    let mut keys = vec![
                        "ami-id",
                        "hostname",
                        "instance-id",
                        "instance-type",
                        "local-hostname",
                        "local-ipv4",
                        "mac",
                        "network/",
                        "placement/",
                    ];
                    if primary_ipv6.is_some() {
                        keys.insert(4, "ipv6");
                    }
                    listing(&keys)
                }
                "ami-id" => i.image_id.clone(),
                "instance-id" => i.id.clone(),
                "instance-type" => i.instance_type.clone(),
                "local-ipv4" => i.private_ip.to_string(),
                // the primary ENI's first IPv6 address; 404 when it has none
                "ipv6" => primary_ipv6?.to_string(),
                "hostname" | "local-hostname" => dns,
                "mac" => primary_mac,
                "placement" => listing(&["availability-zone", "availability-zone-id", "region"]),
                "placement/availability-zone" => i.az.clone(),
                "placement/availability-zone-id" => az_id,
                "placement/region" => region.clone(),
                "network" => "interfaces/".into(),
                "network/interfaces" => "macs/".into(),
                "network/interfaces/macs" => net
                    .interfaces
                    .iter()
                    .map(|n| format!("{}/", n.mac))
                    .collect::<Vec<_>>()
                    .join("\n"),
                other => {
                    let tail = other.strip_prefix("network/interfaces/macs/")?;
                    let (mac, key) = tail.split_once('/').unwrap_or((tail, ""));
                    let n = net.by_mac(mac)?;
                    let lines = |v: Vec<String>| v.join("\n");
                    match key {
                        "" => {
                            let mut keys = vec![
                                "device-number",
                                "interface-id",
                                "local-hostname",
                                "local-ipv4s",
                                "mac",
                                "network-card",
                                "owner-id",
                                "security-group-ids",
                                "security-groups",
                                "subnet-id",
                                "subnet-ipv4-cidr-block",
                                "vpc-id",
                                "vpc-ipv4-cidr-block",
                                "vpc-ipv4-cidr-blocks",
                            ];
                            if !n.ipv4_prefixes.is_empty() {
                                keys.push("ipv4-prefix");
                            }
                            keys.extend(ipv6_keys(n));
                            keys.sort();
                            listing(&keys)
                        }
                        "device-number" => n.device_number.to_string(),
                        "network-card" => n.network_card.to_string(),
                        "interface-id" => n.eni_id.clone(),
                        "mac" => n.mac.clone(),
                        "owner-id" => c.account_id.clone(),
                        "local-hostname" => c.private_dns_name(n.local_ipv4s[0]),
                        "local-ipv4s" => {
                            lines(n.local_ipv4s.iter().map(|a| a.to_string()).collect())
                        }
                        "ipv4-prefix" if !n.ipv4_prefixes.is_empty() => {
                            lines(n.ipv4_prefixes.iter().map(|p| p.to_string()).collect())
                        }
                        "ipv6s" if !n.ipv6s.is_empty() => {
                            lines(n.ipv6s.iter().map(|a| a.to_string()).collect())
                        }
                        "ipv6-prefix" if !n.ipv6_prefixes.is_empty() => {
                            lines(n.ipv6_prefixes.iter().map(|p| p.to_string()).collect())
                        }
                        "subnet-ipv6-cidr-blocks" => n.subnet_ipv6_cidr?.to_string(),
                        "vpc-ipv6-cidr-blocks" if !n.vpc_ipv6_cidrs.is_empty() => {
                            lines(n.vpc_ipv6_cidrs.iter().map(|c| c.to_string()).collect())
                        }
                        "security-group-ids" => lines(n.security_group_ids.clone()),
                        "security-groups" => lines(n.security_group_names.clone()),
                        "subnet-id" => n.subnet_id.clone(),
                        "subnet-ipv4-cidr-block" => n.subnet_cidr.to_string(),
                        "vpc-id" => n.vpc_id.clone(),
                        "vpc-ipv4-cidr-block" => n.vpc_cidrs.first()?.to_string(),
                        "vpc-ipv4-cidr-blocks" => {
                            lines(n.vpc_cidrs.iter().map(|c| c.to_string()).collect())
                        }
                        _ => return None,
                    }
                }
            };
            Some(out)
        })
    }

    /// Serve IMDS for every instance on `listener`, knowing the caller by its source address
    /// (an instance's primary private IPv4). Runs until the listener fails.
    pub async fn serve_imds(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let app = router(self.clone(), Caller::BySourceIp);
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    }

    /// The IMDS endpoint of one instance (`http://127.0.0.1:PORT`), started on first use; usable
    /// as aws-config's IMDS endpoint override. Needs a Tokio runtime.
    /// Errors: `InvalidInstanceID.NotFound`; `InternalError` if no port can be bound.
    pub async fn imds_endpoint(&self, instance_id: &str) -> Result<String, Ec2Error> {
        if self.instance_state(instance_id).is_none() {
            return Err(Ec2Error::instance_not_found(instance_id));
        }
        if let Some(url) = self
            .inner
            .imds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .endpoints
            .get(instance_id)
        {
            return Ok(url.clone());
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| {
                Ec2Error::new(
                    "InternalError",
                    format!("cannot bind an IMDS listener: {e}"),
                )
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Ec2Error::new("InternalError", e.to_string()))?;
        let url = format!("http://{addr}");
        let mut st = self.inner.imds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(url) = st.endpoints.get(instance_id) {
            return Ok(url.clone());
        }
        st.endpoints.insert(instance_id.to_string(), url.clone());
        drop(st);
        let app = router(self.clone(), Caller::Fixed(instance_id.to_string()));
        tokio::spawn(async move {
            let _ = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await;
        });
        Ok(url)
    }
}
