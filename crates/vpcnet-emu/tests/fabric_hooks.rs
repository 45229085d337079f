//! The lab's fabric hooks: every change reported in order and with its content, and a delayed
//! attach reported when it completes.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::lab;
use vpcnet_emu::{
    ActionFaults, AddressesChanged, Emulator, EniAttached, EniDetached, FabricEvent, FabricHooks,
    HookFuture,
};

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(Instant, FabricEvent)>>,
    /// Read through the emulator from inside the hook: proves hooks run outside the state lock.
    emu: Mutex<Option<Emulator>>,
}

impl Recorder {
    fn push(&self, ev: FabricEvent) {
        if let Some(emu) = self.emu.lock().unwrap().as_ref() {
            let _ = emu.enis();
        }
        self.events.lock().unwrap().push((Instant::now(), ev));
    }
    fn take(&self) -> Vec<FabricEvent> {
        self.events
            .lock()
            .unwrap()
            .drain(..)
            .map(|(_, e)| e)
            .collect()
    }
}

impl FabricHooks for Recorder {
    fn eni_attached(&self, ev: EniAttached) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::EniAttached(ev)) })
    }
    fn eni_detached(&self, ev: EniDetached) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::EniDetached(ev)) })
    }
    fn addresses_assigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::AddressesAssigned(ev)) })
    }
    fn addresses_unassigned(&self, ev: AddressesChanged) -> HookFuture<'_> {
        Box::pin(async move { self.push(FabricEvent::AddressesUnassigned(ev)) })
    }
}

fn net(s: &str) -> ipnet::Ipv4Net {
    s.parse().unwrap()
}

#[tokio::test]
async fn hooks_see_every_change_in_order() {
    let lab = lab(50).await;
    let rec = Arc::new(Recorder::default());
    *rec.emu.lock().unwrap() = Some(lab.emu.clone());
    lab.emu.set_hooks(rec.clone());

    let inst = lab.instance("m5.large").await;
    let primary = inst.primary_eni.clone().unwrap();
    let ev = rec.take();
    assert_eq!(
        ev,
        vec![FabricEvent::EniAttached(EniAttached {
            eni_id: primary.eni_id.clone(),
            mac: primary.mac.clone(),
            instance_id: inst.instance_id.clone(),
            device_index: 0,
            network_card: 0,
            subnet_id: lab.subnet.clone(),
            subnet_cidr: net("10.0.0.0/24"),
            gateway: "10.0.0.1".parse().unwrap(),
            primary_ip: inst.private_ip,
            secondary: vec![],
            ipv6: vec![],
        })]
    );

    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .secondary_private_ip_address_count(2)
        .send()
        .await
        .unwrap();
    let eni_id = r
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let info = lab.emu.eni(&eni_id).unwrap();
    let secs: Vec<ipnet::Ipv4Net> = info
        .secondary_ips
        .iter()
        .map(|ip| ipnet::Ipv4Net::new(*ip, 32).unwrap())
        .collect();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesAssigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: None,
            cidrs: secs.clone(),
            ipv6: vec![],
        })]
    );

    let att = lab
        .ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    let ev = rec.take();
    match &ev[..] {
        [FabricEvent::EniAttached(a)] => {
            assert_eq!(
                (a.eni_id.as_str(), a.device_index, a.mac.as_str()),
                (eni_id.as_str(), 1, info.mac.as_str())
            );
            assert_eq!(
                a.secondary, secs,
                "addresses already on the ENI come with the attach"
            );
            assert_eq!(a.primary_ip, info.primary_ip);
        }
        other => panic!("{other:?}"),
    }

    let r = lab
        .ec2
        .assign_private_ip_addresses()
        .network_interface_id(&eni_id)
        .ipv4_prefix_count(1)
        .send()
        .await
        .unwrap();
    let prefix = net(r.assigned_ipv4_prefixes()[0].ipv4_prefix().unwrap());
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesAssigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: Some(inst.instance_id.clone()),
            cidrs: vec![prefix],
            ipv6: vec![],
        })]
    );

    lab.emu
        .unassign_behind_back(&eni_id, &[info.secondary_ips[0]], &[])
        .await
        .unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesUnassigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: Some(inst.instance_id.clone()),
            cidrs: vec![secs[0]],
            ipv6: vec![],
        })]
    );

    lab.emu.detach_behind_back(&eni_id).await.unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::EniDetached(EniDetached {
            eni_id: eni_id.clone(),
            mac: info.mac.clone(),
            instance_id: inst.instance_id.clone(),
            device_index: 1,
            network_card: 0,
        })]
    );
    // the agent's own detach of that attachment now fails: it is gone
    let e = lab
        .ec2
        .detach_network_interface()
        .attachment_id(att.attachment_id().unwrap())
        .send()
        .await
        .unwrap_err();
    assert_eq!(common::code(&e), "InvalidAttachmentID.NotFound");

    lab.ec2
        .delete_network_interface()
        .network_interface_id(&eni_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        rec.take(),
        vec![FabricEvent::AddressesUnassigned(AddressesChanged {
            eni_id: eni_id.clone(),
            instance_id: None,
            cidrs: vec![secs[1], prefix],
            ipv6: vec![],
        })]
    );

    lab.emu.terminate_instance(&inst.instance_id).await.unwrap();
    match &rec.take()[..] {
        [FabricEvent::EniDetached(d)] => assert_eq!(d.eni_id, primary.eni_id),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn delayed_attach_reports_when_it_completes() {
    let lab = lab(51).await;
    let rec = Arc::new(Recorder::default());
    lab.emu.set_hooks(rec.clone());
    let inst = lab.instance("m5.large").await;
    rec.take();
    lab.emu
        .set_action_faults(
            "AttachNetworkInterface",
            Some(ActionFaults::default().latency(Duration::from_millis(600))),
        )
        .unwrap();
    let r = lab
        .ec2
        .create_network_interface()
        .subnet_id(&lab.subnet)
        .send()
        .await
        .unwrap();
    let eni_id = r
        .network_interface()
        .unwrap()
        .network_interface_id()
        .unwrap()
        .to_string();
    let t0 = Instant::now();
    lab.ec2
        .attach_network_interface()
        .network_interface_id(&eni_id)
        .instance_id(&inst.instance_id)
        .device_index(1)
        .send()
        .await
        .unwrap();
    assert!(rec.take().is_empty(), "not attached yet");
    assert_eq!(
        lab.emu.eni(&eni_id).unwrap().attachment.unwrap().status,
        "attaching"
    );
    tokio::time::sleep(Duration::from_millis(900)).await;
    let events = rec.events.lock().unwrap().clone();
    assert_eq!(events.len(), 1);
    assert!(events[0].0 - t0 >= Duration::from_millis(600));
    assert!(matches!(&events[0].1, FabricEvent::EniAttached(a) if a.eni_id == eni_id));
}
