//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! the holder renews `spec.renewTime` every `renew`; another replica takes the Lease over only
//! once `renewTime + leaseDurationSeconds` has passed; every write is a replace carrying the
//! Lease's `resourceVersion`, so of two replicas racing for it one gets a conflict and stays a
//! follower. A leader that cannot renew within the lease duration steps down (the controller
//! stops its target-group tasks), so two replicas never write to ELBv2 at the same time for
//! longer than one in-flight call.
//!
//! [`decide`] is the pure rule; [`run`] applies it against the API server.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What a replica knows of the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub holder: Option<String>,
    pub renewed: Option<DateTime<Utc>>,
    pub duration: Duration,
}

/// What to do with the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No Lease yet: create it, holding it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Held by another replica whose lease expired: take it over.
    TakeOver,
    /// Held by another live replica: follow.
    Follow,
}

/// The rule (module docs); `now` is passed in.
pub fn decide(lease: Option<&LeaseView>, me: &str, now: DateTime<Utc>) -> Decision {
    let Some(l) = lease else {
        return Decision::Create;
    };
    match l.holder.as_deref() {
        Some(h) if h == me => Decision::Renew,
        None | Some("") => Decision::TakeOver,
        Some(_) => {
            let expired = match l.renewed {
                Some(r) => {
                    r + chrono::Duration::from_std(l.duration).unwrap_or(chrono::Duration::MAX)
                        < now
                }
                None => true,
            };
            if expired {
                Decision::TakeOver
            } else {
                Decision::Follow
            }
        }
    }
}

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// `leaseDurationSeconds` (default 15 s).
    pub duration: Duration,
    /// How often the holder renews and followers check (default 2 s).
    pub retry: Duration,
}

fn view(l: &Lease) -> LeaseView {
    let spec = l.spec.clone().unwrap_or_default();
    LeaseView {
        holder: spec.holder_identity,
        renewed: spec
            .renew_time
            .and_then(|t| DateTime::<Utc>::from_timestamp_micros(t.0.as_microsecond())),
        duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64),
    }
}

fn micro(now: DateTime<Utc>) -> MicroTime {
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(now.timestamp_micros())
            .expect("a current time is in range"),
    )
}

/// One round: read the Lease, apply [`decide`], write if needed. Returns whether we hold it.
async fn round(api: &Api<Lease>, e: &Election) -> Result<bool, kube::Error> {
    // The Lease's acquire and renew times are wall-clock timestamps shared with other replicas.
    #[allow(clippy::disallowed_methods)]
    let now = Utc::now();
    let current = api.get_opt(&e.name).await?;
    let d = decide(current.as_ref().map(view).as_ref(), &e.identity, now);
    let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(e.identity.clone()),
        lease_duration_seconds: Some(e.duration.as_secs() as i32),
        renew_time: Some(micro(now)),
        acquire_time: acquired.or(Some(micro(now))),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    match (d, current) {
        (Decision::Follow, _) => Ok(false),
        (Decision::Create, _) => {
            let l = Lease {
                metadata: ObjectMeta {
                    name: Some(e.name.clone()),
                    namespace: Some(e.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(0, None)),
            };
            api.create(&PostParams::default(), &l).await?;
            Ok(true)
        }
        (Decision::Renew, Some(mut l)) => {
            let s = l.spec.clone().unwrap_or_default();
            l.spec = Some(spec(s.lease_transitions.unwrap_or(0), s.acquire_time));
            api.replace(&e.name, &PostParams::default(), &l).await?;
            Ok(true)
        }
        (Decision::TakeOver, Some(mut l)) => {
            let s = l.spec.clone().unwrap_or_default();
            l.spec = Some(spec(s.lease_transitions.unwrap_or(0) + 1, None));
            api.replace(&e.name, &PostParams::default(), &l).await?;
            tracing::info!(identity = %e.identity, previous = ?s.holder_identity, "took over the lease");
            Ok(true)
        }
        (_, None) => Ok(false),
    }
}

/// Runs the election forever, publishing leadership on `leader`. A conflict (another replica
/// wrote first) or an API error counts as "not renewed"; the leader steps down once it has not
/// renewed for the lease duration.
pub async fn run(client: Client, e: Election, leader: watch::Sender<bool>, metrics: Metrics) {
    let api: Api<Lease> = Api::namespaced(client, &e.namespace);
    let mut last_renewed: Option<tokio::time::Instant> = None;
    loop {
        let held = match round(&api, &e).await {
            Ok(h) => h,
            Err(err) => {
                tracing::debug!(error = %err, "lease round failed");
                false
            }
        };
        if held {
            last_renewed = Some(tokio::time::Instant::now());
        }
        let is_leader = last_renewed.is_some_and(|t| held || t.elapsed() < e.duration);
        if *leader.borrow() != is_leader {
            tracing::info!(identity = %e.identity, leader = is_leader, "leadership changed");
            metrics.leader.set(i64::from(is_leader));
            let _ = leader.send(is_leader);
        }
        if !is_leader {
            last_renewed = None;
        }
        tokio::time::sleep(e.retry).await;
    }
}

/// Gives the Lease up on shutdown, as client-go's `ReleaseOnCancel` does: if this replica holds
/// it, the holder is cleared (and the duration set to 1 s), so a follower takes over at its
/// next round ([`decide`]: an empty holder is taken over) instead of waiting out the lease
/// duration. Call it once the controller has stopped. Returns whether the Lease was released.
pub async fn release(client: Client, e: &Election) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, &e.namespace);
    let Some(mut l) = api.get_opt(&e.name).await? else {
        return Ok(false);
    };
    let mut s = l.spec.clone().unwrap_or_default();
    if s.holder_identity.as_deref() != Some(e.identity.as_str()) {
        return Ok(false);
    }
    // The release time is a wall-clock timestamp shared with other replicas.
    #[allow(clippy::disallowed_methods)]
    let now = Utc::now();
    s.holder_identity = None;
    s.lease_duration_seconds = Some(1);
    s.renew_time = Some(micro(now));
    s.acquire_time = Some(micro(now));
    l.spec = Some(s);
    api.replace(&e.name, &PostParams::default(), &l).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn held(by: &str, renewed: i64) -> LeaseView {
        LeaseView {
            holder: Some(by.into()),
            renewed: Some(at(renewed)),
            duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn the_holder_renews_others_follow_until_it_expires() {
        assert_eq!(decide(None, "a", at(0)), Decision::Create);
        assert_eq!(decide(Some(&held("a", 0)), "a", at(100)), Decision::Renew);
        assert_eq!(decide(Some(&held("a", 0)), "b", at(10)), Decision::Follow);
        assert_eq!(decide(Some(&held("a", 0)), "b", at(15)), Decision::Follow);
        assert_eq!(decide(Some(&held("a", 0)), "b", at(16)), Decision::TakeOver);
        let released = LeaseView {
            holder: None,
            renewed: None,
            duration: Duration::from_secs(15),
        };
        assert_eq!(decide(Some(&released), "b", at(0)), Decision::TakeOver);
    }
}
