//! vpcnet-ec2 against vpcnet-emu through the real aws-sdk-ec2 client: every method round-trips
//! (describes, an ENI's life, prefixes, pages), the attachment limit is reported as such, and
//! a client token makes a create idempotent.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::{create, fast_calls, lab, tags};
use ipnet::Ipv4Net;
use tokio::time::Instant;
use vpcnet_ec2::{Action, AddressRelease, AddressRequest, Filter};

#[tokio::test]
async fn describes_round_trip() {
    let lab = lab(fast_calls()).await;
    let i = lab
        .ec2
        .describe_instance(&lab.instance.instance_id)
        .await
        .unwrap();
    assert_eq!(i.instance_id, lab.instance.instance_id);
    assert_eq!(i.instance_type, "m5.large");
    assert_eq!(i.availability_zone, "us-east-1a");
    assert_eq!(i.subnet_id, lab.subnet);
    assert_eq!(i.vpc_id, lab.instance.vpc_id);
    assert_eq!(i.private_ip, Some(lab.instance.private_ip));
    assert_eq!(i.security_group_ids, lab.instance.security_group_ids);

    let types = lab
        .ec2
        .describe_instance_types(&["m5.large", "c6in.32xlarge"])
        .await
        .unwrap();
    assert_eq!(types.len(), 2);
    for t in &types {
        assert_eq!(
            t,
            vpcnet_limits::lookup(&t.instance_type).unwrap(),
            "{}",
            t.instance_type
        );
    }

    let s = lab.ec2.describe_subnet(&lab.subnet).await.unwrap();
    assert_eq!(s.cidr_block, "10.0.0.0/20".parse::<Ipv4Net>().unwrap());
    assert_eq!(
        (s.availability_zone.as_str(), s.vpc_id.as_str()),
        ("us-east-1a", lab.instance.vpc_id.as_str())
    );
    assert_eq!(
        Some(s.available_ip_address_count),
        lab.emu.subnet_available(&lab.subnet)
    );

    let enis = lab
        .ec2
        .describe_instance_network_interfaces(&lab.instance.instance_id)
        .await
        .unwrap();
    assert_eq!(enis.len(), 1);
    let primary = lab.instance.primary_eni.as_ref().unwrap();
    assert_eq!(enis[0].eni_id, primary.eni_id);
    assert_eq!(enis[0].primary_ip, lab.instance.private_ip);
    assert_eq!(enis[0].mac, primary.mac.to_ascii_lowercase());
    assert_eq!(enis[0].device_index(), Some(0));

    let missing = lab
        .ec2
        .describe_subnet("subnet-0000000000000000f")
        .await
        .unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
}

#[tokio::test]
async fn eni_lifecycle_round_trips() {
    let lab = lab(fast_calls()).await;
    let iid = lab.instance.instance_id.clone();

    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, Some(AddressRequest::SecondaryIps(3)), "life"))
        .await
        .unwrap();
    assert!(eni.eni_id.starts_with("eni-"));
    assert_eq!(eni.secondary_ips.len(), 3);
    assert_eq!(eni.subnet_id, lab.subnet);
    assert_eq!(eni.security_group_ids, vec![lab.sg.clone()]);
    assert_eq!(eni.description, format!("vpcnet-cni: {iid}"));
    assert_eq!(
        eni.tags.get("node.k8s.amazonaws.com/instance_id"),
        Some(&iid)
    );
    assert_eq!(eni.status, "available");
    assert!(eni.attachment.is_none());

    let att = lab
        .ec2
        .attach_network_interface(&eni.eni_id, &iid, 1, 0)
        .await
        .unwrap();
    assert!(att.starts_with("eni-attach-"), "{att}");
    lab.ec2
        .set_delete_on_termination(&eni.eni_id, &att, true)
        .await
        .unwrap();

    let assigned = lab
        .ec2
        .assign_private_ips(&eni.eni_id, AddressRequest::SecondaryIps(2))
        .await
        .unwrap();
    assert_eq!(assigned.ips.len(), 2);
    assert!(assigned.prefixes.is_empty());
    lab.ec2
        .unassign_private_ips(
            &eni.eni_id,
            &AddressRelease::SecondaryIps(vec![eni.secondary_ips[0]]),
        )
        .await
        .unwrap();
    lab.ec2
        .create_tags(&[&eni.eni_id], &tags(&[("extra", "yes")]))
        .await
        .unwrap();

    let now = lab
        .ec2
        .describe_network_interfaces_by_id(&[&eni.eni_id])
        .await
        .unwrap();
    assert_eq!(now.len(), 1);
    let now = &now[0];
    let mut expected: Vec<Ipv4Addr> = eni.secondary_ips[1..].to_vec();
    expected.extend(&assigned.ips);
    let mut got = now.secondary_ips.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    let a = now.attachment.as_ref().unwrap();
    assert_eq!(
        (
            a.attachment_id.as_str(),
            a.device_index,
            a.network_card_index
        ),
        (att.as_str(), 1, 0)
    );
    assert_eq!(a.instance_id.as_deref(), Some(iid.as_str()));
    assert!(a.delete_on_termination);
    assert_eq!(now.tags.get("extra").map(String::as_str), Some("yes"));

    let on_instance = lab
        .ec2
        .describe_instance_network_interfaces(&iid)
        .await
        .unwrap();
    assert_eq!(
        on_instance
            .iter()
            .map(|e| e.device_index())
            .collect::<Vec<_>>(),
        vec![Some(0), Some(1)]
    );
    let by_tag = lab
        .ec2
        .describe_network_interfaces_by_tag("test", "life", None)
        .await
        .unwrap();
    assert_eq!(
        by_tag.iter().map(|e| e.eni_id.as_str()).collect::<Vec<_>>(),
        vec![eni.eni_id.as_str()]
    );
    let by_desc = lab
        .ec2
        .describe_network_interfaces_by_description("vpcnet-cni: *", None)
        .await
        .unwrap();
    assert_eq!(by_desc.len(), 1);

    lab.ec2.detach_network_interface(&att, true).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = &lab
            .ec2
            .describe_network_interfaces_by_id(&[&eni.eni_id])
            .await
            .unwrap()[0];
        if e.status == "available" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ENI never became available: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leaked = lab
        .ec2
        .describe_network_interfaces_by_tag("test", "life", Some("available"))
        .await
        .unwrap();
    assert_eq!(leaked.len(), 1);
    lab.ec2.delete_network_interface(&eni.eni_id).await.unwrap();
    let gone = lab
        .ec2
        .describe_network_interfaces_by_id(&[&eni.eni_id])
        .await
        .unwrap_err();
    assert!(gone.is_not_found(), "{gone}");
    assert!(lab.emu.eni(&eni.eni_id).is_none());
}

