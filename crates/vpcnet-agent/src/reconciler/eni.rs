//! ENI lifecycle: create → attach → DeleteOnTermination → node setup, and detach → delete,
//! never leaking an ENI on a failed step.

use std::collections::BTreeSet;
use std::time::Duration;

use vpcnet_backoff::{Backoff, Cancel, Jitter, Wait};
use vpcnet_ec2::{AddressRequest, CreateEni, Ec2Error, Tags};

use super::adopt::observation;
use super::node_setup::node_eni;
use crate::clock::{now_ms, wall_now};
use crate::cloud::Ec2Api;
use crate::errors::chain;
use crate::options::{ENI_DESCRIPTION_PREFIX, TAG_CLUSTER_NAME, TAG_CREATED_AT, TAG_INSTANCE_ID};
use crate::state::Shared;

/// How long a detaching ENI is polled before giving up until the next pass.
const DETACH_WAIT: Duration = Duration::from_secs(30);
/// How long a new attachment is polled until it is `attached`.
const ATTACH_WAIT: Duration = Duration::from_secs(60);

/// Polls of a new attachment: 20 ms doubling to 500 ms, for [`ATTACH_WAIT`].
fn attach_polls() -> Backoff {
    Backoff::new(Duration::from_millis(20), Duration::from_millis(500))
        .with_jitter(Jitter::Equal)
        .with_deadline(ATTACH_WAIT)
}

/// Polls of a detaching ENI: 50 ms doubling to 2 s, for [`DETACH_WAIT`].
fn detach_polls() -> Backoff {
    Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
        .with_jitter(Jitter::Equal)
        .with_deadline(DETACH_WAIT)
}

/// The error of ENI work cut short by the agent's stop signal.
fn stopped(action: vpcnet_ec2::Action) -> Ec2Error {
    Ec2Error::Request {
        action,
        message: "the agent is stopping".into(),
        source: None,
    }
}

/// Retries of a `DeleteNetworkInterface` during cleanup: 5 attempts, 200 ms doubling.
fn delete_retries() -> Backoff {
    Backoff::new(Duration::from_millis(200), Duration::from_secs(5)).with_max_attempts(5)
}

/// The lowest device index on network card `card` that no ENI of the instance uses (ours or
/// foreign): from 1 on card 0 (the primary ENI's 0), from 0 on the other cards (device
/// indexes count per card, as EC2 and the VPC CNI's `awsGetFreeDeviceNumber` count them).
fn next_device_index(shared: &Shared, card: u32) -> u32 {
    let mut used: BTreeSet<u32> = shared
        .pool()
        .enis()
        .filter(|e| e.info.network_card == card)
        .map(|e| e.info.device_number)
        .collect();
    used.extend(shared.enis().foreign_devices_on(card));
    let first = u32::from(card == 0);
    (first..).find(|d| !used.contains(d)).unwrap_or(first)
}

