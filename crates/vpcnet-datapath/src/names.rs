//! Deterministic names and MAC addresses of a pod's veth pair.

use sha1::{Digest, Sha1};

use crate::{Error, Result};

/// Longest interface name Linux accepts (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;
/// Hex digits of the SHA-1 kept in a host veth name (the VPC CNI's 11).
pub const HASH_DIGITS: usize = 11;

/// Checks a veth prefix (`AWS_VPC_K8S_CNI_VETHPREFIX`): 1 to 4 ASCII letters, digits, `-` or `_`
/// (so prefix + 11 hex digits fits in 15 bytes), and not `eth`, `lo` or `vlan`, which would clash
/// with ENI, loopback or VLAN interfaces (the VPC CNI rejects the same).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let ok_chars = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if prefix.is_empty() || prefix.len() + HASH_DIGITS > IFNAME_MAX || !ok_chars {
        return Err(Error::Invalid(format!(
            "veth prefix {prefix:?} is invalid: use 1 to 4 letters or digits (default \"eni\")"
        )));
    }
    if matches!(prefix, "eth" | "lo" | "vlan") {
        return Err(Error::Invalid(format!(
            "veth prefix {prefix:?} is reserved for node interfaces: choose another (default \"eni\")"
        )));
    }
    Ok(())
}

fn sha1_hex(input: &str) -> String {
    hex::encode(Sha1::digest(input.as_bytes()))
}

/// Host-side veth name of a Kubernetes pod: `prefix` + the first 11 hex digits of
/// SHA-1(`"<namespace>.<name>"`), as the VPC CNI names it (e.g. `eni` + 11 digits).
pub fn host_veth_name(prefix: &str, pod_namespace: &str, pod_name: &str) -> String {
    let hash = sha1_hex(&format!("{pod_namespace}.{pod_name}"));
    format!("{prefix}{}", &hash[..HASH_DIGITS])
}

/// Host-side veth name without pod metadata (a bare runtime run): `prefix` + the first 11 hex
/// digits of SHA-1(container ID).
pub fn host_veth_name_for_container(prefix: &str, container_id: &str) -> String {
    let hash = sha1_hex(container_id);
    format!("{prefix}{}", &hash[..HASH_DIGITS])
}

/// The host veth of a pod's interface `interface` ([`crate::pod::PodSpec::interface`]): from
/// the pod's namespace and name when both are known, else from the container ID; a further
/// interface n of a multi-homed pod hashes `<name>.<n>` (or `<container ID>.<n>`), as the VPC
/// CNI names the host veths of its multi-homed pods.
pub fn pod_host_veth_name(
    prefix: &str,
    pod_namespace: &str,
    pod_name: &str,
    container_id: &str,
    interface: u32,
) -> String {
    let nth = |base: &str| {
        if interface == 0 {
            base.to_string()
        } else {
            format!("{base}.{interface}")
        }
    };
    if !pod_namespace.is_empty() && !pod_name.is_empty() {
        host_veth_name(prefix, pod_namespace, &nth(pod_name))
    } else {
        host_veth_name_for_container(prefix, &nth(container_id))
    }
}

/// Whether `name` looks like a host veth we created: `prefix` + exactly 11 lowercase hex digits.
pub fn is_host_veth_name(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == HASH_DIGITS && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// MAC addresses of a pod's veth pair `(host side, pod side)`, derived from the host veth name so
/// they are stable across ADD retries: locally administered, unicast, distinct from each other.
pub fn veth_macs(host_veth: &str) -> ([u8; 6], [u8; 6]) {
    let d = Sha1::digest(host_veth.as_bytes());
    let mut host = [0u8; 6];
    let mut pod = [0u8; 6];
    host.copy_from_slice(&d[0..6]);
    pod.copy_from_slice(&d[6..12]);
    // Locally administered (bit 1) unicast (bit 0 clear); first octets forced to differ.
    host[0] = (host[0] & 0xfc) | 0x02;
    pod[0] = (host[0] ^ 0x04) & 0xfe | 0x02;
    (host, pod)
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `aa:bb:cc:dd:ee:ff` (case-insensitive) into 6 bytes.
///
/// Errors: [`Error::Invalid`] naming the bad input.
pub fn parse_mac(s: &str) -> Result<[u8; 6]> {
    let bad = || {
        Error::Invalid(format!(
            "MAC address {s:?} is invalid: expected aa:bb:cc:dd:ee:ff"
        ))
    };
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors computed with: printf '%s' 'default.nginx' | sha1sum
    #[test]
    fn pod_veth_name_matches_sha1sum() {
        assert_eq!(host_veth_name("eni", "default", "nginx"), "enic440f455693");
        assert_eq!(
            host_veth_name("eni", "kube-system", "coredns-5d78c9869d-7xk2p"),
            "eni76bbb1eb541"
        );
    }

    // printf '%s' 'default.nginx.1' | sha1sum; printf '%s' 'abc123.2' | sha1sum
    #[test]
    fn further_interfaces_hash_the_name_with_their_index() {
        assert_eq!(
            pod_host_veth_name("eni", "default", "nginx", "abc123", 0),
            "enic440f455693"
        );
        assert_eq!(
            pod_host_veth_name("eni", "default", "nginx", "abc123", 1),
            "enie48ae9c2f34"
        );
        assert_eq!(
            pod_host_veth_name("eni", "", "", "abc123", 2),
            "enid9ccc93763f"
        );
    }

    #[test]
    fn container_veth_name_matches_sha1sum() {
        assert_eq!(
            host_veth_name_for_container("eni", "abc123"),
            "eni6367c48dd19"
        );
    }

    #[test]
    fn names_fit_ifnamsiz_and_are_recognised() {
        let n = host_veth_name("pod", "ns", "p");
        assert_eq!(n.len(), 14);
        assert!(is_host_veth_name("pod", &n));
        assert!(!is_host_veth_name("eni", &n));
        assert!(!is_host_veth_name("eni", "eni0123456789a0"));
        assert!(!is_host_veth_name("eni", "eth0"));
    }

    #[test]
    fn prefixes_are_validated() {
        assert!(validate_prefix("eni").is_ok());
        assert!(validate_prefix("abcd").is_ok());
        for bad in ["", "abcde", "eth", "lo", "vlan", "a/b", "é"] {
            assert!(validate_prefix(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn macs_are_local_unicast_and_distinct() {
        for name in ["eni1", "eni2", "enideadbeef123"] {
            let (h, p) = veth_macs(name);
            assert_ne!(h, p);
            for m in [h, p] {
                assert_eq!(m[0] & 0x01, 0, "multicast bit set in {}", format_mac(&m));
                assert_eq!(m[0] & 0x02, 0x02, "not locally administered");
            }
        }
        assert_eq!(veth_macs("eni1"), veth_macs("eni1"));
        assert_eq!(format_mac(&[0, 1, 0xab, 3, 4, 5]), "00:01:ab:03:04:05");
        assert_eq!(
            parse_mac("00:01:AB:03:04:05").unwrap(),
            [0, 1, 0xab, 3, 4, 5]
        );
        for bad in [
            "",
            "00:01:ab:03:04",
            "00:01:ab:03:04:05:06",
            "0:01:ab:03:04:05",
            "zz:01:ab:03:04:05",
        ] {
            assert!(parse_mac(bad).is_err(), "{bad:?} accepted");
        }
    }
}
