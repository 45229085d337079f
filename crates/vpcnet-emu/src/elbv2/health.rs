//! Target health as ELBv2 defines it (`DescribeTargetHealth`'s `TargetHealth`): pure, from a
//! registration, where its target group is used, and what the data plane's real checks
//! observed ([`Observation`]); time is passed in.
//!
//! | state | when | reason |
//! |---|---|---|
//! | `draining` | deregistered, delay running | `Target.DeregistrationInProgress` |
//! | `unused` | no load balancer uses the group | `Target.NotInUse` |
//! | `unused` | target zone not enabled on the load balancer | `Target.NotInUse` |
//! | `initial` | no check result yet | `Elb.RegistrationInProgress` |
//! | `initial` | checks running, `HealthyThresholdCount` passes not reached | `Elb.InitialHealthChecking` |
//! | `healthy` | the data plane reports the target up | — |
//! | `unhealthy` | was up and failed `UnhealthyThresholdCount` checks, or never came up and failed checks for `interval × UnhealthyThresholdCount` since registration | `Target.Timeout`, `Target.ResponseCodeMismatch`, `Target.FailedHealthChecks` |
//! | `unused` | asked for but not registered | `Target.NotRegistered` |

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::model::{HealthCheck, Registration};

/// ELBv2 `TargetHealthStateEnum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Initial,
    Healthy,
    Unhealthy,
    Unused,
    Draining,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Initial => "initial",
            State::Healthy => "healthy",
            State::Unhealthy => "unhealthy",
            State::Unused => "unused",
            State::Draining => "draining",
        }
    }
}

/// Why a check failed, as the data plane saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckFailure {
    /// No answer within `HealthCheckTimeoutSeconds`.
    Timeout,
    /// An HTTP answer whose status is not in the matcher.
    ResponseCode(Option<u16>),
    /// Connection refused or reset, or a malformed answer.
    Failed,
}

/// What the data plane's health checks report for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The proxy currently counts the target up (it passed `HealthyThresholdCount` checks and
    /// has not failed `UnhealthyThresholdCount` since).
    pub up: bool,
    /// The target has been up at least once since checks started.
    pub ever_up: bool,
    /// The last completed check failed, and why; None when it passed or none completed.
    pub last_failure: Option<CheckFailure>,
    /// At least one check has completed.
    pub checked: bool,
}

/// ELBv2 `TargetHealth`: state, reason code and description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetHealth {
    pub state: State,
    pub reason: Option<String>,
    pub description: Option<String>,
}

impl TargetHealth {
    fn new(state: State, reason: &str, description: impl Into<String>) -> Self {
        TargetHealth {
            state,
            reason: Some(reason.to_string()),
            description: Some(description.into()),
        }
    }

    /// A target asked about that is not registered: `unused`, `Target.NotRegistered`.
    pub fn not_registered() -> Self {
        Self::new(
            State::Unused,
            "Target.NotRegistered",
            "Target is not registered to the target group",
        )
    }
}

/// Where the registration's target group is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// A load balancer forwards to the group.
    pub in_use: bool,
    /// The target's zone is `all` or one of the load balancer's zones.
    pub zone_enabled: bool,
}

/// The health of `reg` at `now` (see the module table). `obs` is None until the data plane
/// reports the target (it checks only targets of groups in use).
pub fn evaluate(
    reg: &Registration,
    check: &HealthCheck,
    usage: Usage,
    obs: Option<&Observation>,
    now: Instant,
) -> TargetHealth {
    if reg.draining_until.is_some_and(|t| t > now) {
        return TargetHealth::new(
            State::Draining,
            "Target.DeregistrationInProgress",
            "Target deregistration is in progress",
        );
    }
    if !usage.in_use {
        return TargetHealth::new(
            State::Unused,
            "Target.NotInUse",
            "Target group is not configured to receive traffic from the load balancer",
        );
    }
    if !usage.zone_enabled {
        return TargetHealth::new(
            State::Unused,
            "Target.NotInUse",
            "Target is in an Availability Zone that is not enabled for the load balancer",
        );
    }
    let Some(obs) = obs.filter(|o| o.checked || o.up) else {
        return TargetHealth::new(
            State::Initial,
            "Elb.RegistrationInProgress",
            "Target registration is in progress",
        );
    };
    if obs.up {
        return TargetHealth {
            state: State::Healthy,
            reason: None,
            description: None,
        };
    }
    let window = Duration::from_secs(u64::from(
        check.interval_seconds * check.unhealthy_threshold,
    ));
    let failing_long = obs.last_failure.is_some() && now >= reg.registered_at + window;
    match &obs.last_failure {
        Some(f) if obs.ever_up || failing_long => failure(f),
        _ => TargetHealth::new(
            State::Initial,
            "Elb.InitialHealthChecking",
            "Initial health checks in progress",
        ),
    }
}

