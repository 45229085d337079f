//! The fake's instance metadata: [`MetadataApi`] read from the emulator's model, as IMDS of
//! the agent's instance answers.

use std::net::Ipv4Addr;

use vpcnet_agent::cloud::{ImdsResult, MetadataApi};
use vpcnet_emu::model;
use vpcnet_imds::{ImdsError, ImdsInterface};

use super::FakeCloud;

impl FakeCloud {
    fn imds<T>(
        &self,
        path: &str,
        f: impl FnOnce(&model::Cloud, &model::Instance) -> Option<T>,
    ) -> Result<T, ImdsError> {
        let m = self.0.model.lock().unwrap();
        m.instance(&self.0.instance_id)
            .and_then(|i| f(&m, i))
            .ok_or_else(|| ImdsError::NotFound {
                path: path.to_string(),
            })
    }
}

impl MetadataApi for FakeCloud {
    fn instance_id(&self) -> ImdsResult<'_, String> {
        let r = self.imds("instance-id", |_, i| Some(i.id.clone()));
        Box::pin(async move { r })
    }
    fn instance_type(&self) -> ImdsResult<'_, String> {
        let r = self.imds("instance-type", |_, i| Some(i.instance_type.clone()));
        Box::pin(async move { r })
    }
    fn mac(&self) -> ImdsResult<'_, String> {
        let r = self.imds("mac", |m, i| m.eni(&i.primary_eni).map(|e| e.mac.clone()));
        Box::pin(async move { r })
    }
    fn region(&self) -> ImdsResult<'_, String> {
        let r = Ok(self.0.region.clone());
        Box::pin(async move { r })
    }
    fn availability_zone(&self) -> ImdsResult<'_, String> {
        let r = self.imds("placement/availability-zone", |_, i| Some(i.az.clone()));
        Box::pin(async move { r })
    }
    fn local_ipv4(&self) -> ImdsResult<'_, Ipv4Addr> {
        let r = self.imds("local-ipv4", |_, i| Some(i.private_ip));
        Box::pin(async move { r })
    }
    fn interface<'a>(&'a self, mac: &'a str) -> ImdsResult<'a, ImdsInterface> {
        let path = format!("network/interfaces/macs/{mac}/");
        if let Some(net) = self.lagged_imds() {
            let r = net
                .by_mac(mac)
                .map(lagged)
                .ok_or(ImdsError::NotFound { path });
            return Box::pin(async move { r });
        }
        let r = self.imds(&path, |m, i| {
            let e = m.enis().find(|e| e.mac == mac)?;
            imds_interface(m, i, e)
        });
        Box::pin(async move { r })
    }
    fn interfaces(&self) -> ImdsResult<'_, Vec<ImdsInterface>> {
        self.0
            .imds_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(net) = self.lagged_imds() {
            let r = Ok(net.interfaces.iter().map(lagged).collect());
            return Box::pin(async move { r });
        }
        let r = self.imds("network/interfaces/macs/", |m, i| {
            let mut all: Vec<ImdsInterface> =
                m.enis().filter_map(|e| imds_interface(m, i, e)).collect();
            all.sort_by_key(|i| (i.network_card, i.device_number));
            Some(all)
        });
        Box::pin(async move { r })
    }
}

/// An interface of the emulator's lagging IMDS view as the agent reads it.
fn lagged(i: &model::ImdsInterface) -> ImdsInterface {
    ImdsInterface {
        mac: i.mac.clone(),
        device_number: i.device_number,
        network_card: i.network_card,
        interface_id: i.eni_id.clone(),
        subnet_id: i.subnet_id.clone(),
        subnet_cidr: i.subnet_cidr,
        vpc_id: i.vpc_id.clone(),
        vpc_cidrs: i.vpc_cidrs.clone(),
        security_group_ids: i.security_group_ids.clone(),
        local_ipv4s: i.local_ipv4s.clone(),
        ipv4_prefixes: i.ipv4_prefixes.clone(),
    }
}

/// ENI `e` as IMDS of instance `i` lists it; `None` unless it is attached to `i`.
fn imds_interface(m: &model::Cloud, i: &model::Instance, e: &model::Eni) -> Option<ImdsInterface> {
    let a = e.attachment.as_ref().filter(|a| a.instance_id == i.id)?;
    let s = m.subnet(&e.subnet_id)?;
    let vpc = m.vpc(&e.vpc_id)?;
    Some(ImdsInterface {
        mac: e.mac.clone(),
        device_number: a.device_index,
        network_card: a.network_card,
        interface_id: e.id.clone(),
        subnet_id: e.subnet_id.clone(),
        subnet_cidr: s.cidr,
        vpc_id: e.vpc_id.clone(),
        vpc_cidrs: vpc.cidrs.iter().map(|(_, c)| *c).collect(),
        security_group_ids: e.groups.clone(),
        local_ipv4s: std::iter::once(e.primary_ip)
            .chain(e.secondary_ips.iter().copied())
            .collect(),
        ipv4_prefixes: e.prefixes.clone(),
    })
}
