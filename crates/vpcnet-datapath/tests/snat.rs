//! Kernel test of the node firewall (SNAT + connmark), inside a namespace it creates (root).

mod common;

use std::net::Ipv4Addr;

use common::{run, TestNetns};
use vpcnet_datapath::firewall::{self, FirewallSpec, RandomizeSnat};
use vpcnet_datapath::netns;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn spec() -> FirewallSpec {
    FirewallSpec {
        primary_ip: Ipv4Addr::new(10, 0, 1, 230),
        primary_interface: "eth0".into(),
        vpc_cidrs: vec!["10.0.0.0/16".parse().unwrap()],
        exclude_snat_cidrs: vec!["192.168.0.0/16".parse().unwrap()],
        randomize_snat: RandomizeSnat::Prng,
        external_snat: false,
        node_port_support: true,
        veth_prefix: "eni".into(),
    }
}

fn in_ns(ns: &TestNetns, args: &[&str]) -> String {
    let mut full = vec!["ip", "netns", "exec", &ns.name];
    full.extend_from_slice(args);
    run(&full)
}

fn table(ns: &TestNetns) -> Option<String> {
    let out = std::process::Command::new("ip")
        .args([
            "netns", "exec", &ns.name, "nft", "list", "table", "ip", "vpcnet",
        ])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

fn connmark_rules(ns: &TestNetns) -> Vec<String> {
    ns.ip(&["-4", "rule", "show"])
        .lines()
        .filter(|l| l.contains("fwmark"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn apply_is_idempotent_and_follows_the_spec() {
    let ns = TestNetns::new();
    // A veth end stands in for the primary ENI (no dummy module on every machine).
    ns.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "peer0",
    ]);
    ns.ip(&["addr", "add", "10.0.1.230/24", "dev", "eth0"]);
    ns.ip(&["link", "set", "eth0", "up"]);
    // Something of someone else's in the same namespace: it must survive every apply.
    in_ns(&ns, &["nft", "add", "table", "ip", "other"]);
    let path = ns.path();
    rt().block_on(async {
        let fd = netns::open(&path).unwrap();
        let h = netns::connect_in(&fd, &path).unwrap();

        firewall::apply(&h, Some(&path), &spec()).await.unwrap();
        let first = table(&ns).expect("table ip vpcnet exists");
        firewall::apply(&h, Some(&path), &spec()).await.unwrap();
        let second = table(&ns).unwrap();
        assert_eq!(first, second, "a second apply changes nothing");
        for want in [
            "elements = { 10.0.0.0/16, 192.168.0.0/16 }",
            "type nat hook postrouting priority srcnat; policy accept;",
            "snat to 10.0.1.230 fully-random",
            "iifname \"eth0\" fib daddr . iif type local",
            "iifname \"eni*\" ct state new fib daddr type != local ip daddr != @snat_exempt",
            "meta mark set meta mark | 0x00000080",
        ] {
            assert!(first.contains(want), "missing {want:?} in\n{first}");
        }
        assert_eq!(
            connmark_rules(&ns),
            ["1024: from all fwmark 0x80/0x80 lookup main"],
            "exactly one fwmark rule"
        );
        let rp = in_ns(&ns, &["cat", "/proc/sys/net/ipv4/conf/eth0/rp_filter"]);
        assert_eq!(rp.trim(), "2", "loose rp_filter on eth0");

        // Node port connmark: a connection arriving on eth0 for eth0's address is marked.
        let peer = TestNetns::new();
        ns.ip(&["link", "set", "peer0", "netns", &peer.name]);
        peer.ip(&["addr", "add", "10.0.1.1/24", "dev", "peer0"]);
        peer.ip(&["link", "set", "peer0", "up"]);
        let mangle = || {
            in_ns(
                &ns,
                &["nft", "list", "chain", "ip", "vpcnet", "mangle-prerouting"],
            )
        };
        assert!(mangle().contains("counter packets 0 "), "{}", mangle());
        run(&[
            "ip",
            "netns",
            "exec",
            &peer.name,
            "busybox",
            "ping",
            "-c",
            "1",
            "-W",
            "2",
            "10.0.1.230",
        ]);
        assert!(
            !mangle().contains("counter packets 0 "),
            "not marked: {}",
            mangle()
        );

        // Drift: someone deletes our chain and the rule; apply repairs both.
        in_ns(
            &ns,
            &["nft", "delete", "chain", "ip", "vpcnet", "postrouting"],
        );
        ns.ip(&["rule", "del", "priority", "1024"]);
        firewall::apply(&h, Some(&path), &spec()).await.unwrap();
        assert_eq!(table(&ns).unwrap(), first, "repaired");
        assert_eq!(connmark_rules(&ns).len(), 1);

        // External SNAT: no SNAT, no outbound connmark; node port connmark stays.
        let ext = FirewallSpec {
            external_snat: true,
            randomize_snat: RandomizeSnat::Hashrandom,
            ..spec()
        };
        firewall::apply(&h, Some(&path), &ext).await.unwrap();
        let t = table(&ns).unwrap();
        assert!(!t.contains("snat to"), "{t}");
        assert!(!t.contains("ct state new"), "{t}");
        assert!(t.contains("fib daddr . iif type local"), "{t}");
        assert_eq!(connmark_rules(&ns).len(), 1);

        // Nothing left to mark: the table and the rule go.
        let off = FirewallSpec {
            node_port_support: false,
            ..ext
        };
        firewall::apply(&h, Some(&path), &off).await.unwrap();
        assert!(table(&ns).is_none(), "table removed");
        assert!(connmark_rules(&ns).is_empty(), "fwmark rule removed");

        firewall::apply(&h, Some(&path), &spec()).await.unwrap();
        firewall::remove(&h, Some(&path)).await.unwrap();
        firewall::remove(&h, Some(&path)).await.unwrap();
        assert!(table(&ns).is_none() && connmark_rules(&ns).is_empty());
    });
    let other = in_ns(&ns, &["nft", "list", "tables"]);
    assert!(
        other.contains("table ip other"),
        "foreign table kept: {other}"
    );
}

#[test]
fn a_missing_primary_interface_is_an_error_naming_its_sysctl() {
    let ns = TestNetns::new();
    let path = ns.path();
    rt().block_on(async {
        let fd = netns::open(&path).unwrap();
        let h = netns::connect_in(&fd, &path).unwrap();
        // No eth0 in this namespace: the ruleset applies (interface names are matched by
        // name), but the rp_filter sysctl of a missing interface cannot be written.
        let e = firewall::apply(&h, Some(&path), &spec())
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("rp_filter"), "{e}");
    });
}
