//! Instance metadata (IMDS): the error type, the per-MAC ENI model and the parsing of the text
//! IMDS returns under `/latest/meta-data/`, and, behind the cargo feature `client`, the IMDSv2
//! client (`Imds`) that fetches that text. IMDS is a hint that may lag EC2; never free or
//! hand out an address on IMDS evidence alone.
//!
//! Why a feature: without it the crate is pure (no I/O, no AWS SDK), so the parsers can be
//! fuzzed (`fuzz/`, `tests/fuzz_regressions.rs`) and any crate, the CNI plugin or the pure
//! core included, can use the IMDS model without linking aws-config. The client needs
//! aws-config's IMDS client (IMDSv2 session tokens, retries, endpoint from
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT`), so only the crates that read IMDS (the agent, node
//! bootstrap, the CLI) turn `client` on. Keeping the client next to the parsers, rather than in
//! an AWS adapter, keeps each path and its parser in one place.

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
pub use client::Imds;

use std::net::Ipv4Addr;
use std::str::FromStr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

/// Prefix of every metadata path.
pub const META: &str = "/latest/meta-data/";

/// The cause of an [`ImdsError`]: any error, shared so the error stays `Clone`.
pub type Cause = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Error of an IMDS read; always names the metadata path.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ImdsError {
    /// IMDS answered 404: the item does not exist (yet) for this instance.
    #[error("IMDS {path}: not found (404)")]
    NotFound { path: String },
    /// IMDS could not be reached or answered an error (token, timeout, 5xx, ...).
    #[error("IMDS {path}: {message}; check that the instance metadata service is reachable (AWS_EC2_METADATA_SERVICE_ENDPOINT) and allows IMDSv2 with hop limit ≥ 2 for pods")]
    Request {
        path: String,
        message: String,
        /// The client's error (aws-config's, in `Imds` with feature `client`), with its
        /// chain.
        #[source]
        source: Option<Cause>,
    },
    /// The value is not what the path should hold.
    #[error("IMDS {path}: cannot parse {value:?}: {message}")]
    Parse {
        path: String,
        value: String,
        message: String,
    },
    /// The endpoint URL is malformed.
    #[error("IMDS endpoint {endpoint:?}: {message}")]
    Endpoint {
        endpoint: String,
        message: String,
        /// Why the URL was refused.
        #[source]
        source: Option<Cause>,
    },
}

impl ImdsError {
    /// The metadata path the error is about (empty for [`ImdsError::Endpoint`]).
    pub fn path(&self) -> &str {
        match self {
            ImdsError::NotFound { path }
            | ImdsError::Request { path, .. }
            | ImdsError::Parse { path, .. } => path,
            ImdsError::Endpoint { .. } => "",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, ImdsError::NotFound { .. })
    }
}

/// One ENI as IMDS `network/interfaces/macs/<mac>/` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImdsInterface {
    /// MAC address, lower-case.
    pub mac: String,
    /// `device-number` (0 = primary ENI).
    pub device_number: u32,
    /// `network-card` (0 when IMDS does not list it).
    pub network_card: u32,
    /// `interface-id` (`eni-...`).
    pub interface_id: String,
    pub subnet_id: String,
    /// `subnet-ipv4-cidr-block`.
    pub subnet_cidr: Ipv4Net,
    pub vpc_id: String,
    /// `vpc-ipv4-cidr-blocks` (the primary CIDR first).
    pub vpc_cidrs: Vec<Ipv4Net>,
    /// `security-group-ids`.
    pub security_group_ids: Vec<String>,
    /// `local-ipv4s`: the primary address first, then the secondary ones.
    pub local_ipv4s: Vec<Ipv4Addr>,
    /// `ipv4-prefix`: delegated /28 prefixes (empty when none).
    pub ipv4_prefixes: Vec<Ipv4Net>,
}

/// The items of `network/interfaces/macs/<mac>/` that [`ImdsInterface`] is read from, in
/// the order of [`InterfaceTexts`]' fields.
pub const INTERFACE_ITEMS: [&str; 10] = [
    "device-number",
    "network-card",
    "interface-id",
    "subnet-id",
    "subnet-ipv4-cidr-block",
    "vpc-id",
    "vpc-ipv4-cidr-blocks",
    "security-group-ids",
    "local-ipv4s",
    "ipv4-prefix",
];

/// The metadata path (below [`META`]) of item `leaf` of the ENI with MAC `mac`.
pub fn interface_path(mac: &str, leaf: &str) -> String {
    format!("network/interfaces/macs/{mac}/{leaf}")
}

/// IMDS's answers for one ENI's items, as text (`None`: the item answered 404, which only
/// the optional items may).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceTexts {
    pub device_number: String,
    /// Optional: instances with one network card may not list it.
    pub network_card: Option<String>,
    pub interface_id: String,
    pub subnet_id: String,
    pub subnet_cidr: String,
    pub vpc_id: String,
    pub vpc_cidrs: String,
    /// Optional: one ID per line.
    pub security_group_ids: Option<String>,
    /// Optional: one address per line.
    pub local_ipv4s: Option<String>,
    /// Optional: one /28 per line; 404 when the ENI has none.
    pub ipv4_prefixes: Option<String>,
}

/// Parses one value read at `path` (relative to [`META`]), surrounding whitespace ignored.
///
/// Errors: [`ImdsError::Parse`] naming the full path and the value.
pub fn parse_value<T: FromStr>(path: &str, value: &str) -> Result<T, ImdsError>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ImdsError::Parse {
        path: format!("{META}{path}"),
        value: value.to_string(),
        message: e.to_string(),
    })
}

/// The non-empty lines of a list answer, trimmed.
pub fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Each non-empty line of a list answer read at `path`, parsed.
///
/// Errors: [`ImdsError::Parse`] for the first line that does not parse.
pub fn parse_lines<T: FromStr>(path: &str, text: &str) -> Result<Vec<T>, ImdsError>
where
    T::Err: std::fmt::Display,
{
    lines(text).iter().map(|l| parse_value(path, l)).collect()
}

/// The MACs listed by `network/interfaces/macs/` (one `<mac>/` per line), lower-case, in
/// IMDS order.
pub fn parse_macs(text: &str) -> Vec<String> {
    lines(text)
        .into_iter()
        .map(|l| l.trim_end_matches('/').to_ascii_lowercase())
        .collect()
}

/// The ENI with MAC `mac` from IMDS's answers for its items.
///
/// Errors: [`ImdsError::Parse`] naming the item whose text does not parse (device and card
/// numbers as `u32`, CIDRs as IPv4 networks, addresses as IPv4).
pub fn parse_interface(mac: &str, t: &InterfaceTexts) -> Result<ImdsInterface, ImdsError> {
    let p = |leaf: &str| interface_path(mac, leaf);
    let opt_lines = |s: &Option<String>| s.as_deref().unwrap_or_default().to_string();
    Ok(ImdsInterface {
        mac: mac.to_ascii_lowercase(),
        device_number: parse_value(&p("device-number"), &t.device_number)?,
        network_card: match &t.network_card {
            Some(v) => parse_value(&p("network-card"), v)?,
            None => 0,
        },
        interface_id: t.interface_id.clone(),
        subnet_id: t.subnet_id.clone(),
        subnet_cidr: parse_value(&p("subnet-ipv4-cidr-block"), &t.subnet_cidr)?,
        vpc_id: t.vpc_id.clone(),
        vpc_cidrs: parse_lines(&p("vpc-ipv4-cidr-blocks"), &t.vpc_cidrs)?,
        security_group_ids: lines(&opt_lines(&t.security_group_ids)),
        local_ipv4s: parse_lines(&p("local-ipv4s"), &opt_lines(&t.local_ipv4s))?,
        ipv4_prefixes: parse_lines(&p("ipv4-prefix"), &opt_lines(&t.ipv4_prefixes))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_name_path_and_value() {
        let e = parse_value::<Ipv4Addr>("local-ipv4", "10.0.0.999").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("/latest/meta-data/local-ipv4") && s.contains("10.0.0.999"),
            "{s}"
        );
        assert_eq!(e.path(), "/latest/meta-data/local-ipv4");
        assert_eq!(parse_value::<u32>("x", " 2 ").unwrap(), 2);
    }

    fn texts() -> InterfaceTexts {
        InterfaceTexts {
            device_number: "1".into(),
            network_card: None,
            interface_id: "eni-1".into(),
            subnet_id: "subnet-1".into(),
            subnet_cidr: "10.0.1.0/24".into(),
            vpc_id: "vpc-1".into(),
            vpc_cidrs: "10.0.0.0/16\n100.64.0.0/16\n".into(),
            security_group_ids: Some("sg-1\nsg-2".into()),
            local_ipv4s: Some("10.0.1.5\n10.0.1.6".into()),
            ipv4_prefixes: None,
        }
    }

    #[test]
    fn interface_from_item_texts() {
        let i = parse_interface("0A:BB:CC:DD:EE:FF", &texts()).unwrap();
        assert_eq!(i.mac, "0a:bb:cc:dd:ee:ff");
        assert_eq!((i.device_number, i.network_card), (1, 0));
        assert_eq!(i.vpc_cidrs.len(), 2);
        assert_eq!(i.security_group_ids, ["sg-1", "sg-2"]);
        assert_eq!(i.local_ipv4s[1], Ipv4Addr::new(10, 0, 1, 6));
        assert!(i.ipv4_prefixes.is_empty());
        let mut bad = texts();
        bad.local_ipv4s = Some("10.0.1.5\nnot-an-ip".into());
        let e = parse_interface("0a:bb:cc:dd:ee:ff", &bad).unwrap_err();
        assert_eq!(
            e.path(),
            "/latest/meta-data/network/interfaces/macs/0a:bb:cc:dd:ee:ff/local-ipv4s"
        );
        assert_eq!(
            parse_macs("0A:bb:cc:dd:ee:ff/\n\n 02:00:00:00:00:01/ \n"),
            ["0a:bb:cc:dd:ee:ff", "02:00:00:00:00:01"]
        );
    }
}
