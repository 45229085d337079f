//! State-machine property test of the cloud model: random sequences of ENI and address
//! operations keep the books balanced, never hand out an address twice, never exceed an
//! instance type's limits, answer only EC2 error codes, and the fabric events replayed into a
//! mirror always equal the model's attached addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use proptest::prelude::*;
use vpcnet_emu::model::{AssignRequest, Cloud, CreateEniRequest, RunInstanceRequest};
use vpcnet_emu::FabricEvent;

#[derive(Debug, Clone)]
enum Op {
    Create {
        subnet: usize,
        secondaries: u32,
        prefixes: u32,
    },
    Attach {
        eni: usize,
        instance: usize,
        device: u32,
        card: u32,
    },
    Detach {
        eni: usize,
    },
    Assign {
        eni: usize,
        count: u32,
        prefixes: u32,
    },
    Unassign {
        eni: usize,
        nth: usize,
    },
    Delete {
        eni: usize,
    },
    Terminate {
        instance: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..2, 0u32..5, 0u32..2).prop_map(|(subnet, secondaries, prefixes)| Op::Create { subnet, secondaries, prefixes }),
        3 => (0usize..16, 0usize..3, 0u32..5, 0u32..2).prop_map(|(eni, instance, device, card)| Op::Attach { eni, instance, device, card }),
        1 => (0usize..16).prop_map(|eni| Op::Detach { eni }),
        4 => (0usize..16, 0u32..6, 0u32..3).prop_map(|(eni, count, prefixes)| Op::Assign { eni, count, prefixes }),
        2 => (0usize..16, 0usize..8).prop_map(|(eni, nth)| Op::Unassign { eni, nth }),
        1 => (0usize..16).prop_map(|eni| Op::Delete { eni }),
        1 => (0usize..3).prop_map(|instance| Op::Terminate { instance }),
    ]
}

const EC2_CODES: &[&str] = &[
    "AttachmentLimitExceeded",
    "PrivateIpAddressLimitExceeded",
    "InsufficientFreeAddressesInSubnet",
    "InsufficientCidrBlocks",
    "InvalidNetworkInterface.InUse",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidAttachmentID.NotFound",
    "IncorrectInstanceState",
    "MissingParameter",
    "OperationNotPermitted",
];

/// The fabric as the lab would build it from hooks: attached ENI → (instance, addresses).
type Mirror = BTreeMap<String, (String, BTreeSet<Ipv4Net>)>;

fn replay(mirror: &mut Mirror, events: Vec<FabricEvent>) {
    for ev in events {
        match ev {
            FabricEvent::EniAttached(a) => {
                let mut set: BTreeSet<Ipv4Net> = a.secondary.into_iter().collect();
                set.insert(Ipv4Net::new(a.primary_ip, 32).unwrap());
                assert!(
                    mirror.insert(a.eni_id, (a.instance_id, set)).is_none(),
                    "attached twice"
                );
            }
            FabricEvent::EniDetached(d) => {
                assert!(
                    mirror.remove(&d.eni_id).is_some(),
                    "detach of an ENI never reported attached"
                );
            }
            FabricEvent::AddressesAssigned(c) => {
                if let Some((_, set)) = mirror.get_mut(&c.eni_id) {
                    for n in c.cidrs {
                        assert!(set.insert(n), "{n} assigned twice");
                    }
                }
            }
            FabricEvent::AddressesUnassigned(c) => {
                if let Some((_, set)) = mirror.get_mut(&c.eni_id) {
                    for n in c.cidrs {
                        assert!(set.remove(&n), "{n} unassigned but not held");
                    }
                }
            }
            // The security-group view comes last and is checked against the mirror.
            FabricEvent::IngressRulesChanged(v) => {
                for e in &v.enis {
                    if let Some((_, set)) = mirror.get(&e.eni_id) {
                        let have: BTreeSet<Ipv4Net> = e.addresses.iter().copied().collect();
                        assert_eq!(&have, set, "ingress view of {} disagrees", e.eni_id);
                    }
                }
            }
        }
    }
}

