//! ECR GetAuthorizationToken (AWS JSON 1.1 on `POST /`): the token ECR's clients decode, the
//! signing-scope check, faults, and the control API that gives the lab's registry the same
//! credentials; and, with the real `ecr-credential-provider` (built by
//! scripts/build-ecr-credential-provider.sh), kubelet's credential provider exchange.

use axum::body::{to_bytes, Body};
use base64::Engine;
use serde_json::Value;
use tower::ServiceExt;
use vpcnet_emu::faults::{ActionFaults, ErrorSpec};
use vpcnet_emu::Emulator;

const TARGET: &str = "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken";

async fn post(emu: &Emulator, target: &str, auth: Option<&str>) -> (u16, Value) {
    let mut req = http::Request::post("/")
        .header("content-type", "application/x-amz-json-1.1")
        .header("x-amz-target", target);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = emu
        .router()
        .oneshot(req.body(Body::from("{}")).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

fn sigv4(region: &str, service: &str) -> String {
    format!("AWS4-HMAC-SHA256 Credential=AKIDTEST/20260101/{region}/{service}/aws4_request, SignedHeaders=host, Signature=0")
}

#[tokio::test]
async fn token_decodes_to_the_registry_credentials() {
    let emu = Emulator::new(7);
    let (status, body) = post(&emu, TARGET, Some(&sigv4("us-east-1", "ecr"))).await;
    assert_eq!(status, 200, "{body}");
    let data = &body["authorizationData"][0];
    let token = base64::engine::general_purpose::STANDARD
        .decode(data["authorizationToken"].as_str().unwrap())
        .unwrap();
    let (user, password) = std::str::from_utf8(&token)
        .unwrap()
        .split_once(':')
        .unwrap();
    assert_eq!(user, "AWS");
    assert_eq!(password, emu.ecr_password());
    assert_eq!(
        data["proxyEndpoint"],
        "https://123456789012.dkr.ecr.us-east-1.amazonaws.com"
    );
    let ttl = data["expiresAt"].as_i64().unwrap() - chrono::Utc::now().timestamp();
    assert!((43_000..=43_200).contains(&ttl), "{ttl}");
    // Another seed, another password: a registry cannot accept a foreign emulator's token.
    assert_ne!(Emulator::new(8).ecr_password(), emu.ecr_password());
    assert_eq!(
        emu.calls()
            .per_action
            .get("GetAuthorizationToken")
            .copied()
            .unwrap_or(0),
        1
    );

    // The control API hands the lab's registry the same credentials.
    let resp = emu
        .router()
        .oneshot(
            http::Request::get("/_emu/ecr/credentials")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let c: Value =
        serde_json::from_slice(&to_bytes(resp.into_body(), 1 << 16).await.unwrap()).unwrap();
    assert_eq!(
        (
            c["username"].as_str(),
            c["password"].as_str(),
            c["registry"].as_str()
        ),
        (
            Some("AWS"),
            Some(emu.ecr_password().as_str()),
            Some("123456789012.dkr.ecr.us-east-1.amazonaws.com")
        )
    );
}

#[tokio::test]
async fn wrong_scope_unknown_operation_and_faults_answer_ecr_errors() {
    let emu = Emulator::new(1);
    let (status, body) = post(&emu, TARGET, Some(&sigv4("us-east-1", "ec2"))).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (403, Some("InvalidSignatureException"))
    );
    let (status, body) = post(&emu, TARGET, Some(&sigv4("eu-west-1", "ecr"))).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (403, Some("InvalidSignatureException"))
    );
    let other = "AmazonEC2ContainerRegistry_V20150921.BatchGetImage";
    let (status, body) = post(&emu, other, None).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (400, Some("UnknownOperationException"))
    );

    emu.set_action_faults(
        "GetAuthorizationToken",
        Some(ActionFaults {
            error: Some(ErrorSpec {
                rate: 1.0,
                code: "ServerException".into(),
            }),
            ..Default::default()
        }),
    )
    .unwrap();
    let (status, body) = post(&emu, TARGET, None).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (500, Some("ServerException"))
    );
}

/// kubelet's side of the exchange with the real provider: a CredentialProviderRequest for an
/// image of the emulator's registry on stdin, the emulator as ECR (`AWS_ENDPOINT_URL_ECR`);
/// the response carries the registry's credentials. Needs the binary, and fails without it
/// (scripts/test.sh builds it and sets the variable):
/// `VPCNET_ECR_CREDENTIAL_PROVIDER=$(scripts/build-ecr-credential-provider.sh | tail -n 1)/ecr-credential-provider
/// cargo test -p vpcnet-emu --test ecr`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_ecr_credential_provider_gets_the_registry_credentials() {
    let bin = std::env::var("VPCNET_ECR_CREDENTIAL_PROVIDER").expect(
        "set VPCNET_ECR_CREDENTIAL_PROVIDER to the binary scripts/build-ecr-credential-provider.sh builds",
    );
    let emu = Emulator::new(3);
    let server = emu.spawn().await.unwrap();
    let image = format!("{}/team/app:1.0", emu.ecr_registry_host());
    let request = serde_json::json!({
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "kind": "CredentialProviderRequest",
        "image": image,
    });
    let endpoint = server.endpoint.clone();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(bin)
            .env_clear()
            .env("AWS_ENDPOINT_URL_ECR", &endpoint)
            .env("AWS_ACCESS_KEY_ID", "AKIDTEST")
            .env("AWS_SECRET_ACCESS_KEY", "secret")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "provider failed: {stderr}");
    let resp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(resp["kind"], "CredentialProviderResponse", "{resp}");
    let auth = &resp["auth"][emu.ecr_registry_host()];
    assert_eq!(
        (auth["username"].as_str(), auth["password"].as_str()),
        (Some("AWS"), Some(emu.ecr_password().as_str())),
        "{resp}"
    );
    assert_eq!(
        emu.calls()
            .per_action
            .get("GetAuthorizationToken")
            .copied()
            .unwrap_or(0),
        1
    );
}
