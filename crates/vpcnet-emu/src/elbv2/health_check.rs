//! Target-group health checks: ELBv2's defaults per protocol, the ranges of each field, and
//! the `Matcher.HttpCode` forms, for CreateTargetGroup and ModifyTargetGroup.

use super::error::{self, ElbError};
use super::model::{HealthCheck, HealthCheckPort, Protocol};

/// Health-check fields of CreateTargetGroup / ModifyTargetGroup; None keeps the default (or
/// the current value).
#[derive(Debug, Clone, Default)]
pub struct HealthCheckInput {
    pub enabled: Option<bool>,
    pub protocol: Option<Protocol>,
    /// `traffic-port` or a port number.
    pub port: Option<String>,
    pub path: Option<String>,
    pub interval_seconds: Option<u32>,
    pub timeout_seconds: Option<u32>,
    pub healthy_threshold: Option<u32>,
    pub unhealthy_threshold: Option<u32>,
    pub matcher: Option<String>,
}

fn in_range(name: &str, v: u32, lo: u32, hi: u32) -> Result<u32, ElbError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(error::validation(format!(
            "{name} '{v}' must be between {lo} and {hi}"
        )))
    }
}

/// Parse and check a `Matcher.HttpCode`: codes 200..=599, single (`200`), lists (`200,202`) or
/// ranges (`200-299`). Returns the codes it accepts.
pub fn matcher_codes(m: &str) -> Result<Vec<u16>, ElbError> {
    let bad = || {
        error::validation(format!(
            "Matcher HttpCode '{m}' is invalid: use codes from 200 to 599 like 200, 200,202 or 200-299"
        ))
    };
    let code = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (200..=599).contains(c))
            .ok_or_else(bad)
    };
    let mut out = Vec::new();
    for part in m.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (code(a)?, code(b)?);
                if a > b {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(code(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The health check of a target group of `protocol` after applying `input` over `base` (the
/// current check, or None at creation for ELBv2's defaults). Errors: `ValidationError` naming
/// the field and its range.
pub fn health_check(
    protocol: Protocol,
    base: Option<&HealthCheck>,
    input: &HealthCheckInput,
) -> Result<HealthCheck, ElbError> {
    if input.enabled == Some(false) {
        return Err(error::validation(
            "Health checks cannot be disabled for target types instance and ip",
        ));
    }
    let hc_protocol = input
        .protocol
        .or(base.map(|b| b.protocol))
        .unwrap_or(match protocol {
            Protocol::Http => Protocol::Http,
            Protocol::Https => Protocol::Https,
            _ => Protocol::Tcp,
        });
    if !matches!(
        hc_protocol,
        Protocol::Http | Protocol::Https | Protocol::Tcp
    ) {
        return Err(error::enum_value(
            "healthCheckProtocol",
            hc_protocol.as_str(),
            &["HTTP", "HTTPS", "TCP"],
        ));
    }
    if protocol.is_http() && hc_protocol == Protocol::Tcp {
        return Err(error::validation(format!(
            "Health check protocol TCP is not supported for target group protocol {}",
            protocol.as_str()
        )));
    }
    let http = hc_protocol != Protocol::Tcp;
    let port = match input.port.as_deref() {
        None => base.map(|b| b.port).unwrap_or(HealthCheckPort::TrafficPort),
        Some("traffic-port") => HealthCheckPort::TrafficPort,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => HealthCheckPort::Port(n),
            _ => {
                return Err(error::validation(format!(
                    "Health check port '{p}' must be 'traffic-port' or a port from 1 to 65535"
                )))
            }
        },
    };
    let path = if http {
        let p = input
            .path
            .clone()
            .or(base.and_then(|b| b.path.clone()))
            .unwrap_or_else(|| "/".into());
        // URI characters only (RFC 3986 unreserved, reserved and '%'), as ELBv2 checks
        let uri_char = |c: char| c.is_ascii_alphanumeric() || "-._~:/?#[]@!$&'()*+,;=%".contains(c);
        if !p.starts_with('/') || p.len() > 1024 || !p.chars().all(uri_char) {
            return Err(error::validation(format!(
                "Health check path '{p}' must start with '/', be at most 1024 characters and hold only URI characters"
            )));
        }
        Some(p)
    } else {
        if input.path.is_some() {
            return Err(error::validation(
                "A health check path cannot be set for TCP health checks",
            ));
        }
        None
    };
    let matcher = if http {
        let m = input
            .matcher
            .clone()
            .or(base.and_then(|b| b.matcher.clone()))
            .unwrap_or_else(|| if protocol.is_http() { "200" } else { "200-399" }.into());
        matcher_codes(&m)?;
        Some(m)
    } else {
        if input.matcher.is_some() {
            return Err(error::validation(
                "A matcher cannot be set for TCP health checks",
            ));
        }
        None
    };
    let default_timeout = match (protocol.is_http(), hc_protocol) {
        (true, _) => 5,
        (false, Protocol::Http) => 6,
        (false, _) => 10,
    };
    // A protocol change resets the timeout to the new protocol's default unless one is given.
    let keep = |f: fn(&HealthCheck) -> u32| base.map(f);
    let timeout = input
        .timeout_seconds
        .or(if base.map(|b| b.protocol) == Some(hc_protocol) {
            keep(|b| b.timeout_seconds)
        } else {
            None
        })
        .unwrap_or(default_timeout);
    let interval = input
        .interval_seconds
        .or(keep(|b| b.interval_seconds))
        .unwrap_or(30);
    let hc = HealthCheck {
        enabled: true,
        protocol: hc_protocol,
        port,
        path,
        interval_seconds: in_range("Health check interval", interval, 5, 300)?,
        timeout_seconds: in_range("Health check timeout", timeout, 2, 120)?,
        healthy_threshold: in_range(
            "Healthy threshold count",
            input
                .healthy_threshold
                .or(keep(|b| b.healthy_threshold))
                .unwrap_or(5),
            2,
            10,
        )?,
        unhealthy_threshold: in_range(
            "Unhealthy threshold count",
            input
                .unhealthy_threshold
                .or(keep(|b| b.unhealthy_threshold))
                .unwrap_or(2),
            2,
            10,
        )?,
        matcher,
    };
    let too_long = if http {
        hc.timeout_seconds >= hc.interval_seconds
    } else {
        hc.timeout_seconds > hc.interval_seconds
    };
    if too_long {
        return Err(error::validation(format!(
            "Health check timeout '{}' must be smaller than the interval '{}'",
            hc.timeout_seconds, hc.interval_seconds
        )));
    }
    Ok(hc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_forms() {
        assert_eq!(matcher_codes("200").unwrap(), vec![200]);
        assert_eq!(matcher_codes("200,202").unwrap(), vec![200, 202]);
        assert_eq!(
            matcher_codes("200-203,202").unwrap(),
            vec![200, 201, 202, 203]
        );
        for bad in ["", "abc", "199", "600", "300-200", "200-"] {
            assert_eq!(
                matcher_codes(bad).unwrap_err().code,
                "ValidationError",
                "{bad}"
            );
        }
    }

    #[test]
    fn health_defaults_per_protocol() {
        let none = HealthCheckInput::default();
        let http = health_check(Protocol::Http, None, &none).unwrap();
        assert_eq!(
            (http.protocol, http.interval_seconds, http.timeout_seconds),
            (Protocol::Http, 30, 5)
        );
        assert_eq!((http.healthy_threshold, http.unhealthy_threshold), (5, 2));
        assert_eq!(http.path.as_deref(), Some("/"));
        assert_eq!(http.matcher.as_deref(), Some("200"));
        let tcp = health_check(Protocol::Tcp, None, &none).unwrap();
        assert_eq!((tcp.protocol, tcp.timeout_seconds), (Protocol::Tcp, 10));
        assert_eq!((tcp.path.clone(), tcp.matcher.clone()), (None, None));
        let tcp_http = health_check(
            Protocol::Tcp,
            None,
            &HealthCheckInput {
                protocol: Some(Protocol::Http),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(tcp_http.timeout_seconds, 6);
        assert_eq!(tcp_http.matcher.as_deref(), Some("200-399"));
        // a modification keeps what it does not name
        let faster = health_check(
            Protocol::Tcp,
            Some(&tcp),
            &HealthCheckInput {
                interval_seconds: Some(10),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((faster.interval_seconds, faster.timeout_seconds), (10, 10));
    }

    #[test]
    fn health_ranges() {
        let with = |f: fn(&mut HealthCheckInput)| {
            let mut i = HealthCheckInput::default();
            f(&mut i);
            health_check(Protocol::Http, None, &i)
        };
        assert!(with(|i| i.interval_seconds = Some(4)).is_err());
        assert!(with(|i| i.interval_seconds = Some(301)).is_err());
        assert!(with(|i| i.healthy_threshold = Some(1)).is_err());
        assert!(with(|i| i.unhealthy_threshold = Some(11)).is_err());
        assert!(with(|i| i.timeout_seconds = Some(30)).is_err());
        assert!(with(|i| i.protocol = Some(Protocol::Tcp)).is_err());
        assert!(with(|i| i.enabled = Some(false)).is_err());
        assert!(with(|i| i.path = Some("nope".into())).is_err());
        assert!(with(|i| i.path = Some("/a b".into())).is_err());
        assert!(with(|i| i.path = Some("/x\nbind :1".into())).is_err());
        assert!(with(|i| i.path = Some("/healthz?full=1&x=%20".into())).is_ok());
        assert!(with(|i| i.port = Some("0".into())).is_err());
        assert!(with(|i| i.port = Some("8080".into())).is_ok());
    }
}
