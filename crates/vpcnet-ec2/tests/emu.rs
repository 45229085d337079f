//! vpcnet-ec2 against vpcnet-emu through the real aws-sdk-ec2 client: every method round-trips,
//! throttling and 5xx are retried, 4xx are not, the deadline fires, IMDS reads parse.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use ipnet::Ipv4Net;
use vpcnet_ec2::{
    Action, AddressRelease, AddressRequest, CallSettings, CreateEni, Ec2, Ec2Error, Ec2Observer,
    Ec2Options, Filter, RetryPolicy, StaticCredentials,
};
use vpcnet_emu::{ActionFaults, EmuServer, Emulator, InstanceInfo, RunInstance};
use vpcnet_imds::Imds;

#[derive(Default)]
struct Recorder {
    attempts: Mutex<Vec<(Action, Option<String>)>>,
}

impl Recorder {
    fn count(&self, action: Action, code: Option<&str>) -> usize {
        self.attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(a, c)| *a == action && c.as_deref() == code)
            .count()
    }
}

impl Ec2Observer for Recorder {
    fn on_attempt(&self, action: Action, _: Duration, error: Option<&Ec2Error>) {
        self.attempts
            .lock()
            .unwrap()
            .push((action, error.map(|e| e.code().to_string())));
    }
}

struct Lab {
    emu: Emulator,
    _server: EmuServer,
    ec2: Ec2,
    rec: Arc<Recorder>,
    subnet: String,
    sg: String,
    instance: InstanceInfo,
}

fn fast_calls() -> CallSettings {
    CallSettings {
        operation_timeout: Duration::from_secs(20),
        attempt_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 30,
            base_delay: Duration::from_millis(2),
            throttle_base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(50),
        },
        ..CallSettings::default()
    }
}

async fn lab(calls: CallSettings) -> Lab {
    let emu = Emulator::new(7);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, "10.0.0.0/20".parse().unwrap(), "us-east-1a")
        .unwrap();
    let sg = emu.create_security_group(&vpc.vpc_id, "pods").unwrap();
    let instance = emu
        .run_instance(RunInstance {
            instance_type: "m5.large".into(),
            subnet_id: subnet.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let rec = Arc::new(Recorder::default());
    let ec2 = Ec2::connect(
        Ec2Options {
            region: Some("us-east-1".into()),
            endpoint_url: Some(server.endpoint.clone()),
            imds_endpoint: None,
            credentials: Some(StaticCredentials {
                access_key_id: "AKIDTEST".into(),
                secret_access_key: "secret".into(),
                session_token: None,
            }),
            calls,
        },
        rec.clone(),
    )
    .await
    .unwrap();
    Lab {
        emu,
        _server: server,
        ec2,
        rec,
        subnet,
        sg,
        instance,
    }
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn create(lab: &Lab, addresses: Option<AddressRequest>, tag_value: &str) -> CreateEni {
    CreateEni {
        subnet_id: lab.subnet.clone(),
        security_group_ids: vec![lab.sg.clone()],
        description: format!("vpcnet-cni: {}", lab.instance.instance_id),
        tags: tags(&[
            (
                "node.k8s.amazonaws.com/instance_id",
                &lab.instance.instance_id,
            ),
            ("test", tag_value),
        ]),
        addresses,
        client_token: None,
    }
}

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
async fn throttling_and_server_errors_are_retried_until_success() {
    let lab = lab(fast_calls()).await;
    lab.emu
        .set_action_faults(
            "DescribeSubnets",
            Some(ActionFaults::default().throttle(1, 20.0)),
        )
        .unwrap();
    lab.emu
        .set_action_faults(
            "DescribeInstances",
            Some(ActionFaults::default().error(0.5, "InternalError")),
        )
        .unwrap();
    lab.emu
        .set_action_faults(
            "AssignPrivateIpAddresses",
            Some(ActionFaults::default().error(0.5, "Unavailable")),
        )
        .unwrap();
    let eni = lab
        .ec2
        .create_network_interface(&create(&lab, None, "retry"))
        .await
        .unwrap();
    for _ in 0..10 {
        lab.ec2.describe_subnet(&lab.subnet).await.unwrap();
        lab.ec2
            .describe_instance(&lab.instance.instance_id)
            .await
            .unwrap();
        assert_eq!(
            lab.ec2
                .assign_private_ips(&eni.eni_id, AddressRequest::SecondaryIps(1))
                .await
                .unwrap()
                .ips
                .len(),
            1
        );
    }
    let calls = lab.emu.calls();
    assert!(
        calls.throttled.get("DescribeSubnets").copied().unwrap_or(0) > 0,
        "{calls:?}"
    );
    assert!(
        lab.rec
            .count(Action::DescribeSubnets, Some("RequestLimitExceeded"))
            > 0
    );
    assert!(
        lab.rec
            .count(Action::DescribeInstances, Some("InternalError"))
            > 0
    );
    assert!(
        lab.rec
            .count(Action::AssignPrivateIpAddresses, Some("Unavailable"))
            > 0
    );
    assert_eq!(lab.rec.count(Action::DescribeSubnets, None), 10);
    assert_eq!(lab.rec.count(Action::AssignPrivateIpAddresses, None), 10);
    // Every failed attempt was followed by another attempt: EC2 saw exactly what we sent.
    let attempts = |a: Action| {
        lab.rec
            .attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(x, _)| *x == a)
            .count() as u64
    };
    assert_eq!(
        calls.per_action.get("DescribeSubnets").copied(),
        Some(attempts(Action::DescribeSubnets))
    );
    // The ENI holds exactly the 10 addresses assigned: no retry doubled an assignment.
    let now = &lab
        .ec2
        .describe_network_interfaces_by_id(&[&eni.eni_id])
        .await
        .unwrap()[0];
    assert_eq!(now.secondary_ips.len(), 10);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let lab = lab(fast_calls()).await;
    lab.emu
        .set_action_faults(
            "DescribeSubnets",
            Some(ActionFaults::default().error(1.0, "UnauthorizedOperation")),
        )
        .unwrap();
    let e = lab.ec2.describe_subnet(&lab.subnet).await.unwrap_err();
    assert_eq!(e.code(), "UnauthorizedOperation");
    assert!(!e.is_retryable());
    assert!(
        matches!(e, Ec2Error::Api { status: Some(s), .. } if (400..500).contains(&s)),
        "{e:?}"
    );
    assert_eq!(
        lab.emu.calls().per_action.get("DescribeSubnets").copied(),
        Some(1)
    );

    let e = lab
        .ec2
        .delete_network_interface("eni-0000000000000000f")
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
    assert_eq!(
        lab.emu
            .calls()
            .per_action
            .get("DeleteNetworkInterface")
            .copied(),
        Some(1)
    );
}

#[tokio::test]
async fn deadline_fires_on_injected_latency() {
    let mut calls = fast_calls();
    calls.operation_timeout = Duration::from_millis(400);
    calls.attempt_timeout = Duration::from_millis(150);
    let lab = lab(calls).await;
    lab.emu
        .set_action_faults(
            "DescribeInstances",
            Some(ActionFaults::default().latency(Duration::from_secs(3))),
        )
        .unwrap();
    let t0 = Instant::now();
    let e = lab
        .ec2
        .describe_instance(&lab.instance.instance_id)
        .await
        .unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(e, Ec2Error::Timeout { after, .. } if after == Duration::from_millis(400)),
        "{e:?}"
    );
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    assert!(
        lab.rec.count(Action::DescribeInstances, Some("Timeout")) >= 2,
        "attempt timeouts are retried"
    );
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