/// CreateNetworkInterface → AttachNetworkInterface (on network card `card`) →
/// DeleteOnTermination=true → node setup.
/// The ENI is created in the first subnet that takes it ([`super::placement::candidates`]:
/// with subnet discovery a full subnet moves on to the next). An ENI that cannot be attached
/// (or marked DeleteOnTermination) is detached/deleted again, so no ENI leaks.
pub(super) async fn create_eni(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    ips: u32,
    prefixes: u32,
    card: u32,
) -> Result<(), Ec2Error> {
    let f = &shared.facts;
    let candidates = super::placement::candidates(shared, ec2).await?;
    let mut tags = Tags::new();
    tags.insert(TAG_INSTANCE_ID.into(), f.instance_id.clone());
    if !shared.opts.cluster_name.is_empty() {
        tags.insert(TAG_CLUSTER_NAME.into(), shared.opts.cluster_name.clone());
    }
    for (k, v) in &shared.opts.additional_eni_tags {
        tags.insert(k.clone(), v.clone());
    }
    tags.insert(
        TAG_CREATED_AT.into(),
        wall_now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    );
    // The leaked-ENI sweep waits for this: it must not see the new ENI detached and delete it
    // between create and attach.
    let _lifecycle = shared.enis().lifecycle().await;
    let mut tried = candidates.into_iter().peekable();
    let (ni, subnet_cidr) = loop {
        let Some(c) = tried.next() else {
            // Not reached: candidates are never empty and the last one's error returns.
            return Err(Ec2Error::Request {
                action: vpcnet_ec2::Action::CreateNetworkInterface,
                message: "no subnet for a new ENI".into(),
                source: None,
            });
        };
        let req = CreateEni {
            subnet_id: c.placement.subnet_id.clone(),
            security_group_ids: c.placement.security_group_ids.clone(),
            description: format!("{ENI_DESCRIPTION_PREFIX}{}", f.instance_id),
            tags: tags.clone(),
            addresses: if prefixes > 0 {
                Some(AddressRequest::Prefixes(prefixes))
            } else if ips > 0 {
                Some(AddressRequest::SecondaryIps(ips))
            } else {
                None
            },
            client_token: None,
        };
        let created = ec2
            .create_network_interface(&req)
            .await
            .map_err(|e| super::placement::for_eniconfig(e, &c.placement));
        super::placement::record_outcome(shared.kube(), &c.placement, &created);
        match created {
            Ok(ni) => break (ni, c.cidr),
            Err(e) if tried.peek().is_some() && super::subnet_discovery::try_next_subnet(&e) => {
                tracing::warn!(subnet = %c.placement.subnet_id, "no ENI in this subnet ({}); trying the next discovered subnet", chain(&e));
            }
            Err(e) => return Err(e),
        }
    };
    if shared.stop().is_cancelled() {
        // Shutting down: do not start an attachment; one delete, else the sweep gets it.
        tracing::warn!(eni = %ni.eni_id, "stopping: deleting the ENI just created instead of attaching it (if that fails, the leaked-ENI sweep deletes it once it is old enough)");
        delete_with_retry(shared.stop(), ec2, &ni.eni_id).await;
        return Err(stopped(vpcnet_ec2::Action::AttachNetworkInterface));
    }
    let device = next_device_index(shared, card);
    let attachment = match ec2
        .attach_network_interface(&ni.eni_id, &f.instance_id, device, card)
        .await
    {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(eni = %ni.eni_id, "attach failed ({}); deleting the new ENI so it does not leak", chain(&e));
            delete_with_retry(shared.stop(), ec2, &ni.eni_id).await;
            return Err(e);
        }
    };
    if !wait_attached(shared.stop(), ec2, &ni.eni_id).await {
        if shared.stop().is_cancelled() {
            // The attachment is EC2's now: the next start describes and adopts the ENI.
            tracing::warn!(eni = %ni.eni_id, "stopping while the new ENI attaches: left attached for the next start to adopt");
            return Err(stopped(vpcnet_ec2::Action::AttachNetworkInterface));
        }
        tracing::warn!(eni = %ni.eni_id, "attachment did not complete; detaching and deleting the ENI");
        let _ = ec2.detach_network_interface(&attachment, true).await;
        wait_detached(shared.stop(), ec2, &ni.eni_id).await;
        delete_with_retry(shared.stop(), ec2, &ni.eni_id).await;
        return Err(Ec2Error::Timeout {
            action: vpcnet_ec2::Action::AttachNetworkInterface,
            after: ATTACH_WAIT,
            attempts: 1,
        });
    }
    if let Err(e) = ec2
        .set_delete_on_termination(&ni.eni_id, &attachment, true)
        .await
    {
        tracing::warn!(eni = %ni.eni_id, "DeleteOnTermination failed ({}); detaching and deleting the ENI", chain(&e));
        let _ = ec2.detach_network_interface(&attachment, true).await;
        wait_detached(shared.stop(), ec2, &ni.eni_id).await;
        delete_with_retry(shared.stop(), ec2, &ni.eni_id).await;
        return Err(e);
    }
    shared.enis().attached(&ni.eni_id, &attachment);
    let mut ni = ni;
    ni.attachment = Some(vpcnet_ec2::EniAttachment {
        attachment_id: attachment,
        instance_id: Some(f.instance_id.clone()),
        device_index: device,
        network_card_index: card,
        status: "attached".into(),
        delete_on_termination: true,
    });
    let obs = observation(&shared.facts, &ni, subnet_cidr);
    if let Some(node) = shared.node_network() {
        if let Err(e) = node.setup_eni(&node_eni(&obs.info, shared.opts.mtu)).await {
            // The ENI is attached and ours; EC2 state is consistent. Every periodic pass
            // sets up all secondary ENIs again (idempotent), which repairs this.
            tracing::error!(eni = %ni.eni_id, "node setup of the new ENI failed: {e:#}");
        }
    }
    tracing::info!(eni = %ni.eni_id, device, card, ips = obs.secondary_ips.len(), prefixes = obs.prefixes.len(), "created and attached ENI");
    shared.pool().add_eni(obs, now_ms());
    Ok(())
}

