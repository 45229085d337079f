//! The node's primary interface: the interface of the main table's IPv4 default route (lowest
//! metric first), read from `/proc/net/route` of the caller's network namespace.
//!
//! The VPC CNI's init asks IMDS for the primary ENI's MAC and looks for the link with that
//! address. On an EC2 node the default route of the main table goes through the primary ENI
//! (the secondary ENIs' routes live in their own tables), so the route answers the same
//! question without a call to IMDS, without the AWS SDK in this binary, and also off EC2 (the
//! lab). `--primary-interface` overrides it where a node routes differently.

/// Errors of finding the primary interface.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrimaryError {
    #[error("no IPv4 default route in the main table ({0}): the node's primary interface is unknown; give it with --primary-interface (or PRIMARY_INTERFACE)")]
    NoDefaultRoute(String),
    #[error("{path}: line {line} is not a route ({text:?})")]
    Malformed {
        path: String,
        line: usize,
        text: String,
    },
}

const RTF_UP: u32 = 0x1;

/// The interface of the default route in `/proc/net/route` text (`path` names it in errors).
pub fn default_route_interface(path: &str, text: &str) -> Result<String, PrimaryError> {
    let mut best: Option<(u32, String)> = None;
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        let malformed = || PrimaryError::Malformed {
            path: path.to_string(),
            line: i + 1,
            text: line.to_string(),
        };
        if f.len() < 8 {
            return Err(malformed());
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|_| malformed());
        let (dest, flags, mask) = (hex(f[1])?, hex(f[3])?, hex(f[7])?);
        let metric: u32 = f[6].parse().map_err(|_| malformed())?;
        if dest == 0
            && mask == 0
            && flags & RTF_UP != 0
            && best.as_ref().is_none_or(|b| metric < b.0)
        {
            best = Some((metric, f[0].to_string()));
        }
    }
    best.map(|b| b.1)
        .ok_or_else(|| PrimaryError::NoDefaultRoute(path.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

    #[test]
    fn the_default_route_with_the_lowest_metric_wins() {
        let t = format!(
            "{HEAD}ens6\t00000000\t0101000A\t0003\t0\t0\t200\t00000000\t0\t0\t0\n\
             ens5\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n\
             ens5\t00000000\t0101000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
        );
        assert_eq!(default_route_interface("r", &t).unwrap(), "ens5");
    }

    #[test]
    fn no_default_route_or_a_bad_line_is_an_error() {
        let t = format!("{HEAD}eth0\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n");
        let e = default_route_interface("/proc/net/route", &t).unwrap_err();
        assert!(e.to_string().contains("--primary-interface"), "{e}");
        let bad = format!("{HEAD}eth0\tzz\n");
        assert!(matches!(
            default_route_interface("r", &bad),
            Err(PrimaryError::Malformed { line: 2, .. })
        ));
    }
}
