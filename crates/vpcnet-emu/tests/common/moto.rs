//! The moto server (PyPI `moto[server]`, installed by scripts/install-deps.sh), an independent
//! AWS emulator the wire cross-checks compare vpcnet-emu with. Never skipped: a missing moto is
//! a test failure naming the fix.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the moto server when the test ends, pass or fail.
pub struct Moto {
    child: Child,
    pub endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_moto() -> Moto {
    let check = Command::new("python3")
        .args(["-c", "import moto.server"])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "moto is not installed (python3 -c 'import moto.server' failed): run scripts/install-deps.sh \
             or `python3 -m pip install 'moto[server]'`; this cross-check does not skip"
        ),
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("python3")
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start python3 -m moto.server");
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "moto server did not listen on port {port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    moto
}

/// Observations of one run, as (step.field, normalized value).
pub type Trace = Vec<(String, String)>;

/// Panics listing every field where the two runs differ; `at_least` guards against a trace
/// that is trivially short.
pub fn assert_same_trace(moto: &Trace, emu: &Trace, at_least: usize) {
    assert_eq!(moto.len(), emu.len(), "moto: {moto:#?}\nemu: {emu:#?}");
    let diffs: Vec<String> = moto
        .iter()
        .zip(emu)
        .filter(|(m, e)| m != e)
        .map(|(m, e)| format!("{}: moto={:?} emu={:?}", m.0, m.1, e.1))
        .collect();
    assert!(
        diffs.is_empty(),
        "wire results differ:\n{}",
        diffs.join("\n")
    );
    assert!(emu.len() >= at_least, "only {} observations", emu.len());
}

/// A VPC 10.0.0.0/16 with subnet `subnet_cidr` in us-east-1a, made in moto through EC2:
/// (VPC ID, subnet ID).
pub async fn vpc_with_subnet(ec2: &aws_sdk_ec2::Client, subnet_cidr: &str) -> (String, String) {
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.0.0.0/16")
        .send()
        .await
        .expect("moto CreateVpc");
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
    let s = ec2
        .create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block(subnet_cidr)
        .availability_zone("us-east-1a")
        .send()
        .await
        .expect("moto CreateSubnet");
    (vpc_id, s.subnet().unwrap().subnet_id().unwrap().to_string())
}

/// DeleteNetworkInterface `eni_id`, then describe it by ID: the error code (EC2 and moto
/// answer `InvalidNetworkInterfaceID.NotFound`) or `ok:<count>`.
pub async fn delete_and_describe(ec2: &aws_sdk_ec2::Client, eni_id: &str) -> String {
    ec2.delete_network_interface()
        .network_interface_id(eni_id)
        .send()
        .await
        .expect("DeleteNetworkInterface");
    match ec2
        .describe_network_interfaces()
        .network_interface_ids(eni_id)
        .send()
        .await
    {
        Ok(r) => format!("ok:{}", r.network_interfaces().len()),
        Err(e) => super::code(&e),
    }
}