#[tokio::test]
async fn prefixes_round_trip() {
    let lab = lab(fast_calls()).await;
    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, Some(AddressRequest::Prefixes(1)), "pfx"))
        .await
        .unwrap();
    assert_eq!(eni.prefixes.len(), 1);
    assert_eq!(eni.prefixes[0].prefix_len(), 28);
    assert!(eni.secondary_ips.is_empty());
    let more = lab
        .ec2
        .assign_private_ips(&eni.eni_id, AddressRequest::Prefixes(2))
        .await
        .unwrap();
    assert_eq!(more.prefixes.len(), 2);
    assert!(more
        .prefixes
        .iter()
        .all(|p| p.prefix_len() == 28 && p.network() == p.addr()));
    lab.ec2
        .unassign_private_ips(
            &eni.eni_id,
            &AddressRelease::Prefixes(vec![eni.prefixes[0]]),
        )
        .await
        .unwrap();
    let now = &lab
        .ec2
        .describe_network_interfaces_by_id(&[&eni.eni_id])
        .await
        .unwrap()[0];
    let mut got = now.prefixes.clone();
    let mut want = more.prefixes.clone();
    got.sort();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test]
async fn pagination_follows_next_token() {
    let mut calls = fast_calls();
    calls.describe_page_size = 5;
    calls.mutating_bucket = vpcnet_ec2::BucketConfig {
        capacity: 50,
        refill_per_sec: 50.0,
    };
    let lab = lab(calls).await;
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(
            lab.ec2
                .create_network_interface(&create(&lab, None, "page"))
                .await
                .unwrap()
                .eni_id,
        );
    }
    let before = lab.rec.count(Action::DescribeNetworkInterfaces, None);
    let mut found: Vec<String> = lab
        .ec2
        .describe_network_interfaces(&[Filter::tag("test", "page")])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.eni_id)
        .collect();
    found.sort();
    ids.sort();
    assert_eq!(found, ids);
    assert_eq!(
        lab.rec.count(Action::DescribeNetworkInterfaces, None) - before,
        3,
        "12 ENIs in pages of 5"
    );
}

#[tokio::test]
async fn attachment_limit_is_reported_as_limit() {
    let lab = lab(fast_calls()).await;
    let iid = lab.instance.instance_id.clone();
    // m5.large: 3 ENIs (the primary included), 10 IPv4 addresses per ENI.
    let mut attached = Vec::new();
    for device in 1..=2 {
        let eni = lab
            .ec2
            .create_network_interface(&create(&lab, None, "limit"))
            .await
            .unwrap();
        lab.ec2
            .attach_network_interface(&eni.eni_id, &iid, device, 0)
            .await
            .unwrap();
        attached.push(eni.eni_id);
    }
    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, None, "limit"))
        .await
        .unwrap();
    let e = lab
        .ec2
        .attach_network_interface(&eni.eni_id, &iid, 3, 0)
        .await
        .unwrap_err();
    assert!(e.is_limit(), "{e}");
    assert_eq!(e.code(), "AttachmentLimitExceeded");
    assert_eq!(
        lab.rec.count(
            Action::AttachNetworkInterface,
            Some("AttachmentLimitExceeded")
        ),
        1,
        "not retried"
    );

    lab.ec2
        .assign_private_ips(&attached[0], AddressRequest::SecondaryIps(9))
        .await
        .unwrap();
    let full = lab
        .ec2
        .assign_private_ips(&attached[0], AddressRequest::SecondaryIps(1))
        .await
        .unwrap_err();
    assert!(full.is_limit(), "{full}");
    assert_eq!(full.code(), "PrivateIpAddressLimitExceeded");
}

#[tokio::test]
async fn client_token_makes_create_idempotent() {
    let lab = lab(fast_calls()).await;
    let mut req = create(&lab, None, "token");
    req.client_token = Some("vpcnet-test-token-1".into());
    let a = lab.ec2.create_network_interface(&req).await.unwrap();
    let b = lab.ec2.create_network_interface(&req).await.unwrap();
    assert_eq!(a.eni_id, b.eni_id, "same ClientToken, same ENI");
    assert_eq!(
        lab.ec2
            .describe_network_interfaces_by_tag("test", "token", None)
            .await
            .unwrap()
            .len(),
        1
    );
}
