//! The container runtime's own record of pod networks: libcni's result cache, which containerd
//! and CRI-O write after every successful ADD (`<dir>/results/<network>-<container>-<ifname>`,
//! JSON `cniCacheV1`) and remove after DEL. At start the agent reads it as evidence of the
//! pods that run on the node (see [`crate::recovery`]); it never writes it.

use std::net::Ipv4Addr;
use std::path::Path;

use serde::Deserialize;

/// One pod network the runtime set up: the container, interface, pod and IPv4 addresses of
/// the cached result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPod {
    pub container_id: String,
    pub if_name: String,
    /// `K8S_POD_NAMESPACE` / `K8S_POD_NAME` of the cached CNI_ARGS (empty when absent).
    pub namespace: String,
    pub name: String,
    pub ips: Vec<Ipv4Addr>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "containerId")]
    container_id: String,
    #[serde(rename = "ifName")]
    if_name: String,
    #[serde(rename = "networkName")]
    network_name: String,
    #[serde(rename = "cniArgs", default)]
    cni_args: Vec<(String, String)>,
    #[serde(default)]
    result: Option<CachedResult>,
}

#[derive(Deserialize)]
struct CachedResult {
    #[serde(default)]
    ips: Vec<CachedIp>,
}

#[derive(Deserialize)]
struct CachedIp {
    address: String,
}

/// Parses one cache file; `None` unless it is an entry of `network` with an IPv4 result.
pub fn parse(text: &str, network: &str) -> Option<CachedPod> {
    let e: Entry = serde_json::from_str(text).ok()?;
    if e.network_name != network {
        return None;
    }
    let arg = |k: &str| {
        e.cni_args
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let ips: Vec<Ipv4Addr> = e
        .result?
        .ips
        .iter()
        .filter_map(|i| i.address.split('/').next()?.parse().ok())
        .collect();
    if ips.is_empty() || e.container_id.is_empty() {
        return None;
    }
    Some(CachedPod {
        namespace: arg("K8S_POD_NAMESPACE"),
        name: arg("K8S_POD_NAME"),
        container_id: e.container_id,
        if_name: e.if_name,
        ips,
    })
}

/// The pods of `network` in the cache under `dir`. A missing directory is an empty cache;
/// unreadable or foreign files are skipped (their count is returned for the log).
pub fn read(dir: &Path, network: &str) -> std::io::Result<(Vec<CachedPod>, usize)> {
    let results = dir.join("results");
    let entries = match std::fs::read_dir(&results) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let prefix = format!("{network}-");
    let (mut pods, mut skipped) = (Vec::new(), 0);
    for entry in entries {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        match std::fs::read_to_string(entry.path())
            .ok()
            .and_then(|t| parse(&t, network))
        {
            Some(p) => pods.push(p),
            None => skipped += 1,
        }
    }
    pods.sort_by(|a, b| a.container_id.cmp(&b.container_id));
    Ok((pods, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache entry as libcni writes it (trimmed config bytes).
    fn entry(network: &str, id: &str, ip: &str) -> String {
        format!(
            r#"{{"kind":"cniCacheV1","containerId":"{id}","config":"e30=","ifName":"eth0","networkName":"{network}","netns":"/var/run/netns/cni-1","cniArgs":[["K8S_POD_NAMESPACE","default"],["K8S_POD_NAME","web-1"],["K8S_POD_INFRA_CONTAINER_ID","{id}"]],"result":{{"cniVersion":"1.0.0","interfaces":[{{"name":"eth0","sandbox":"/var/run/netns/cni-1"}}],"ips":[{{"interface":0,"address":"{ip}/32"}}]}}}}"#
        )
    }

    #[test]
    fn parses_the_pod_and_its_address() {
        let p = parse(&entry("aws-cni", "abc", "10.0.1.7"), "aws-cni").unwrap();
        assert_eq!(p.container_id, "abc");
        assert_eq!(p.if_name, "eth0");
        assert_eq!(
            (p.namespace.as_str(), p.name.as_str()),
            ("default", "web-1")
        );
        assert_eq!(p.ips, vec![Ipv4Addr::new(10, 0, 1, 7)]);
    }

    #[test]
    fn other_networks_ipv6_only_and_garbage_are_no_evidence() {
        assert!(parse(&entry("bridge", "abc", "10.0.1.7"), "aws-cni").is_none());
        assert!(parse(&entry("aws-cni", "abc", "fd00::7"), "aws-cni").is_none());
        assert!(parse("{not json", "aws-cni").is_none());
        assert!(parse(
            r#"{"containerId":"a","ifName":"eth0","networkName":"aws-cni"}"#,
            "aws-cni"
        )
        .is_none());
    }

    #[test]
    fn reads_the_results_directory_and_tolerates_its_absence() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path(), "aws-cni").unwrap(), (vec![], 0));
        let r = dir.path().join("results");
        std::fs::create_dir_all(&r).unwrap();
        std::fs::write(r.join("aws-cni-b-eth0"), entry("aws-cni", "b", "10.0.1.8")).unwrap();
        std::fs::write(r.join("aws-cni-a-eth0"), entry("aws-cni", "a", "10.0.1.7")).unwrap();
        std::fs::write(r.join("aws-cni-c-eth0"), "truncated{").unwrap();
        std::fs::write(r.join("bridge-d-eth0"), entry("bridge", "d", "10.9.0.2")).unwrap();
        let (pods, skipped) = read(dir.path(), "aws-cni").unwrap();
        let ids: Vec<_> = pods.iter().map(|p| p.container_id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(skipped, 1);
    }
}
