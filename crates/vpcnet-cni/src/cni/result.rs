//! The ADD result (spec section "Success") and reading a `prevResult`.

use std::net::Ipv4Addr;

use serde_json::{json, Value};

use super::version;
use crate::conflist::FURTHER_INTERFACE_PREFIX;
use vpcnet_datapath::pod::pod_gateway;
use vpcnet_datapath::POD_GATEWAY;

/// What ADD built, for the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResult {
    pub host_veth: String,
    pub host_mac: String,
    pub pod_ifname: String,
    pub pod_mac: String,
    /// CNI_NETNS path (the `sandbox` of the pod interface).
    pub netns: String,
    pub ip: Ipv4Addr,
    /// Pod MTU in bytes (reported on interfaces from 1.1.0 on).
    pub mtu: u32,
}

/// Renders the result for `cni_version`: interfaces `[host veth, pod interface (sandbox)]`, one
/// IPv4 `<ip>/32` on the pod interface with gateway 169.254.1.1, a default route via
/// 169.254.1.1, empty dns. Versions before 1.0.0 add `"version": "4"` to the IP. When a
/// `prev` result exists (we were chained after another plugin) its interfaces, ips, routes and
/// dns are kept and ours are appended.
pub fn render(r: &PodResult, cni_version: &str, prev: Option<&Value>) -> Value {
    render_all(std::slice::from_ref(r), cni_version, prev)
}

/// [`render`] of a multi-homed pod: `pods[0]` is CNI_IFNAME, `pods[n]` its further interface n
/// (`mNicIf<n>`), each with its host veth, its address and its gateway
/// ([`vpcnet_datapath::pod::pod_gateway`]); the default route is CNI_IFNAME's alone.
pub fn render_all(pods: &[PodResult], cni_version: &str, prev: Option<&Value>) -> Value {
    let mut interfaces: Vec<Value> = prev
        .and_then(|p| p.get("interfaces")?.as_array().cloned())
        .unwrap_or_default();
    let mut ips: Vec<Value> = prev
        .and_then(|p| p.get("ips")?.as_array().cloned())
        .unwrap_or_default();
    let mut routes: Vec<Value> = prev
        .and_then(|p| p.get("routes")?.as_array().cloned())
        .unwrap_or_default();
    let dns = prev
        .and_then(|p| p.get("dns").cloned())
        .unwrap_or_else(|| json!({}));
    let with_mtu = version::has_status_and_gc(cni_version);
    for (n, r) in pods.iter().enumerate() {
        let mut host = json!({ "name": r.host_veth, "mac": r.host_mac });
        let mut pod = json!({ "name": r.pod_ifname, "mac": r.pod_mac, "sandbox": r.netns });
        if with_mtu {
            host["mtu"] = json!(r.mtu);
            pod["mtu"] = json!(r.mtu);
        }
        interfaces.push(host);
        interfaces.push(pod);
        let mut ip = json!({
            "address": format!("{}/32", r.ip),
            "gateway": pod_gateway(n as u32).to_string(),
            "interface": interfaces.len() - 1,
        });
        if version::ips_have_version_field(cni_version) {
            ip["version"] = json!("4");
        }
        ips.push(ip);
    }
    routes.push(json!({ "dst": "0.0.0.0/0", "gw": POD_GATEWAY.to_string() }));
    json!({
        "cniVersion": cni_version,
        "interfaces": interfaces,
        "ips": ips,
        "routes": routes,
        "dns": dns,
    })
}

/// What a `prevResult` says about our pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prev {
    /// The pod IPv4: from the `ips` entry on the interface named CNI_IFNAME in a sandbox,
    /// else the first IPv4 entry.
    pub ip: Option<Ipv4Addr>,
    /// Whether the result lists an interface named CNI_IFNAME with a sandbox.
    pub has_pod_interface: bool,
}

/// Reads our pod's IP out of a `prevResult` (any supported version's shape).
pub fn read_prev(prev: &Value, ifname: &str) -> Prev {
    let interfaces = prev.get("interfaces").and_then(Value::as_array);
    let pod_index = interfaces.and_then(|ifs| {
        ifs.iter().position(|i| {
            i.get("name").and_then(Value::as_str) == Some(ifname)
                && i.get("sandbox")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
        })
    });
    let v4 = |ip: &Value| -> Option<Ipv4Addr> {
        let addr = ip.get("address")?.as_str()?;
        addr.split('/').next()?.parse().ok()
    };
    let ips: Vec<&Value> = prev
        .get("ips")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let on_pod = pod_index.and_then(|pi| {
        ips.iter()
            .find(|ip| ip.get("interface").and_then(Value::as_u64) == Some(pi as u64))
            .and_then(|ip| v4(ip))
    });
    Prev {
        ip: on_pod.or_else(|| ips.iter().find_map(|ip| v4(ip))),
        has_pod_interface: pod_index.is_some(),
    }
}