fn failure(f: &CheckFailure) -> TargetHealth {
    match f {
        CheckFailure::Timeout => {
            TargetHealth::new(State::Unhealthy, "Target.Timeout", "Request timed out")
        }
        CheckFailure::ResponseCode(code) => TargetHealth::new(
            State::Unhealthy,
            "Target.ResponseCodeMismatch",
            match code {
                Some(c) => format!("Health checks failed with these codes: [{c}]"),
                None => "Health checks failed with an unexpected response code".into(),
            },
        ),
        CheckFailure::Failed => TargetHealth::new(
            State::Unhealthy,
            "Target.FailedHealthChecks",
            "Health checks failed",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elbv2::model::{HealthCheckPort, Protocol};
    use proptest::prelude::*;

    fn check() -> HealthCheck {
        HealthCheck {
            enabled: true,
            protocol: Protocol::Tcp,
            port: HealthCheckPort::TrafficPort,
            path: None,
            interval_seconds: 5,
            timeout_seconds: 5,
            healthy_threshold: 2,
            unhealthy_threshold: 3,
            matcher: None,
        }
    }

    fn reg(t0: Instant) -> Registration {
        Registration {
            id: "10.0.1.5".into(),
            port: 80,
            availability_zone: Some("us-east-1a".into()),
            ip: "10.0.1.5".parse().unwrap(),
            registered_at: t0,
            draining_until: None,
        }
    }

    const USED: Usage = Usage {
        in_use: true,
        zone_enabled: true,
    };

    fn obs(up: bool, ever_up: bool, fail: Option<CheckFailure>) -> Observation {
        Observation {
            up,
            ever_up,
            checked: true,
            last_failure: fail,
        }
    }

    #[test]
    fn lifecycle() {
        let t0 = Instant::now();
        let r = reg(t0);
        let c = check();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(
            evaluate(&r, &c, USED, None, t0).reason.unwrap(),
            "Elb.RegistrationInProgress"
        );
        let passing = obs(false, false, None);
        assert_eq!(
            evaluate(&r, &c, USED, Some(&passing), at(5))
                .reason
                .unwrap(),
            "Elb.InitialHealthChecking"
        );
        let up = obs(true, true, None);
        assert_eq!(
            evaluate(&r, &c, USED, Some(&up), at(10)).state,
            State::Healthy
        );
        let down = obs(false, true, Some(CheckFailure::Timeout));
        let h = evaluate(&r, &c, USED, Some(&down), at(30));
        assert_eq!(
            (h.state, h.reason.unwrap().as_str()),
            (State::Unhealthy, "Target.Timeout")
        );
        let mut d = r.clone();
        d.draining_until = Some(at(60));
        assert_eq!(
            evaluate(&d, &c, USED, Some(&up), at(59)).state,
            State::Draining
        );
        let unused = Usage {
            in_use: false,
            zone_enabled: true,
        };
        assert_eq!(
            evaluate(&r, &c, unused, Some(&up), at(1)).reason.unwrap(),
            "Target.NotInUse"
        );
    }

    #[test]
    fn never_up_turns_unhealthy_after_the_failure_window() {
        let t0 = Instant::now();
        let (r, c) = (reg(t0), check());
        let failing = obs(false, false, Some(CheckFailure::Failed));
        // interval 5 s × unhealthy threshold 3 = 15 s
        assert_eq!(
            evaluate(&r, &c, USED, Some(&failing), t0 + Duration::from_secs(14)).state,
            State::Initial
        );
        let h = evaluate(&r, &c, USED, Some(&failing), t0 + Duration::from_secs(15));
        assert_eq!(
            (h.state, h.reason.unwrap().as_str()),
            (State::Unhealthy, "Target.FailedHealthChecks")
        );
        let code = obs(false, true, Some(CheckFailure::ResponseCode(Some(404))));
        let h = evaluate(&r, &c, USED, Some(&code), t0);
        assert_eq!(
            h.description.unwrap(),
            "Health checks failed with these codes: [404]"
        );
    }

    proptest! {
        /// Whatever the data plane reports, a draining target is draining, a target of an
        /// unused group is unused, `healthy` comes only from an up report, and only healthy
        /// targets carry no reason.
        #[test]
        fn state_follows_registration_then_observation(
            draining in any::<bool>(), in_use in any::<bool>(), zone in any::<bool>(),
            up in any::<bool>(), ever_up in any::<bool>(), checked in any::<bool>(),
            fail in prop::option::of(0u8..3), secs in 0u64..100,
        ) {
            let t0 = Instant::now();
            let mut r = reg(t0);
            if draining {
                r.draining_until = Some(t0 + Duration::from_secs(1000));
            }
            let f = fail.map(|k| match k { 0 => CheckFailure::Timeout, 1 => CheckFailure::Failed, _ => CheckFailure::ResponseCode(Some(500)) });
            let o = Observation { up, ever_up: ever_up || up, checked, last_failure: f };
            let h = evaluate(&r, &check(), Usage { in_use, zone_enabled: zone }, Some(&o), t0 + Duration::from_secs(secs));
            if draining {
                prop_assert_eq!(h.state, State::Draining);
            } else if !in_use || !zone {
                prop_assert_eq!(h.state, State::Unused);
            } else {
                prop_assert_eq!(h.state == State::Healthy, up);
                if h.state == State::Unhealthy {
                    prop_assert!(o.last_failure.is_some());
                }
            }
            prop_assert_eq!(h.reason.is_none(), h.state == State::Healthy);
        }
    }
}
