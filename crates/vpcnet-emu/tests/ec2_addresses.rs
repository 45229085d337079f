//! EC2's address actions through the real aws-sdk-ec2 client: /28 prefixes, concurrent
//! assigns that never hand out an address twice, and reassignment that moves an address.

mod common;

use std::net::Ipv4Addr;

use common::{code, lab};

#[tokio::test]
async fn prefixes_assign_and_unassign() {
    let lab = lab(2).await;
    let inst = lab.instance("m5.large").await;
    let eni = inst.primary_eni.unwrap().eni_id;
    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefix_count(2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.assigned_ipv4_prefixes().len(), 2);
    let p: ipnet::Ipv4Net = r.assigned_ipv4_prefixes()[0]
        .ipv4_prefix()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(p.prefix_len(), 28);
    assert_eq!(p.trunc(), p);
    let r2 = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefixes("10.0.0.240/28")
        .send()
        .await;
    // 10.0.0.240/28 holds the broadcast address: refused
    assert_eq!(code(&r2.unwrap_err()), "InvalidParameterValue");
    let d = lab
        .ec2
        .describe_network_interfaces()
        .network_interface_ids(&eni)
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = d.network_interfaces()[0]
        .ipv4_prefixes()
        .iter()
        .filter_map(|p| p.ipv4_prefix())
        .collect();
    assert_eq!(prefixes.len(), 2);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 1 - 32)
    );
    lab.ec2
        .unassign_private_ip_addresses()
        .network_interface_id(&eni)
        .ipv4_prefixes(prefixes[0])
        .send()
        .await
        .unwrap();
    assert_eq!(lab.emu.eni(&eni).unwrap().prefixes.len(), 1);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 1 - 16)
    );
}

#[tokio::test]
async fn concurrent_assigns_never_hand_out_an_address_twice() {
    let lab = lab(6).await;
    let mut enis = Vec::new();
    for _ in 0..4 {
        let r = lab
            .ec2
            .create_network_interface()
            .subnet_id(&lab.subnet)
            .send()
            .await
            .unwrap();
        enis.push(
            r.network_interface()
                .unwrap()
                .network_interface_id()
                .unwrap()
                .to_string(),
        );
    }
    let mut tasks = Vec::new();
    for i in 0..40 {
        let ec2 = lab.ec2.clone();
        let eni = enis[i % enis.len()].clone();
        tasks.push(tokio::spawn(async move {
            ec2.assign_private_ip_addresses()
                .network_interface_id(eni)
                .secondary_private_ip_address_count(1)
                .send()
                .await
                .map(|r| {
                    r.assigned_private_ip_addresses()[0]
                        .private_ip_address()
                        .unwrap()
                        .to_string()
                })
        }));
    }
    let mut got = std::collections::BTreeSet::new();
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(ip) => {
                ok += 1;
                assert!(got.insert(ip.clone()), "{ip} handed out twice");
            }
            // 4 ENIs x 49 secondaries: no limit is reached; every call must succeed
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(ok, 40);
    assert_eq!(
        lab.emu.subnet_available(&lab.subnet),
        Some(256 - 5 - 4 - 40)
    );
}

#[tokio::test]
async fn allow_reassignment_moves_an_address() {
    let lab = lab(7).await;
    let a = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .private_ip_address("10.0.0.10")
        .send()
        .await
        .unwrap();
    let a = a
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let b = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .private_ip_address("10.0.0.11")
        .send()
        .await
        .unwrap();
    let b = b
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&a)
        .private_ip_addresses("10.0.0.50")
        .send()
        .await
        .unwrap();
    let e = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&b)
        .private_ip_addresses("10.0.0.50")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&e), "PrivateIpAddressInUse");
    lab.ec2
        .assign_private_ip_addresses()
        .network_interface_id(&b)
        .private_ip_addresses("10.0.0.50")
        .allow_reassignment(true)
        .send()
        .await
        .unwrap();
    let ip: Ipv4Addr = "10.0.0.50".parse().unwrap();
    assert!(!lab.emu.eni(&a).unwrap().secondary_ips.contains(&ip));
    assert!(lab.emu.eni(&b).unwrap().secondary_ips.contains(&ip));
    assert_eq!(lab.emu.subnet_available(&lab.subnet), Some(256 - 5 - 3));
}