/// The further interfaces of a multi-homed pod a `prevResult` lists (`mNicIf1`, `mNicIf2`,
/// ... in the sandbox), each with its index and address.
pub fn read_prev_further(prev: &Value) -> Vec<(u32, Ipv4Addr)> {
    (1..)
        .map(|n| {
            (
                n,
                read_prev_exact(prev, &format!("{FURTHER_INTERFACE_PREFIX}{n}")),
            )
        })
        .take_while(|(_, ip)| ip.is_some())
        .filter_map(|(n, ip)| ip.map(|ip| (n, ip)))
        .collect()
}

/// The address on the sandbox interface named `ifname`, only when the result lists it.
fn read_prev_exact(prev: &Value, ifname: &str) -> Option<Ipv4Addr> {
    let p = read_prev(prev, ifname);
    p.has_pod_interface.then_some(p.ip).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PodResult {
        PodResult {
            host_veth: "enic440f455693".into(),
            host_mac: "02:00:00:00:00:01".into(),
            pod_ifname: "eth0".into(),
            pod_mac: "06:00:00:00:00:02".into(),
            netns: "/var/run/netns/p".into(),
            ip: Ipv4Addr::new(10, 0, 1, 5),
            mtu: 9001,
        }
    }

    #[test]
    fn v1_result_shape() {
        let v = render(&sample(), "1.0.0", None);
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["interfaces"][0]["name"], "enic440f455693");
        assert!(v["interfaces"][0].get("sandbox").is_none());
        assert_eq!(v["interfaces"][1]["sandbox"], "/var/run/netns/p");
        assert_eq!(v["ips"][0]["address"], "10.0.1.5/32");
        assert_eq!(v["ips"][0]["interface"], 1);
        assert!(v["ips"][0].get("version").is_none());
        assert!(v["interfaces"][1].get("mtu").is_none());
        assert_eq!(v["routes"][0]["gw"], "169.254.1.1");
        assert_eq!(read_prev(&v, "eth0").ip, Some(Ipv4Addr::new(10, 0, 1, 5)));
    }

    #[test]
    fn v040_has_ip_version_and_v110_has_mtu() {
        let v = render(&sample(), "0.4.0", None);
        assert_eq!(v["ips"][0]["version"], "4");
        let v = render(&sample(), "1.1.0", None);
        assert_eq!(v["interfaces"][1]["mtu"], 9001);
    }

    #[test]
    fn a_multi_homed_pod_lists_each_interface_with_its_gateway() {
        let further = PodResult {
            host_veth: "enie48ae9c2f34".into(),
            pod_ifname: "mNicIf1".into(),
            ip: Ipv4Addr::new(10, 1, 0, 5),
            ..sample()
        };
        let v = render_all(&[sample(), further], "1.0.0", None);
        assert_eq!(v["interfaces"].as_array().unwrap().len(), 4);
        assert_eq!(v["interfaces"][3]["name"], "mNicIf1");
        assert_eq!(v["ips"][1]["address"], "10.1.0.5/32");
        assert_eq!(v["ips"][1]["gateway"], "169.254.1.2");
        assert_eq!(v["ips"][1]["interface"], 3);
        assert_eq!(v["routes"].as_array().unwrap().len(), 1);
        assert_eq!(read_prev(&v, "eth0").ip, Some(Ipv4Addr::new(10, 0, 1, 5)));
        assert_eq!(read_prev_further(&v), vec![(1, Ipv4Addr::new(10, 1, 0, 5))]);
        assert_eq!(read_prev_further(&render(&sample(), "1.0.0", None)), vec![]);
    }

    #[test]
    fn prev_result_is_kept_and_indexes_shift() {
        let prev = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "lo0", "sandbox": "/x"}],
            "ips": [{"address": "192.168.0.2/24", "interface": 0}],
            "dns": {"nameservers": ["10.0.0.2"]}
        });
        let v = render(&sample(), "1.0.0", Some(&prev));
        assert_eq!(v["interfaces"].as_array().unwrap().len(), 3);
        assert_eq!(v["ips"][1]["interface"], 2);
        assert_eq!(v["dns"]["nameservers"][0], "10.0.0.2");
        let p = read_prev(&v, "eth0");
        assert_eq!(p.ip, Some(Ipv4Addr::new(10, 0, 1, 5)));
        assert!(p.has_pod_interface);
        assert_eq!(read_prev(&json!({}), "eth0"), Prev::default());
    }
}
