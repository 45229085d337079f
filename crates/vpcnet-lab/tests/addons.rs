//! EKS's default add-ons in the lab: kube-proxy as a DaemonSet and CoreDNS as a Deployment
//! behind the `kube-dns` Service, from images the lab builds from the pinned kube-proxy
//! (scripts/build-k8s.sh) and CoreDNS (scripts/build-coredns.sh). Needs root, the workspace
//! binaries, the Kubernetes binaries and CoreDNS; a missing one fails the test naming the
//! script that builds it (scripts/test.sh provides them all).
//!
//! Real processes and real time: the lab's own wall clock waits are what is measured.
#![allow(clippy::disallowed_methods)]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use vpcnet_lab::kube::addons::{coredns, images, kube_proxy, KubeProxyMode};
use vpcnet_lab::kube::bins;
use vpcnet_lab::kube::workload::{httpd_manifest, Placement};
use vpcnet_lab::lab::Lab;

mod common;
use common::*;

/// The CoreDNS build, or a failure naming the script that makes it.
fn coredns_dir() -> std::path::PathBuf {
    bins::locate_coredns(None).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Both add-on images, built twice from the real binaries: the same digests. Prints each
/// image's digest and size (docs/lab.md quotes them).
#[test]
fn addon_images_from_the_pinned_binaries_are_reproducible() {
    let k8s = bins::locate(None).unwrap_or_else(|e| panic!("{e:#}"));
    let src = images::Sources {
        kube_proxy: k8s.join("kube-proxy"),
        coredns: coredns_dir().join("coredns"),
        host_root: "/".into(),
        arch: vpcnet_image::images::host_arch().into(),
    };
    let dir = tempfile::tempdir().unwrap();
    for (name, build) in [
        (
            "kube-proxy",
            images::kube_proxy as fn(&images::Sources) -> anyhow::Result<_>,
        ),
        ("coredns", images::coredns),
    ] {
        let a = images::write(&build(&src).unwrap(), &dir.path().join("a.tar")).unwrap();
        let b = images::write(&build(&src).unwrap(), &dir.path().join("b.tar")).unwrap();
        assert_eq!(a.digest, b.digest, "{name}: two builds, two digests");
        assert_eq!(
            std::fs::read(&a.path).unwrap(),
            std::fs::read(&b.path).unwrap(),
            "{name}: archives differ"
        );
        let archive = std::fs::metadata(&a.path).unwrap().len();
        eprintln!(
            "{name}: {} digest {} archive {archive} bytes, layer {} bytes",
            a.reference, a.digest, a.layer_size
        );
    }
}

/// The address CoreDNS answered for `name` in busybox `nslookup` output, and the server that
/// answered (the `Server:` line).
fn parse_nslookup(out: &str) -> (Option<String>, Option<Ipv4Addr>) {
    let server = out
        .lines()
        .find_map(|l| l.strip_prefix("Server:"))
        .map(|s| s.trim().to_string());
    let mut after_name = false;
    let mut addr = None;
    for l in out.lines() {
        if l.starts_with("Name:") {
            after_name = true;
        } else if after_name {
            if let Some(a) = l.strip_prefix("Address:") {
                addr = a.trim().parse().ok();
                break;
            }
        }
    }
    (server, addr)
}

/// 2 nodes with kube-proxy's DaemonSet and CoreDNS: kube-proxy pods started by kubelet on both
/// nodes (no kube-proxy lab process); CoreDNS Ready with VPC addresses of their nodes' ENIs; a
/// busybox pod resolves a Service's name through `kube-dns` (CoreDNS answers its clusterIP)
/// and reaches the Service's backend through the DaemonSet kube-proxy's rules.
#[test]
fn kube_proxy_daemonset_and_coredns_serve_names_and_services() {
    let coredns_bins = coredns_dir();
    let t0 = Instant::now();
    with_kube_lab(
        "addons",
        |o| {
            o.nodes = 2;
            o.kube_proxy_mode = KubeProxyMode::DaemonSet;
            o.coredns = true;
            o.coredns_bin_dir = Some(coredns_bins);
        },
        |lab| {
            eprintln!("lab up with the add-ons: {:?}", t0.elapsed());
            let state = lab.state().unwrap();
            assert!(
                !state
                    .processes
                    .iter()
                    .any(|p| p.role.starts_with("kube-proxy")),
                "no kube-proxy lab process in DaemonSet mode"
            );
            // kube-proxy: one pod per node, from the DaemonSet, Running, under its own account.
            let kp = lab
                .addons()
                .wait_kube_proxy(Duration::from_secs(60))
                .unwrap();
            let mut kp_nodes: Vec<&str> = kp.iter().map(|p| p.node.as_str()).collect();
            kp_nodes.sort();
            let mut want: Vec<&str> = state.nodes.iter().map(|n| n.k8s_name.as_str()).collect();
            want.sort();
            assert_eq!(kp_nodes, want, "a kube-proxy pod on every node");
            let k = lab.kube().kubectl().unwrap();
            let pod = k
                .json(&["get", "pod", "-n", "kube-system", &kp[0].name])
                .unwrap();
            assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
            assert_eq!(pod["spec"]["serviceAccountName"], kube_proxy::NAME);
            assert_eq!(
                pod["spec"]["containers"][0]["image"],
                images::KUBE_PROXY_REF
            );
            assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);

            // CoreDNS: two Ready pods with addresses of their nodes' ENIs.
            let dns = lab.addons().wait_coredns(Duration::from_secs(60)).unwrap();
            for p in &dns {
                let ip = p.ip.unwrap_or_else(|| panic!("{} has no IP", p.name));
                let node = state
                    .nodes
                    .iter()
                    .find(|n| n.k8s_name == p.node)
                    .unwrap_or_else(|| panic!("{} on unknown node {}", p.name, p.node));
                let enis = describe_node_enis(lab, node);
                assert!(
                    eni_of(&enis, ip).is_some(),
                    "CoreDNS pod {} ({ip}) is not on an ENI of {}: {enis:?}",
                    p.name,
                    node.name
                );
            }
            let dns_ip = coredns::cluster_dns_ip().unwrap();
            let svc = k
                .json(&["get", "service", "-n", "kube-system", coredns::SERVICE])
                .unwrap();
            assert_eq!(svc["spec"]["clusterIP"], dns_ip.to_string());

            // A backend and its Service; a client on the other node.
            k.apply(&httpd_manifest(
                "web",
                1,
                &Placement {
                    only_node: Some("n1".into()),
                    ..Default::default()
                },
            ))
            .unwrap();
            lab.workloads()
                .wait_pods_ready("app=web", 1, Duration::from_secs(120))
                .unwrap();
            let web_ip = lab.workloads().service_ip("web").unwrap();
            let n2 = state.node("n2").unwrap();
            let mut client = sleep_pod_json("client", &n2.k8s_name);
            client["spec"]["dnsPolicy"] = "ClusterFirst".into();
            create_pod_retrying(&k, "client", &client.to_string());
            running_pod_ip(&k, "client", Duration::from_secs(120));

            // kubelet pointed the pod at kube-dns.
            let conf = lab
                .workloads()
                .pod_exec("client", &["cat", "/etc/resolv.conf"])
                .unwrap();
            let conf = String::from_utf8_lossy(&conf.stdout).into_owned();
            assert!(
                conf.contains(&format!("nameserver {dns_ip}")),
                "the pod's resolv.conf names kube-dns {dns_ip}: {conf}"
            );

            // The Service's name through kube-dns (kube-proxy → a CoreDNS pod).
            let name = "web.default.svc.cluster.local";
            let t = Instant::now();
            let mut last = String::new();
            let mut answer = None;
            while t.elapsed() < Duration::from_secs(60) {
                let out = lab
                    .workloads()
                    .pod_exec("client", &["nslookup", name])
                    .unwrap();
                last = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                if let (Some(server), Some(addr)) = parse_nslookup(&last) {
                    answer = Some((server, addr));
                    break;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            let (server, addr) =
                answer.unwrap_or_else(|| panic!("no answer for {name} in 60 s: {last}"));
            eprintln!("{name} → {addr} from {server} after {:?}", t.elapsed());
            assert_eq!(server, dns_ip.to_string(), "answered by kube-dns: {last}");
            assert_eq!(
                addr, web_ip,
                "CoreDNS answers the Service's clusterIP: {last}"
            );
            // A name outside the cluster: no answer (the Corefile forwards nothing out).
            let out = lab
                .workloads()
                .pod_exec("client", &["nslookup", "example.com."])
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert_eq!(
                parse_nslookup(&text).1,
                None,
                "nothing answered from outside: {text}"
            );
            // CoreDNS logged no error (a plugin with no next one to hand a query to would);
            // the outside name above is the one query expected to fail.
            for p in &dns {
                let logs = k.run(&["logs", "-n", "kube-system", &p.name]).unwrap();
                let errors: Vec<&str> = logs
                    .lines()
                    .filter(|l| l.contains("[ERROR]") && !l.contains("example.com"))
                    .collect();
                assert!(errors.is_empty(), "{}: {errors:?}", p.name);
            }

            // The backend through that address: kube-proxy's rules on n2.
            let body = lab
                .workloads()
                .wait_http("client", addr, 80, Duration::from_secs(30))
                .unwrap();
            assert!(body.starts_with("hello from web-"), "{body}");
        },
    );
    eprintln!("add-ons test: {:?} in all", t0.elapsed());
}

/// The DaemonSet held back: the nodes turn Ready without kube-proxy (IPAM does not wait for
/// it) and no kube-proxy pod exists; created later, its pods run on the node.
#[test]
fn kube_proxy_daemonset_can_be_held_back_and_created_later() {
    with_kube_lab(
        "addonskp",
        |o| {
            o.kube_proxy_mode = KubeProxyMode::DaemonSet;
            o.kube_proxy = false;
        },
        |lab: &Lab| {
            let k = lab.kube().kubectl().unwrap();
            let ds = k
                .output(
                    &["get", "daemonset", "-n", "kube-system", kube_proxy::NAME],
                    None,
                )
                .unwrap();
            assert!(!ds.status.success(), "no DaemonSet while held back");
            assert!(lab.addons().pods(kube_proxy::SELECTOR).unwrap().is_empty());
            // Its ConfigMaps are there already, so the DaemonSet alone starts it.
            k.run(&[
                "get",
                "configmap",
                "-n",
                "kube-system",
                kube_proxy::CONFIG_NAME,
            ])
            .unwrap();
            let t = Instant::now();
            lab.addons().start_kube_proxy().unwrap();
            let pods = lab
                .addons()
                .wait_kube_proxy(Duration::from_secs(90))
                .unwrap();
            eprintln!(
                "kube-proxy pod Running {:?} after the DaemonSet was created",
                t.elapsed()
            );
            assert_eq!(pods.len(), 1);
        },
    );
}

#[test]
fn nslookup_output_is_parsed() {
    let out = "Server:\t\t10.100.0.10\nAddress:\t10.100.0.10:53\n\nName:\tweb.default.svc.cluster.local\nAddress: 10.100.94.3\n\n";
    assert_eq!(
        parse_nslookup(out),
        (
            Some("10.100.0.10".into()),
            Some(Ipv4Addr::new(10, 100, 94, 3))
        )
    );
    assert_eq!(
        parse_nslookup("Server: 1.2.3.4\n** server can't find x: NXDOMAIN\n").1,
        None
    );
}
