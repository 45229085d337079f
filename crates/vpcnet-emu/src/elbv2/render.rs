//! ELBv2 responses in the awsQuery shape aws-sdk-elasticloadbalancingv2 reads
//! (`protocol_serde/shape_*.rs`): `<{Action}Response xmlns=...><{Action}Result>...</...Result>
//! <ResponseMetadata><RequestId/></ResponseMetadata>`, lists as `<member>` elements, errors as
//! `<ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>`.

use std::collections::BTreeMap;

use super::error::ElbError;
use super::health::TargetHealth;
use super::model::{HealthCheckPort, LbState, Listener, LoadBalancer, TargetGroup};
use crate::model::Tags;
use crate::query::render::Clock;
use crate::query::xml::Xml;

/// ELBv2's XML namespace for API version 2015-12-01.
pub const XMLNS: &str = "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/";

/// A success document for `action`; `result` writes the members of `<{action}Result>`.
pub fn respond(action: &str, request_id: &str, result: impl FnOnce(&mut Xml)) -> String {
    let root = format!("{action}Response");
    let inner = format!("{action}Result");
    let mut x = Xml::response_in(&root, XMLNS);
    x.open(&inner);
    result(&mut x);
    x.close(&inner)
        .open("ResponseMetadata")
        .leaf("RequestId", request_id)
        .close("ResponseMetadata");
    x.finish(&root)
}

/// ELBv2's error document (`Type` is `Receiver` for 5xx, else `Sender`).
pub fn error_body(err: &ElbError, request_id: &str) -> String {
    let mut x = Xml::response_in("ErrorResponse", XMLNS);
    x.open("Error")
        .leaf(
            "Type",
            if err.status() >= 500 {
                "Receiver"
            } else {
                "Sender"
            },
        )
        .leaf("Code", &err.code)
        .leaf("Message", &err.message)
        .close("Error")
        .leaf("RequestId", request_id);
    x.finish("ErrorResponse")
}

/// `<tag><member>..</member>...</tag>`, each member written by `f`.
pub fn members<T>(
    x: &mut Xml,
    tag: &str,
    items: impl IntoIterator<Item = T>,
    mut f: impl FnMut(&mut Xml, T),
) {
    x.open(tag);
    for it in items {
        x.open("member");
        f(x, it);
        x.close("member");
    }
    x.close(tag);
}

/// `<tag><member>value</member>...</tag>` for a list of strings.
pub fn strings(x: &mut Xml, tag: &str, items: &[String]) {
    x.open(tag);
    for s in items {
        x.leaf("member", s);
    }
    x.close(tag);
}

pub fn tags(x: &mut Xml, t: &Tags) {
    members(x, "Tags", &t.0, |x, (k, v)| {
        x.leaf("Key", k).leaf("Value", v);
    });
}

pub fn attributes(x: &mut Xml, attrs: &BTreeMap<String, String>) {
    members(x, "Attributes", attrs, |x, (k, v)| {
        x.leaf("Key", k).leaf("Value", v);
    });
}

/// The Route 53 hosted zone of load balancers of the region (real values for us-east-1).
fn hosted_zone(lb: &LoadBalancer) -> &'static str {
    match lb.lb_type {
        super::model::LbType::Network => "Z26RNL4JYFTOTI",
        super::model::LbType::Application => "Z35SXDOTRQ7X7K",
    }
}

/// `LoadBalancer`.
pub fn load_balancer(x: &mut Xml, clock: &Clock, lb: &LoadBalancer) {
    x.leaf("LoadBalancerArn", &lb.arn)
        .leaf("DNSName", &lb.dns_name)
        .leaf("CanonicalHostedZoneId", hosted_zone(lb))
        .leaf("CreatedTime", clock.ts(lb.created))
        .leaf("LoadBalancerName", &lb.name)
        .leaf("Scheme", lb.scheme)
        .leaf("VpcId", &lb.vpc_id);
    x.open("State");
    match &lb.state {
        LbState::Provisioning => {
            x.leaf("Code", "provisioning");
        }
        LbState::Active => {
            x.leaf("Code", "active");
        }
        LbState::Failed(reason) => {
            x.leaf("Code", "failed").leaf("Reason", reason);
        }
    }
    x.close("State").leaf("Type", lb.lb_type.as_str());
    members(x, "AvailabilityZones", &lb.addresses, |x, a| {
        x.leaf("ZoneName", &a.availability_zone)
            .leaf("SubnetId", &a.subnet_id);
        members(x, "LoadBalancerAddresses", [a.ip], |x, ip| {
            x.leaf("PrivateIPv4Address", ip);
        });
    });
    strings(x, "SecurityGroups", &lb.security_groups);
    x.leaf("IpAddressType", "ipv4");
}

