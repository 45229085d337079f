//! The real aws-sdk-eks against vpcnet-emu: DescribeCluster's fields, EKS's error codes, the
//! SigV4 scope (service `eks`, the emulator's region) and injected faults.

use vpcnet_eks::{ClusterInfo, Eks, EksError, EksOptions, StaticCredentials};
use vpcnet_emu::{ActionFaults, EksClusterSpec, Emulator};

async fn client(endpoint: &str, region: &str) -> Eks {
    Eks::connect(EksOptions {
        region: Some(region.into()),
        endpoint_url: Some(endpoint.into()),
        credentials: Some(StaticCredentials {
            access_key_id: "AKIDTEST".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn spec(name: &str) -> EksClusterSpec {
    EksClusterSpec {
        name: name.into(),
        endpoint: "https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into(),
        certificate_authority: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn describes_regular_ipv6_and_local_clusters() {
    let emu = Emulator::new(7);
    let server = emu.spawn().await.unwrap();
    emu.create_eks_cluster(spec("regular")).unwrap();
    emu.create_eks_cluster(EksClusterSpec {
        ip_family: Some("ipv6".into()),
        service_ipv6_cidr: Some("fd00:c0de:7e57::/108".into()),
        ..spec("six")
    })
    .unwrap();
    let local = emu
        .create_eks_cluster(EksClusterSpec {
            outpost_arns: vec!["arn:aws:outposts:us-east-1:123456789012:outpost/op-0123".into()],
            service_ipv4_cidr: Some("172.20.0.0/16".into()),
            ..spec("local")
        })
        .unwrap();
    let eks = client(&server.endpoint, "us-east-1").await;

    let c = eks.describe_cluster("regular").await.unwrap();
    assert_eq!(
        c,
        ClusterInfo {
            name: "regular".into(),
            status: "ACTIVE".into(),
            endpoint: Some("https://ABCDEF.gr7.us-east-1.eks.amazonaws.com".into()),
            certificate_authority: Some("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==".into()),
            service_ipv4_cidr: Some("10.100.0.0/16".into()),
            service_ipv6_cidr: None,
            ip_family: Some("ipv4".into()),
            id: None,
            outpost_arns: vec![],
            version: Some("1.34".into()),
        }
    );
    let c = eks.describe_cluster("six").await.unwrap();
    assert_eq!(
        (
            c.ip_family.as_deref(),
            c.service_ipv6_cidr.as_deref(),
            c.service_ipv4_cidr
        ),
        (Some("ipv6"), Some("fd00:c0de:7e57::/108"), None)
    );
    let c = eks.describe_cluster("local").await.unwrap();
    assert_eq!(c.id, local.id);
    assert_eq!(c.outpost_arns.len(), 1);
    assert_eq!(emu.calls().per_action["DescribeCluster"], 3);
}

#[tokio::test]
async fn errors_carry_eks_codes() {
    let emu = Emulator::new(7);
    let server = emu.spawn().await.unwrap();
    emu.create_eks_cluster(spec("c")).unwrap();
    let eks = client(&server.endpoint, "us-east-1").await;

    let e = eks.describe_cluster("nope").await.unwrap_err();
    assert!(
        matches!(&e, EksError::Api { code, status: 404, .. } if code == "ResourceNotFoundException"),
        "{e:?}"
    );
    assert!(!e.is_transient());
    assert!(
        e.to_string().contains("No cluster found for name: nope."),
        "{e}"
    );

    // Signed for another region: EKS refuses the signature.
    let wrong = client(&server.endpoint, "eu-west-1").await;
    let e = wrong.describe_cluster("c").await.unwrap_err();
    assert_eq!(e.code(), Some("InvalidSignatureException"), "{e:?}");

    emu.set_action_faults(
        "DescribeCluster",
        Some(ActionFaults::default().error(1.0, "ServerException")),
    )
    .unwrap();
    let e = eks.describe_cluster("c").await.unwrap_err();
    assert!(
        matches!(&e, EksError::Api { status: 500, .. }) && e.is_transient(),
        "{e:?}"
    );
    emu.set_action_faults(
        "DescribeCluster",
        Some(ActionFaults::default().throttle(1, 0.0)),
    )
    .unwrap();
    eks.describe_cluster("c").await.unwrap();
    let e = eks.describe_cluster("c").await.unwrap_err();
    assert_eq!(e.code(), Some("ThrottlingException"));
    assert!(e.is_transient());

    // Nothing listening: a transport error, worth retrying.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let e = client(&closed, "us-east-1")
        .await
        .describe_cluster("c")
        .await
        .unwrap_err();
    assert!(
        matches!(e, EksError::Transport(_)) && e.is_transient(),
        "{e:?}"
    );
}
