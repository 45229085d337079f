//! The HTTP server: the EC2 Query API (`POST /`, form body; `GET /?Action=...` too), ELBv2's
//! Query API on the same path (by `Version` or signing service, [`crate::elbv2::is_elbv2`]),
//! EKS DescribeCluster (`GET /clusters/{name}`, REST-JSON), ECR GetAuthorizationToken (`POST /`
//! with an ECR `X-Amz-Target`, [`crate::ecr`]) and the JSON control API under
//! `/_emu/` on the same listener.

use std::net::SocketAddr;

use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::response::Response;
use axum::Router;
use http::StatusCode;
use tokio::task::JoinHandle;

use crate::emulator::Emulator;
use crate::query::error_body;
use crate::query::params::Params;
use crate::request_log::{self, Api, RequestRecord};

/// Largest request body accepted (EC2 itself caps Query requests well below this).
const MAX_BODY: usize = 1 << 20;

async fn ec2(State(emu): State<Emulator>, req: Request) -> Response {
    if crate::ecr::is_ecr(req.headers()) {
        return crate::ecr::call(emu, req.headers()).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let query = req.uri().query().map(|q| Params::parse(q.as_bytes()));
    let authorization = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let user_agent = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match to_bytes(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            let e = crate::error::Ec2Error::invalid_value(
                "The request body is too large or unreadable",
            );
            return xml(e.status(), error_body(&e, &emu.next_request_id()));
        }
    };
    let mut params = Params::parse(&body);
    if let Some(q) = query {
        params.merge_missing(q);
    }
    let api = if crate::elbv2::is_elbv2(&params, authorization.as_deref()) {
        Api::Elbv2
    } else {
        Api::Ec2
    };
    let action = params.get("Action").unwrap_or_default().to_string();
    let access_key = authorization.as_deref().and_then(request_log::access_key);
    let (status, body) = match api {
        Api::Elbv2 => emu.elbv2_call_from(params, access_key.as_deref()).await,
        _ => emu.ec2_call_from(params, peer, access_key.as_deref()).await,
    };
    emu.log_request(RequestRecord {
        seq: 0,
        at_ms: 0,
        api,
        mutating: match api {
            Api::Ec2 => crate::query::actions::is_mutating(&action),
            Api::Elbv2 => crate::elbv2::actions::is_mutating(&action),
            _ => None,
        }
        .unwrap_or(false),
        action,
        instance_id: emu.instance_at(peer),
        source: peer,
        user_agent,
        access_key,
        status,
        error_code: (status >= 300)
            .then(|| request_log::error_code(&body))
            .flatten(),
    });
    xml(status, body)
}

fn xml(status: u16, body: String) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(http::header::CONTENT_TYPE, "text/xml;charset=UTF-8")
        .body(Body::from(body))
        .expect("static response parts")
}

/// A running server started by [`Emulator::spawn`]; stops when dropped.
pub struct EmuServer {
    /// The bound address.
    pub addr: SocketAddr,
    /// `http://ADDR`: the EC2 endpoint URL (aws-sdk-ec2 `endpoint_url`); the control API is
    /// under `{endpoint}/_emu/`.
    pub endpoint: String,
    task: JoinHandle<()>,
}

impl Drop for EmuServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Emulator {
    /// Answers one Query API request (EC2, or ELBv2 by `Version` or the signing service in
    /// `authorization`): `body` is the form-encoded request body and `query` the URL's query
    /// string, whose parameters count where the body lacks them. `peer` attributes an EC2
    /// call to the instance with that primary private IP; the access key of `authorization`
    /// picks the account whose rate limits apply ([`crate::account_limits`]). Returns (HTTP status, XML body);
    /// every input, however malformed, gets EC2's or ELBv2's error envelope, never a panic.
    /// The HTTP handler's dispatch without its request log (the fuzz target `emu_query`).
    pub async fn query_call(
        &self,
        body: &[u8],
        query: Option<&[u8]>,
        authorization: Option<&str>,
        peer: Option<std::net::IpAddr>,
    ) -> (u16, String) {
        let mut params = Params::parse(body);
        if let Some(q) = query {
            params.merge_missing(Params::parse(q));
        }
        let access_key = authorization.and_then(request_log::access_key);
        if crate::elbv2::is_elbv2(&params, authorization) {
            self.elbv2_call_from(params, access_key.as_deref()).await
        } else {
            self.ec2_call_from(params, peer, access_key.as_deref())
                .await
        }
    }

    /// The axum router: EC2 Query API on every path except `/_emu/...` (control API) and
    /// `GET /clusters/{name}` (EKS).
    pub fn router(&self) -> Router {
        Router::new()
            .nest("/_emu", crate::control::router())
            .route(
                "/clusters/{name}",
                axum::routing::get(crate::eks::describe_cluster),
            )
            .fallback(ec2)
            .with_state(self.clone())
    }

    /// Serve EC2 and the control API on `listener` until it fails.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    }

    /// Bind 127.0.0.1 on a free port and serve there in the background (tests).
    pub async fn spawn(&self) -> std::io::Result<EmuServer> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let emu = self.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = emu.serve(listener).await {
                tracing::error!(error = %e, "vpcnet-emu server stopped");
            }
        });
        Ok(EmuServer {
            addr,
            endpoint: format!("http://{addr}"),
            task,
        })
    }
}
