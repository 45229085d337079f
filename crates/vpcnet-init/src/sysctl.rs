//! The node sysctls the install step sets, as the VPC CNI's init does:
//! - `net/ipv4/conf/<primary>/rp_filter = 2` (loose): replies to pods on secondary ENIs leave by
//!   another interface than the one the request came in on, which strict mode would drop;
//! - `net/ipv4/tcp_early_demux` = 0 with `DISABLE_TCP_EARLY_DEMUX=true`, else 1 (only where the
//!   kernel has it).
//!
//! IPv6 (`ENABLE_IPv6`, `ENABLE_V6_EGRESS`: forwarding, `accept_ra`, `disable_ipv6`) is
//! refused: vpcnet has no IPv6 mode yet, and the agent refuses both settings too.

use std::io;
use std::path::{Path, PathBuf};

use crate::flags::{bool_setting, BadBool};

/// One sysctl to set: its path under `/proc/sys` and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub key: String,
    pub value: String,
    /// Skip it when the kernel does not have it (instead of failing).
    pub optional: bool,
}

/// Errors of planning or applying the sysctls.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    #[error(transparent)]
    Bool(#[from] BadBool),
    #[error("{0}=true asks for IPv6 settings, but vpcnet has no IPv6 mode yet: remove it or set it to false (IPv6 clusters still need the VPC CNI)")]
    Ipv6(&'static str),
    #[error("interface name {0:?} is not a valid Linux interface name")]
    BadInterface(String),
    #[error("setting {path} to {value}: {source}: the init container needs a privileged security context and the host's network namespace (hostNetwork)")]
    Write {
        path: PathBuf,
        value: String,
        source: io::Error,
    },
}

/// The sysctls for `primary`, from the environment `lookup`.
pub fn plan(
    primary: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Setting>, SysctlError> {
    if primary.is_empty()
        || primary.len() > 15
        || primary.contains('/')
        || primary == "."
        || primary == ".."
        || primary.chars().any(char::is_whitespace)
    {
        return Err(SysctlError::BadInterface(primary.to_string()));
    }
    for name in ["ENABLE_IPv6", "ENABLE_V6_EGRESS"] {
        if bool_setting(lookup, name, false)? {
            return Err(SysctlError::Ipv6(name));
        }
    }
    let demux_off = bool_setting(lookup, "DISABLE_TCP_EARLY_DEMUX", false)?;
    Ok(vec![
        Setting {
            key: format!("net/ipv4/conf/{primary}/rp_filter"),
            value: "2".into(),
            optional: false,
        },
        Setting {
            key: "net/ipv4/tcp_early_demux".into(),
            value: if demux_off { "0" } else { "1" }.into(),
            optional: true,
        },
    ])
}

/// What applying one setting did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Written: the value before and the value read back after.
    Changed { before: String, after: String },
    /// Already the value.
    Unchanged,
    /// An optional key the kernel does not have.
    Absent,
}

/// Writes `s` under `proc_sys` (`/proc/sys`), reading it before and after.
pub fn apply(proc_sys: &Path, s: &Setting) -> Result<Applied, SysctlError> {
    let path = proc_sys.join(&s.key);
    let err = |e| SysctlError::Write {
        path: path.clone(),
        value: s.value.clone(),
        source: e,
    };
    let before = match std::fs::read_to_string(&path) {
        Ok(v) => v.trim().to_string(),
        Err(e) if e.kind() == io::ErrorKind::NotFound && s.optional => return Ok(Applied::Absent),
        Err(e) => return Err(err(e)),
    };
    if before == s.value {
        return Ok(Applied::Unchanged);
    }
    std::fs::write(&path, &s.value).map_err(err)?;
    let after = std::fs::read_to_string(&path)
        .map_err(err)?
        .trim()
        .to_string();
    Ok(Applied::Changed { before, after })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |n| pairs.iter().find(|p| p.0 == n).map(|p| p.1.to_string())
    }

    #[test]
    fn rp_filter_loose_on_the_primary_and_early_demux_per_the_setting() {
        let p = plan("ens5", &env(&[])).unwrap();
        assert_eq!(p[0].key, "net/ipv4/conf/ens5/rp_filter");
        assert_eq!(p[0].value, "2");
        assert_eq!(
            (p[1].key.as_str(), p[1].value.as_str()),
            ("net/ipv4/tcp_early_demux", "1")
        );
        let p = plan("ens5", &env(&[("DISABLE_TCP_EARLY_DEMUX", "true")])).unwrap();
        assert_eq!(p[1].value, "0");
    }

    #[test]
    fn ipv6_and_odd_interface_names_are_refused() {
        let e = plan("eth0", &env(&[("ENABLE_IPv6", "true")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("ENABLE_IPv6=true") && e.contains("remove it"),
            "{e}"
        );
        assert!(plan("eth0", &env(&[("ENABLE_V6_EGRESS", "1")])).is_err());
        assert!(plan("eth0", &env(&[("ENABLE_IPv6", "false")])).is_ok());
        for bad in ["", "../all", "a b", "x234567890123456"] {
            assert!(
                matches!(plan(bad, &env(&[])), Err(SysctlError::BadInterface(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn apply_writes_reads_back_and_skips_an_absent_optional_key() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("net/ipv4/conf/eth0")).unwrap();
        std::fs::write(d.path().join("net/ipv4/conf/eth0/rp_filter"), "1\n").unwrap();
        let p = plan("eth0", &env(&[])).unwrap();
        assert_eq!(
            apply(d.path(), &p[0]).unwrap(),
            Applied::Changed {
                before: "1".into(),
                after: "2".into()
            }
        );
        assert_eq!(apply(d.path(), &p[0]).unwrap(), Applied::Unchanged);
        assert_eq!(apply(d.path(), &p[1]).unwrap(), Applied::Absent);
        let missing = plan("eth9", &env(&[])).unwrap();
        let e = apply(d.path(), &missing[0]).unwrap_err().to_string();
        assert!(e.contains("eth9/rp_filter"), "{e}");
    }
}
