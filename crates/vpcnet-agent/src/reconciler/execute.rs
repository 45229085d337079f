//! Plans of the core executed against EC2, one action at a time, with the results fed back
//! into the pool.

use vpcnet_ec2::{AddressRelease, AddressRequest, Ec2Error};
use vpcnet_ipam::Action;

use super::eni::{create_eni, delete_eni};
use crate::clock::now_ms;
use crate::cloud::Ec2Api;
use crate::state::Shared;

/// Plans and executes until the pool is on target or an EC2 call fails. Returns whether
/// anything changed. An assign refused because the ENI's subnet is full is not a failure:
/// the ENI is marked ([`vpcnet_ipam::Pool::mark_subnet_full`]) and the next plan grows
/// elsewhere at once. Nor is a prefix refused for a fragmented subnet: the next plan asks for
/// secondary /32s instead ([`super::prefix_fallback`]).
pub async fn fill(shared: &Shared, ec2: &dyn Ec2Api) -> Result<bool, Ec2Error> {
    let mut changed = false;
    'plans: for _ in 0..16 {
        // Custom networking without a valid ENIConfig: no ENI (never one in the node's
        // subnet); the ENIConfig watch wakes this task once one is resolved.
        let can_create = super::placement::eni_placement(shared).is_some();
        // The Node is cordoned (AWS_MANAGE_ENIS_NON_SCHEDULABLE=false): only surplus goes
        // back; the Node watch wakes this task when it is schedulable again.
        let paused = shared.enis().management_paused();
        // Plan and mark under one lock, so no ADD can take an address being released.
        let actions = {
            let mut pool = shared.pool();
            let mut actions = pool.plan(now_ms());
            if !can_create {
                actions.retain(|a| !matches!(a, Action::CreateEni { .. }));
            }
            if paused {
                actions.retain(crate::kubernetes::node_watch::allowed_while_paused);
            }
            for a in &actions {
                pool.begin(a);
            }
            actions
        };
        if actions.is_empty() {
            return Ok(changed);
        }
        for (i, a) in actions.iter().enumerate() {
            tracing::debug!(action = ?a, "executing");
            if let Err(e) = execute(shared, ec2, a).await {
                {
                    let mut pool = shared.pool();
                    // Never back into the free pool blindly: EC2 may have applied the call
                    // (a timeout or 5xx after the fact, or an attempt applied whose reply was
                    // lost and whose retry inside the client then failed with a 4xx such as
                    // "not assigned"; a DeleteEni may have stopped between detach and
                    // delete). What the action takes away stays out of service until a
                    // describe, forced at the next pass, settles it.
                    if a.is_release() {
                        tracing::warn!(action = ?a, error = %crate::errors::chain(&e), "release failed; its addresses stay out of service until the next describe says whether EC2 applied it");
                        pool.unsettle(a);
                        shared.enis().request_describe();
                    } else {
                        // Assign or create: nothing was taken out; anything EC2 made behind a
                        // lost reply is adopted by the next describe.
                        pool.abort(a);
                        if super::prefix_fallback::fragmented(a, &e) {
                            let now = now_ms();
                            // A prefix refused on an ENI: an ENI elsewhere (subnet discovery,
                            // ENIConfig) may still get whole /28s; fall back to /32s only when
                            // no ENI can be added or the new ENI's prefixes were refused too.
                            if let Action::AssignPrefixes { eni_id, .. } = a {
                                pool.mark_subnet_full(eni_id, now);
                            }
                            let create_next = can_create
                                && !paused
                                && matches!(a, Action::AssignPrefixes { .. })
                                && pool
                                    .plan(now)
                                    .iter()
                                    .any(|x| matches!(x, Action::CreateEni { .. }));
                            if !create_next {
                                super::prefix_fallback::fall_back(&mut pool, &e, now);
                            }
                            for rest in &actions[i + 1..] {
                                pool.abort(rest);
                            }
                            drop(pool);
                            shared.update_gauges();
                            continue 'plans;
                        }
                        if let (
                            Action::AssignIps { eni_id, .. }
                            | Action::AssignPrefixes { eni_id, .. },
                            true,
                        ) = (a, super::subnet_discovery::subnet_full(&e))
                        {
                            tracing::warn!(eni = %eni_id, "its subnet has no room ({}); growing other ENIs or creating one instead for the next {} s", crate::errors::chain(&e), vpcnet_ipam::SUBNET_FULL_MS / 1000);
                            pool.mark_subnet_full(eni_id, now_ms());
                            for rest in &actions[i + 1..] {
                                pool.abort(rest);
                            }
                            continue 'plans;
                        }
                    }
                    for rest in &actions[i + 1..] {
                        pool.abort(rest);
                    }
                }
                if changed {
                    let _ = shared.persist().await;
                }
                return Err(e);
            }
            changed = true;
            if a.grows() {
                shared.pool_grew();
            }
        }
        // A failed write is logged by persist; the next change writes the pool again.
        let _ = shared.persist().await;
        shared.update_gauges();
    }
    Ok(changed)
}

async fn execute(shared: &Shared, ec2: &dyn Ec2Api, action: &Action) -> Result<(), Ec2Error> {
    match action {
        Action::AssignIps { eni_id, count } => {
            let got = ec2
                .assign_private_ips(eni_id, AddressRequest::SecondaryIps(*count))
                .await?;
            shared.pool().add_ips(eni_id, &got.ips, now_ms());
        }
        Action::AssignPrefixes { eni_id, count } => {
            let got = ec2
                .assign_private_ips(eni_id, AddressRequest::Prefixes(*count))
                .await?;
            shared.pool().add_prefixes(eni_id, &got.prefixes, now_ms());
        }
        Action::CreateEni {
            ips,
            prefixes,
            network_card,
        } => create_eni(shared, ec2, *ips, *prefixes, *network_card).await?,
        Action::UnassignIps { eni_id, ips } => {
            ec2.unassign_private_ips(eni_id, &AddressRelease::SecondaryIps(ips.clone()))
                .await?;
            shared.pool().remove_ips(eni_id, ips);
        }
        Action::UnassignPrefixes { eni_id, prefixes } => {
            ec2.unassign_private_ips(eni_id, &AddressRelease::Prefixes(prefixes.clone()))
                .await?;
            shared.pool().remove_prefixes(eni_id, prefixes);
        }
        Action::DeleteEni { eni_id } => delete_eni(shared, ec2, eni_id).await?,
    }
    Ok(())
}
