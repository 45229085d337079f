//! vpcnet-ec2's IMDS reads against vpcnet-emu: the identity and the interfaces parse, and the
//! region comes from IMDS when not given.

mod common;

use std::time::Duration;

use common::{create, fast_calls, lab};
use ipnet::Ipv4Net;
use tokio::time::Instant;
use vpcnet_ec2::{AddressRequest, Ec2, Ec2Options, StaticCredentials};
use vpcnet_imds::Imds;

#[tokio::test]
async fn imds_reads_identity_and_interfaces() {
    let lab = lab(fast_calls()).await;
    let iid = lab.instance.instance_id.clone();
    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, Some(AddressRequest::SecondaryIps(2)), "imds"))
        .await
        .unwrap();
    lab.ec2
        .attach_network_interface(&eni.eni_id, &iid, 1, 0)
        .await
        .unwrap();

    let url = lab.emu.imds_endpoint(&iid).await.unwrap();
    let imds = Imds::with_endpoint(&url, Some(Duration::from_secs(5))).unwrap();
    assert_eq!(imds.instance_id().await.unwrap(), iid);
    assert_eq!(imds.instance_type().await.unwrap(), "m5.large");
    assert_eq!(imds.local_ipv4().await.unwrap(), lab.instance.private_ip);
    assert_eq!(imds.availability_zone().await.unwrap(), "us-east-1a");
    assert_eq!(imds.region().await.unwrap(), "us-east-1");
    assert_eq!(imds.local_ipv6().await.unwrap(), None);
    let primary = lab.instance.primary_eni.as_ref().unwrap();
    assert_eq!(imds.mac().await.unwrap(), primary.mac.to_ascii_lowercase());

    let deadline = Instant::now() + Duration::from_secs(10);
    let ifaces = loop {
        let i = imds.interfaces().await.unwrap();
        if i.len() == 2 || Instant::now() > deadline {
            break i;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ifaces.len(), 2, "{ifaces:?}");
    assert_eq!(ifaces[0].interface_id, primary.eni_id);
    assert_eq!(ifaces[0].device_number, 0);
    assert_eq!(ifaces[0].local_ipv4s[0], lab.instance.private_ip);
    let second = &ifaces[1];
    assert_eq!(
        (
            second.interface_id.as_str(),
            second.device_number,
            second.network_card
        ),
        (eni.eni_id.as_str(), 1, 0)
    );
    assert_eq!(second.subnet_id, lab.subnet);
    assert_eq!(
        second.subnet_cidr,
        "10.0.0.0/20".parse::<Ipv4Net>().unwrap()
    );
    assert_eq!(
        second.vpc_cidrs,
        vec!["10.0.0.0/16".parse::<Ipv4Net>().unwrap()]
    );
    assert_eq!(second.security_group_ids, vec![lab.sg.clone()]);
    assert_eq!(second.local_ipv4s[0], eni.primary_ip);
    let mut sec = second.local_ipv4s[1..].to_vec();
    let mut want = eni.secondary_ips.clone();
    sec.sort();
    want.sort();
    assert_eq!(sec, want);
    assert!(second.ipv4_prefixes.is_empty());

    let e = imds.get("no/such/path").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert!(
        e.to_string().contains("/latest/meta-data/no/such/path"),
        "{e}"
    );
}

#[tokio::test]
async fn region_comes_from_imds_when_not_given() {
    // The region must come from nowhere but IMDS here: a test that cannot run fails.
    assert!(
        std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none(),
        "this test needs AWS_REGION and AWS_DEFAULT_REGION unset (it checks the region lookup)"
    );
    let lab = lab(fast_calls()).await;
    let url = lab
        .emu
        .imds_endpoint(&lab.instance.instance_id)
        .await
        .unwrap();
    let ec2 = Ec2::connect_unobserved(Ec2Options {
        region: None,
        endpoint_url: Some(lab._server.endpoint.clone()),
        imds_endpoint: Some(url),
        credentials: Some(StaticCredentials {
            access_key_id: "AKIDTEST".into(),
            secret_access_key: "secret".into(),
            session_token: None,
        }),
        calls: fast_calls(),
    })
    .await
    .unwrap();
    assert_eq!(ec2.region(), "us-east-1");
    assert_eq!(
        ec2.describe_instance(&lab.instance.instance_id)
            .await
            .unwrap()
            .instance_type,
        "m5.large"
    );
}