/// `DeleteNetworkInterface` with retries ([`delete_retries`]); an ENI already gone counts as
/// deleted. Gives up at the stop signal or after the last attempt: the ENI keeps its tags and
/// the leaked-ENI sweep deletes it once it is old enough.
pub(super) async fn delete_with_retry(stop: &Cancel, ec2: &dyn Ec2Api, eni_id: &str) {
    let mut cancel = stop.clone();
    let res = vpcnet_backoff::retry(
        &delete_retries(),
        &mut cancel,
        |_: &Ec2Error| true,
        |attempt| async move {
            match ec2.delete_network_interface(eni_id).await {
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => {
                    tracing::warn!(eni = eni_id, attempt, "delete failed: {}", chain(&e));
                    Err(e)
                }
                ok => ok,
            }
        },
    )
    .await;
    if let Err(e) = res {
        tracing::error!(
            eni = eni_id,
            "could not delete ENI ({e}); the leaked-ENI sweep removes it once it is old enough"
        );
    }
}

/// Polls until EC2 reports the attachment `attached` (an attach answers `attaching`);
/// false after [`ATTACH_WAIT`] or at the stop signal.
async fn wait_attached(stop: &Cancel, ec2: &dyn Ec2Api, eni_id: &str) -> bool {
    let ids = [eni_id.to_string()];
    let mut polls = attach_polls().start();
    let mut cancel = stop.clone();
    loop {
        if let Ok(v) = ec2.describe_network_interfaces_by_id(&ids).await {
            if v.first()
                .and_then(|n| n.attachment.as_ref())
                .is_some_and(|a| a.status == "attached")
            {
                return true;
            }
        }
        if polls.wait(&mut cancel).await != Wait::Retry {
            return false;
        }
    }
}

/// Polls until the ENI is detached (or gone); false after [`DETACH_WAIT`] or at the stop
/// signal.
async fn wait_detached(stop: &Cancel, ec2: &dyn Ec2Api, eni_id: &str) -> bool {
    let ids = [eni_id.to_string()];
    let mut polls = detach_polls().start();
    let mut cancel = stop.clone();
    loop {
        match ec2.describe_network_interfaces_by_id(&ids).await {
            Ok(v)
                if v.first()
                    .is_none_or(|n| n.attachment.is_none() || n.status == "available") =>
            {
                return true
            }
            Err(e) if e.is_not_found() => return true,
            _ => {}
        }
        if polls.wait(&mut cancel).await != Wait::Retry {
            return false;
        }
    }
}

/// Detach + delete a surplus ENI (never the primary: the core never plans that).
pub(super) async fn delete_eni(
    shared: &Shared,
    ec2: &dyn Ec2Api,
    eni_id: &str,
) -> Result<(), Ec2Error> {
    let attachment = shared.enis().attachment(eni_id);
    if let Some(att) = attachment {
        match ec2.detach_network_interface(&att, false).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        wait_detached(shared.stop(), ec2, eni_id).await;
    }
    match ec2.delete_network_interface(eni_id).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    shared.enis().forget(eni_id);
    shared.pool().remove_eni(eni_id);
    tracing::info!(eni = eni_id, "freed surplus ENI");
    Ok(())
}