/// `TargetGroup`; `lb_arns` are the load balancers that forward to it.
pub fn target_group(x: &mut Xml, tg: &TargetGroup, lb_arns: &[String]) {
    let h = &tg.health;
    x.leaf("TargetGroupArn", &tg.arn)
        .leaf("TargetGroupName", &tg.name)
        .leaf("Protocol", tg.protocol.as_str())
        .leaf("Port", tg.port)
        .leaf("VpcId", &tg.vpc_id)
        .leaf("HealthCheckProtocol", h.protocol.as_str())
        .leaf("HealthCheckPort", health_check_port(h.port))
        .leaf("HealthCheckEnabled", h.enabled)
        .leaf("HealthCheckIntervalSeconds", h.interval_seconds)
        .leaf("HealthCheckTimeoutSeconds", h.timeout_seconds)
        .leaf("HealthyThresholdCount", h.healthy_threshold)
        .leaf("UnhealthyThresholdCount", h.unhealthy_threshold);
    if let Some(p) = &h.path {
        x.leaf("HealthCheckPath", p);
    }
    if let Some(m) = &h.matcher {
        x.open("Matcher").leaf("HttpCode", m).close("Matcher");
    }
    strings(x, "LoadBalancerArns", lb_arns);
    x.leaf("TargetType", tg.target_type.as_str());
    if tg.protocol.is_http() {
        x.leaf("ProtocolVersion", "HTTP1");
    }
    x.leaf("IpAddressType", "ipv4");
}

/// `HealthCheckPort` as ELBv2 writes it: `traffic-port` or the number.
pub fn health_check_port(p: HealthCheckPort) -> String {
    match p {
        HealthCheckPort::TrafficPort => "traffic-port".into(),
        HealthCheckPort::Port(n) => n.to_string(),
    }
}

/// `Listener` with its one forward `DefaultActions` member.
pub fn listener(x: &mut Xml, l: &Listener) {
    x.leaf("ListenerArn", &l.arn)
        .leaf("LoadBalancerArn", &l.lb_arn)
        .leaf("Port", l.port)
        .leaf("Protocol", l.protocol.as_str());
    members(x, "DefaultActions", [l], |x, l| {
        x.leaf("Type", "forward")
            .leaf("TargetGroupArn", &l.target_group_arn)
            .open("ForwardConfig");
        members(x, "TargetGroups", [l], |x, l| {
            x.leaf("TargetGroupArn", &l.target_group_arn)
                .leaf("Weight", 1);
        });
        x.open("TargetGroupStickinessConfig")
            .leaf("Enabled", false)
            .close("TargetGroupStickinessConfig")
            .close("ForwardConfig");
    });
}

/// One `TargetHealthDescription`.
pub struct HealthRow {
    pub id: String,
    pub port: u16,
    pub availability_zone: Option<String>,
    pub health_check_port: String,
    pub health: TargetHealth,
}

pub fn target_health(x: &mut Xml, r: &HealthRow) {
    x.open("Target").leaf("Id", &r.id).leaf("Port", r.port);
    if let Some(az) = &r.availability_zone {
        x.leaf("AvailabilityZone", az);
    }
    x.close("Target")
        .leaf("HealthCheckPort", &r.health_check_port)
        .open("TargetHealth")
        .leaf("State", r.health.state.as_str());
    if let Some(reason) = &r.health.reason {
        x.leaf("Reason", reason);
    }
    if let Some(d) = &r.health.description {
        x.leaf("Description", d);
    }
    x.close("TargetHealth");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes() {
        let ok = respond("DeleteListener", "rid", |_| {});
        assert!(ok.contains("<DeleteListenerResponse xmlns=\"http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/\"><DeleteListenerResult></DeleteListenerResult><ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></DeleteListenerResponse>"), "{ok}");
        let e = error_body(&ElbError::new("Throttling", "Rate exceeded"), "r2");
        assert!(e.contains("<Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>r2</RequestId>"), "{e}");
        let e = error_body(&ElbError::new("InternalFailure", "x"), "r3");
        assert!(e.contains("<Type>Receiver</Type>"), "{e}");
    }
}
