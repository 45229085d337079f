//! The CNI environment: CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS, CNI_PATH.

use super::error::{code, CniError};

/// A CNI verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    Status,
    Gc,
}

impl Command {
    fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            _ => return None,
        })
    }
}

/// The parsed CNI environment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Env {
    pub container_id: String,
    /// CNI_NETNS; empty when the runtime sent none (allowed on DEL).
    pub netns: String,
    pub ifname: String,
    /// K8S_POD_NAMESPACE from CNI_ARGS.
    pub pod_namespace: String,
    /// K8S_POD_NAME from CNI_ARGS.
    pub pod_name: String,
}

/// Reads CNI_COMMAND from `get` (a lookup such as `std::env::var`).
///
/// Errors: code 4 when CNI_COMMAND is missing or not a CNI verb.
pub fn command(get: &dyn Fn(&str) -> Option<String>) -> Result<Command, CniError> {
    let raw = get("CNI_COMMAND").ok_or_else(|| {
        CniError::new(
            code::INVALID_ENV,
            "CNI_COMMAND is not set",
            "vpcnet-cni is a CNI plugin: run it from a container runtime, which sets CNI_COMMAND to ADD, DEL, CHECK, VERSION, STATUS or GC",
        )
    })?;
    Command::parse(&raw).ok_or_else(|| {
        CniError::new(
            code::INVALID_ENV,
            format!("unknown CNI_COMMAND {raw:?}"),
            "use ADD, DEL, CHECK, VERSION, STATUS or GC",
        )
    })
}

/// Reads the per-container variables for `cmd`.
///
/// Errors (code 4): CNI_CONTAINERID or CNI_IFNAME missing (ADD, DEL, CHECK), CNI_NETNS missing
/// (ADD, CHECK), CNI_ARGS not `KEY=VALUE;...`.
pub fn env(cmd: Command, get: &dyn Fn(&str) -> Option<String>) -> Result<Env, CniError> {
    let need = |k: &str| -> Result<String, CniError> {
        match get(k) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(CniError::new(
                code::INVALID_ENV,
                format!("{k} is not set"),
                format!("the container runtime must set {k} for {cmd:?}"),
            )),
        }
    };
    let mut e = Env::default();
    if matches!(cmd, Command::Add | Command::Del | Command::Check) {
        e.container_id = need("CNI_CONTAINERID")?;
        e.ifname = need("CNI_IFNAME")?;
        let id_ok = e
            .container_id
            .starts_with(|c: char| c.is_ascii_alphanumeric())
            && e.container_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !id_ok {
            return Err(CniError::new(
                code::INVALID_ENV,
                format!("CNI_CONTAINERID {:?} has invalid characters", e.container_id),
                "a container ID starts with a letter or digit and has only letters, digits, '_', '.', '-'",
            ));
        }
        e.netns = if cmd == Command::Del {
            get("CNI_NETNS").unwrap_or_default()
        } else {
            need("CNI_NETNS")?
        };
        if e.ifname.len() > 15 || e.ifname.contains('/') || e.ifname.contains(char::is_whitespace) {
            return Err(CniError::new(
                code::INVALID_ENV,
                format!("CNI_IFNAME {:?} is not a valid interface name", e.ifname),
                "use at most 15 characters without '/' or spaces (e.g. eth0)",
            ));
        }
    }
    for pair in get("CNI_ARGS")
        .unwrap_or_default()
        .split(';')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            CniError::new(
                code::INVALID_ENV,
                format!("CNI_ARGS entry {pair:?} is not KEY=VALUE"),
                "CNI_ARGS must be KEY=VALUE pairs separated by ';'",
            )
        })?;
        match k {
            "K8S_POD_NAMESPACE" => e.pod_namespace = v.to_string(),
            "K8S_POD_NAME" => e.pod_name = v.to_string(),
            _ => {}
        }
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn add_env_with_pod_args() {
        let get = lookup(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/var/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=nginx;K8S_POD_INFRA_CONTAINER_ID=c1"),
        ]);
        assert_eq!(command(&get).unwrap(), Command::Add);
        let e = env(Command::Add, &get).unwrap();
        assert_eq!(e.pod_namespace, "default");
        assert_eq!(e.pod_name, "nginx");
        assert_eq!(e.netns, "/var/run/netns/x");
    }

    #[test]
    fn missing_variables_are_code_4() {
        let get = lookup(&[]);
        assert_eq!(command(&get).unwrap_err().code, code::INVALID_ENV);
        let get = lookup(&[("CNI_COMMAND", "FROB")]);
        assert_eq!(command(&get).unwrap_err().code, code::INVALID_ENV);
        let get = lookup(&[("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")]);
        let e = env(Command::Add, &get).unwrap_err();
        assert_eq!(
            (e.code, e.msg.as_str()),
            (code::INVALID_ENV, "CNI_NETNS is not set")
        );
        // DEL tolerates an empty netns (containerd after the task exited).
        let get = lookup(&[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", ""),
        ]);
        assert_eq!(env(Command::Del, &get).unwrap().netns, "");
        let get = lookup(&[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/x"),
            ("CNI_ARGS", "junk"),
        ]);
        assert_eq!(env(Command::Add, &get).unwrap_err().code, code::INVALID_ENV);
        let get = lookup(&[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "a-very-long-ifname"),
            ("CNI_NETNS", "/x"),
        ]);
        assert_eq!(env(Command::Add, &get).unwrap_err().code, code::INVALID_ENV);
        let get = lookup(&[
            ("CNI_CONTAINERID", "c/1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/x"),
        ]);
        assert_eq!(env(Command::Add, &get).unwrap_err().code, code::INVALID_ENV);
        // VERSION needs nothing.
        assert!(env(Command::Version, &lookup(&[])).is_ok());
    }
}
