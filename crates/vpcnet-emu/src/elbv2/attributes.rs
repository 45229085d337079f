//! Target group attributes (ELBv2 `DescribeTargetGroupAttributes` /
//! `ModifyTargetGroupAttributes`): the keys served, their defaults per protocol and their
//! ranges. Values are kept as ELBv2 reports them: strings.

use std::collections::BTreeMap;

use super::error::{self, ElbError};
use super::model::Protocol;

/// Seconds a deregistered target drains before it is removed (0..=3600, default 300).
pub const DEREGISTRATION_DELAY: &str = "deregistration_delay.timeout_seconds";
/// Network load balancers: close the target's connections when the delay ends (default false:
/// they may continue).
pub const CONNECTION_TERMINATION: &str = "deregistration_delay.connection_termination.enabled";

const BOOL: &[&str] = &["true", "false"];

/// Every attribute of a target group of `protocol`, with ELBv2's defaults.
pub fn defaults(protocol: Protocol) -> BTreeMap<String, String> {
    let mut m: BTreeMap<String, String> = [
        (DEREGISTRATION_DELAY, "300"),
        ("stickiness.enabled", "false"),
        (
            "load_balancing.cross_zone.enabled",
            "use_load_balancer_configuration",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let extra: &[(&str, &str)] = if protocol.is_http() {
        &[
            ("stickiness.type", "lb_cookie"),
            ("load_balancing.algorithm.type", "round_robin"),
            ("slow_start.duration_seconds", "0"),
        ]
    } else {
        &[
            ("stickiness.type", "source_ip"),
            (CONNECTION_TERMINATION, "false"),
            ("preserve_client_ip.enabled", "false"),
            ("proxy_protocol_v2.enabled", "false"),
        ]
    };
    for (k, v) in extra {
        m.insert(k.to_string(), v.to_string());
    }
    m
}

/// Check one attribute for a target group of `protocol`. Error: `ValidationError` naming the key
/// and the accepted values (unknown keys, and keys of the other load balancer type, included).
pub fn validate(protocol: Protocol, key: &str, value: &str) -> Result<(), ElbError> {
    if !defaults(protocol).contains_key(key) {
        return Err(error::validation(format!(
            "Target group attribute key '{key}' is not recognized for a {} target group",
            protocol.as_str()
        )));
    }
    let bad = |what: &str| {
        Err(error::validation(format!(
            "Target group attribute '{key}' value '{value}' is invalid: {what}"
        )))
    };
    let int = value.parse::<u32>();
    match key {
        DEREGISTRATION_DELAY => match int {
            Ok(0..=3600) => Ok(()),
            _ => bad("expected 0 to 3600 seconds"),
        },
        "slow_start.duration_seconds" => match int {
            Ok(0) | Ok(30..=900) => Ok(()),
            _ => bad("expected 0 or 30 to 900 seconds"),
        },
        "stickiness.type" => {
            let allowed: &[&str] = if protocol.is_http() {
                &["lb_cookie", "app_cookie"]
            } else {
                &["source_ip"]
            };
            if allowed.contains(&value) {
                Ok(())
            } else {
                bad(&format!("expected one of {}", allowed.join(", ")))
            }
        }
        "load_balancing.algorithm.type" => {
            if ["round_robin", "least_outstanding_requests"].contains(&value) {
                Ok(())
            } else {
                bad("expected round_robin or least_outstanding_requests")
            }
        }
        "load_balancing.cross_zone.enabled" => {
            if ["true", "false", "use_load_balancer_configuration"].contains(&value) {
                Ok(())
            } else {
                bad("expected true, false or use_load_balancer_configuration")
            }
        }
        _ if BOOL.contains(&value) => Ok(()),
        _ => bad("expected true or false"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_depend_on_protocol() {
        let tcp = defaults(Protocol::Tcp);
        assert_eq!(tcp[DEREGISTRATION_DELAY], "300");
        assert_eq!(tcp[CONNECTION_TERMINATION], "false");
        assert!(!tcp.contains_key("slow_start.duration_seconds"));
        let http = defaults(Protocol::Http);
        assert_eq!(http["stickiness.type"], "lb_cookie");
        assert!(!http.contains_key(CONNECTION_TERMINATION));
    }

    #[test]
    fn ranges_and_unknown_keys() {
        assert!(validate(Protocol::Tcp, DEREGISTRATION_DELAY, "0").is_ok());
        assert!(validate(Protocol::Tcp, DEREGISTRATION_DELAY, "3600").is_ok());
        for bad in ["3601", "-1", "abc", ""] {
            assert!(validate(Protocol::Tcp, DEREGISTRATION_DELAY, bad).is_err());
        }
        assert!(validate(Protocol::Http, "slow_start.duration_seconds", "10").is_err());
        assert!(validate(Protocol::Http, "slow_start.duration_seconds", "30").is_ok());
        let e = validate(Protocol::Http, CONNECTION_TERMINATION, "true").unwrap_err();
        assert!(e.message.contains(CONNECTION_TERMINATION), "{e}");
        assert!(validate(Protocol::Tcp, "stickiness.enabled", "maybe").is_err());
    }
}
