//! Shared test setup: an emulator served on 127.0.0.1 and an unmodified aws-sdk-ec2 client.
#![allow(dead_code)]

pub mod elbv2;
pub mod moto;

use std::time::Duration;

use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::Filter;
use aws_sdk_ec2::{Client, Config};
use vpcnet_emu::{EmuServer, Emulator, RunInstance, VpcInfo};

/// The SDKs' retry settings for tests: `attempts` = 1 disables retries, else the standard
/// mode with backoffs of 1 ms up to `max_backoff`.
pub fn retry(attempts: u32, max_backoff: Duration) -> RetryConfig {
    if attempts <= 1 {
        RetryConfig::disabled()
    } else {
        RetryConfig::standard()
            .with_max_attempts(attempts)
            .with_initial_backoff(Duration::from_millis(1))
            .with_max_backoff(max_backoff)
    }
}

/// The static credentials every test client signs with.
pub fn credentials() -> Credentials {
    Credentials::new("AKIDEMU", "secret", None, None, "vpcnet-emu-tests")
}

/// An aws-sdk-ec2 client for `endpoint`; `attempts` = 1 disables retries.
pub fn client(endpoint: &str, attempts: u32) -> Client {
    client_as(endpoint, attempts, credentials())
}

/// [`client`] signing with `credentials` (e.g. another access key).
pub fn client_as(endpoint: &str, attempts: u32, credentials: Credentials) -> Client {
    let cfg = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(credentials)
        .retry_config(retry(attempts, Duration::from_millis(5)))
        .build();
    Client::from_conf(cfg)
}

pub struct Lab {
    pub emu: Emulator,
    pub server: EmuServer,
    pub ec2: Client,
    pub vpc: VpcInfo,
    /// 10.0.0.0/24 in us-east-1a
    pub subnet: String,
}

/// VPC 10.0.0.0/16 (+ 100.64.0.0/16) with subnet 10.0.0.0/24 in us-east-1a; SDK without retries.
pub async fn lab(seed: u64) -> Lab {
    let emu = Emulator::new(seed);
    let vpc = emu
        .create_vpc(
            "10.0.0.0/16".parse().unwrap(),
            &["100.64.0.0/16".parse().unwrap()],
        )
        .unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/24".parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let ec2 = client(&server.endpoint, 1);
    Lab {
        emu,
        server,
        ec2,
        vpc,
        subnet,
    }
}

impl Lab {
    pub async fn instance(&self, instance_type: &str) -> vpcnet_emu::InstanceInfo {
        self.emu
            .run_instance(RunInstance {
                instance_type: instance_type.into(),
                subnet_id: self.subnet.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
    }
}

/// EC2 error code of an SDK error.
pub fn code<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
) -> String {
    match e {
        SdkError::ServiceError(s) => s.err().code().unwrap_or("<no code>").to_string(),
        other => panic!("expected a service error, got {other:?}"),
    }
}

/// HTTP status of an SDK error's raw response.
pub fn status<E>(e: &SdkError<E, aws_sdk_ec2::config::http::HttpResponse>) -> u16 {
    e.raw_response().map(|r| r.status().as_u16()).unwrap_or(0)
}

/// One control API call (`/_emu/...`) on `app` in-process: (HTTP status, JSON answer or
/// null).
pub async fn control(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(
            body.map(|b| axum::body::Body::from(b.to_string()))
                .unwrap_or_else(axum::body::Body::empty),
        )
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

/// An EC2 filter `name` matching any of `values`.
pub fn filter(name: &str, values: &[&str]) -> Filter {
    let mut f = Filter::builder().name(name);
    for v in values {
        f = f.values(*v);
    }
    f.build()
}