fn check(cloud: &Cloud, mirror: &Mirror) -> Result<(), String> {
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    for e in cloud.enis() {
        let mut addrs: Vec<u32> = std::iter::once(e.primary_ip)
            .chain(e.secondary_ips.iter().copied())
            .map(u32::from)
            .collect();
        for p in &e.prefixes {
            addrs.extend(u32::from(p.network())..u32::from(p.network()) + 16);
        }
        for a in addrs {
            if !seen.insert(a) {
                return Err(format!(
                    "address {} handed out twice",
                    std::net::Ipv4Addr::from(a)
                ));
            }
        }
    }
    // Subnet books, ENI slots and instance ENI limits: the model's own check.
    cloud.check_books()?;
    let mut expect: Mirror = BTreeMap::new();
    for i in cloud.instances() {
        let mut per_card: BTreeMap<u32, u32> = BTreeMap::new();
        for e in cloud.enis() {
            let Some(a) = e.attachment.as_ref().filter(|a| a.instance_id == i.id) else {
                continue;
            };
            *per_card.entry(a.network_card).or_default() += 1;
            if e.slots() > i.limits.ipv4_per_eni {
                return Err(format!(
                    "{} holds {} slots on {}",
                    e.id,
                    e.slots(),
                    i.instance_type
                ));
            }
            let mut set: BTreeSet<Ipv4Net> = e.secondary_cidrs().into_iter().collect();
            set.insert(Ipv4Net::new(e.primary_ip, 32).unwrap());
            expect.insert(e.id.clone(), (i.id.clone(), set));
        }
        for (card, n) in per_card {
            match i.limits.card_max_enis(card) {
                Some(max) if n <= max => {}
                _ => return Err(format!("{} has {n} ENIs on card {card}", i.id)),
            }
        }
    }
    if &expect != mirror {
        return Err(format!(
            "fabric mirror differs from the model:\nmodel  {expect:?}\nmirror {mirror:?}"
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_the_cloud_consistent(ops in prop::collection::vec(op(), 1..60)) {
        let mut cloud = Cloud::new(3, "us-east-1", "123456789012");
        cloud.register_instance_type(vpcnet_limits::InstanceLimits {
            instance_type: "two.cards".into(),
            eni_limit: 2,
            ipv4_per_eni: 4,
            default_network_card: 0,
            network_cards: vec![
                vpcnet_limits::NetworkCard { index: 0, max_enis: 2 },
                vpcnet_limits::NetworkCard { index: 1, max_enis: 1 },
            ],
            hypervisor: vpcnet_limits::Hypervisor::Nitro,
            bare_metal: false,
            vcpus: None,
        });
        let (vpc, _) = cloud.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        let subnets = [
            cloud.create_subnet(&vpc, "10.0.0.0/26".parse().unwrap(), "us-east-1a").unwrap(),
            cloud.create_subnet(&vpc, "10.0.1.0/27".parse().unwrap(), "us-east-1a").unwrap(),
        ];
        let t0 = Instant::now();
        let mut instances = Vec::new();
        for t in ["m5.large", "t3.nano", "two.cards"] {
            instances.push(cloud.run_instance(RunInstanceRequest { instance_type: t.into(), subnet_id: subnets[0].clone(), ..Default::default() }, t0).unwrap());
        }
        let mut mirror = Mirror::new();
        replay(&mut mirror, cloud.take_events());
        let mut enis: Vec<String> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(step as u64);
            let pick = |i: usize, enis: &Vec<String>| enis.get(i % enis.len().max(1)).cloned();
            let res: Result<(), vpcnet_emu::Ec2Error> = match op.clone() {
                Op::Create { subnet, secondaries, prefixes } => cloud
                    .create_eni(CreateEniRequest { subnet_id: subnets[subnet].clone(), secondary_count: secondaries, prefix_count: prefixes, ..Default::default() })
                    .map(|id| enis.push(id)),
                Op::Attach { eni, instance, device, card } => match pick(eni, &enis) {
                    Some(e) => cloud.attach_eni(&e, &instances[instance], device, Some(card), now, now).map(|att| {
                        cloud.complete_attachment(&e, &att);
                    }),
                    None => Ok(()),
                },
                Op::Detach { eni } => match pick(eni, &enis).and_then(|e| cloud.eni(&e).and_then(|x| x.attachment.clone())) {
                    Some(a) => cloud.detach_eni(&a.id, false),
                    None => Ok(()),
                },
                Op::Assign { eni, count, prefixes } => match pick(eni, &enis) {
                    Some(e) => cloud.assign(&e, AssignRequest { count, prefix_count: prefixes, ..Default::default() }).map(|_| ()),
                    None => Ok(()),
                },
                Op::Unassign { eni, nth } => match pick(eni, &enis).and_then(|e| cloud.eni(&e).cloned()) {
                    Some(e) if !e.secondary_ips.is_empty() => cloud.unassign(&e.id, &[e.secondary_ips[nth % e.secondary_ips.len()]], &[]),
                    Some(e) if !e.prefixes.is_empty() => cloud.unassign(&e.id, &[], &[e.prefixes[nth % e.prefixes.len()]]),
                    _ => Ok(()),
                },
                Op::Delete { eni } => match pick(eni, &enis) {
                    Some(e) => cloud.delete_eni(&e).map(|_| enis.retain(|x| x != &e)),
                    None => Ok(()),
                },
                Op::Terminate { instance } => cloud.terminate_instances(&[instances[instance].clone()]).map(|_| ()),
            };
            if let Err(e) = &res {
                prop_assert!(EC2_CODES.contains(&e.code.as_str()), "step {step} {op:?}: unexpected {e}");
            }
            enis.retain(|e| cloud.eni(e).is_some());
            replay(&mut mirror, cloud.take_events());
            check(&cloud, &mirror).map_err(|m| TestCaseError::fail(format!("step {step} {op:?}: {m}")))?;
        }
    }
}
