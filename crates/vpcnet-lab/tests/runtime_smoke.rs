//! Runtime plumbing without vpcnet: a node namespace plugged into the VPC fabric, its own
//! containerd, the locally built busybox image, and a container networked by Debian's reference
//! `ptp` + `host-local` plugins through `ctr run --cni`. Needs root (fails otherwise).

use std::fs;
use std::time::Duration;

use vpcnet_lab::containerd;
use vpcnet_lab::fabric::{self, EniPort};
use vpcnet_lab::image;
use vpcnet_lab::netns;
use vpcnet_lab::state::{self, LabState, NodeRecord};
use vpcnet_lab::teardown;

#[test]
fn ptp_container_reaches_its_node_and_the_vpc_router() {
    vpcnet_cni_harness::netns::require_root();
    let name = format!("smoke-{}", std::process::id());
    let prefix = format!("vs{:x}", std::process::id());
    let dir = state::lab_dir(&name);
    fs::create_dir_all(dir.join("logs")).unwrap();
    let node = NodeRecord {
        name: "n1".into(),
        netns: format!("{prefix}-n1"),
        instance_id: "i-smoke".into(),
        primary_ip: "10.0.1.10".into(),
        dir: dir.join("n1"),
        mntns: vpcnet_lab::machine::ns_dir(&dir).join("n1"),
        k8s_name: String::new(),
        cni: Default::default(),
        zone: String::new(),
    };
    LabState {
        name: name.clone(),
        prefix: prefix.clone(),
        namespaces: vec![format!("{prefix}-vpc"), node.netns.clone()],
        nodes: vec![node.clone()],
        ..Default::default()
    }
    .save(&dir)
    .unwrap();
    let result = std::panic::catch_unwind(|| run(&dir, &prefix, &node));
    let problems = teardown::teardown(&dir);
    assert!(problems.is_empty(), "teardown: {problems:?}");
    assert!(!netns::exists(&node.netns) && !netns::exists(&format!("{prefix}-vpc")));
    assert!(!dir.exists());
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

fn run(dir: &std::path::Path, prefix: &str, node: &NodeRecord) {
    let vpc = format!("{prefix}-vpc");
    let subnet = "10.0.1.0/24".parse().unwrap();
    netns::create(&vpc).unwrap();
    netns::create(&node.netns).unwrap();
    fabric::setup_vpc(&vpc, &[subnet]).unwrap();
    fabric::plug(
        &vpc,
        &EniPort {
            eni_id: "eni-00000000000000001".into(),
            mac: "02:00:00:00:00:01".into(),
            bridge: fabric::bridge_name(0),
            node_netns: node.netns.clone(),
            device_index: 0,
            network_card: 0,
        },
    )
    .unwrap();
    fabric::configure_primary(&node.netns, "10.0.1.10".parse().unwrap(), subnet).unwrap();
    fabric::route(
        &vpc,
        &fabric::bridge_name(0),
        &fabric::port_name("eni-00000000000000001"),
        &["10.0.1.10/32".parse().unwrap()],
        "02:00:00:00:00:01",
    )
    .unwrap();

    vpcnet_lab::machine::create(dir, &node.name, &node.root()).unwrap();
    for p in ["ptp", "host-local", "loopback"] {
        fs::copy(format!("/usr/lib/cni/{p}"), node.cni_bin_dir().join(p)).unwrap();
    }
    fs::write(
        node.cni_conf_dir().join("10-ptp.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"smoke","plugins":[{{"type":"ptp","ipMasq":false,
               "ipam":{{"type":"host-local","subnet":"10.99.0.0/24","dataDir":"{}",
               "routes":[{{"dst":"0.0.0.0/0"}}]}}}}]}}"#,
            node.dir.join("ipam").display()
        ),
    )
    .unwrap();
    let logs = dir.join("logs");
    let cd = containerd::start(node, &logs).unwrap();
    state::update(dir, |s| {
        s.processes.push(cd);
        Ok(())
    })
    .unwrap();
    let tarball = dir.join("busybox.tar");
    image::build(&tarball).unwrap();
    containerd::import(node, &node.ctr_namespace(), &tarball).unwrap();

    let ctr =
        containerd::run_container(node, image::IMAGE_REF, "c1", &["sleep", "600"], &logs).unwrap();
    state::update(dir, |s| {
        s.processes.push(ctr.clone());
        s.containers.push(vpcnet_lab::state::ContainerRecord {
            id: "c1".into(),
            node: "n1".into(),
        });
        Ok(())
    })
    .unwrap();
    let task = containerd::wait_running(node, "c1", &ctr, Duration::from_secs(30), &logs).unwrap();
    let ip = containerd::container_ip(task.pid).unwrap();
    assert!(ip.starts_with("10.99.0."), "{ip}");
    // Container → its node's primary IP (local on the node).
    let out = containerd::exec(
        node,
        "c1",
        "p1",
        &["ping", "-c", "1", "-W", "3", "10.0.1.10"],
    )
    .unwrap();
    assert!(
        out.status.success(),
        "ping node: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The node reaches the VPC router and IMDS address through the fabric.
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &node.netns,
            "/bin/busybox",
            "ping",
            "-c",
            "1",
            "-W",
            "3",
            "10.0.1.1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "ping gateway: {:?}", out);
    // Source/destination check: the fabric drops what eth0 sends from an address its ENI
    // does not own.
    let ping_from = |src: &str| {
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &node.netns,
                "/bin/busybox",
                "ping",
                "-c",
                "1",
                "-W",
                "1",
            ])
            .args(["-I", src, "10.0.1.1"])
            .output()
            .unwrap()
            .status
            .success()
    };
    vpcnet_lab::cmd::ip_in(&node.netns, &["addr", "add", "10.0.1.30/24", "dev", "eth0"]).unwrap();
    assert!(ping_from("10.0.1.10"), "owned source must pass");
    assert!(!ping_from("10.0.1.30"), "spoofed source must be dropped");
    let counters = vpcnet_lab::cmd::run(
        "ip",
        &[
            "netns",
            "exec",
            &vpc,
            "nft",
            "list",
            "chain",
            "bridge",
            "vpcnet",
            "source_dest_check",
        ],
    )
    .unwrap();
    assert!(!counters.contains("packets 0 "), "drop counter: {counters}");

    // DEL through ctr when the task dies: the host-local lease is released.
    containerd::kill(node, "c1").unwrap();
    assert!(
        wait(|| !ctr.alive()),
        "ctr run did not exit after the task was killed"
    );
    let leases: Vec<_> = fs::read_dir(node.dir.join("ipam/smoke"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("10.99."))
        .collect();
    assert!(
        leases.is_empty(),
        "host-local lease not released: DEL did not run"
    );
}

fn wait(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..100 {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
