//! `vpcnet inspect` against a real agent: in-process vpcnet-emu + in-process vpcnet-agent
//! (introspection on 127.0.0.1:0 and a Unix socket), pods assigned over the gRPC socket, then
//! the real `vpcnet` binary. Expected values come from the emulator's (EC2's) view and the
//! agent's replies, never from hard-coded addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;
use vpcnet_agent::AgentDeps;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use vpcnet_agent::{AgentHandle, AgentOptions};
use vpcnet_ec2::StaticCredentials;
use vpcnet_emu::{Emulator, InstanceInfo, RunInstance};
use vpcnet_proto::cni_backend_client::CniBackendClient;
use vpcnet_proto::{AddNetworkRequest, DelNetworkRequest};

struct Lab {
    emu: Emulator,
    _server: vpcnet_emu::EmuServer,
    instance: InstanceInfo,
    dir: tempfile::TempDir,
    agent: AgentHandle,
}

/// One ENI as EC2 (the emulator) sees it.
struct Ec2Eni {
    mac: String,
    primary_ip: String,
    device_index: u32,
    secondary_ips: BTreeSet<Ipv4Addr>,
}

impl Lab {
    async fn start() -> Lab {
        let emu = Emulator::new(11);
        let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        let subnet = emu
            .create_subnet(&vpc.vpc_id, "10.0.0.0/20".parse().unwrap(), "us-east-1a")
            .unwrap();
        let server = emu.spawn().await.unwrap();
        let instance = emu
            .run_instance(RunInstance {
                instance_type: "m5.large".into(),
                subnet_id: subnet,
                ..Default::default()
            })
            .await
            .unwrap();
        let imds = emu.imds_endpoint(&instance.instance_id).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let opts = AgentOptions {
            socket_path: dir.path().join("agent.sock"),
            checkpoint_path: dir.path().join("ipam.json"),
            introspection_addr: Some("127.0.0.1:0".parse().unwrap()),
            introspection_socket: Some(dir.path().join("introspection.sock")),
            metrics_addr: None,
            conflist_path: None,
            imds_endpoint: Some(imds),
            ec2_endpoint: Some(server.endpoint.clone()),
            region: Some("us-east-1".into()),
            credentials: Some(StaticCredentials {
                access_key_id: "test".into(),
                secret_access_key: "test".into(),
                session_token: None,
            }),
            cluster_name: "inspect".into(),
            env_settings: vec![
                ("WARM_ENI_TARGET".into(), "1".into()),
                ("CLUSTER_NAME".into(), "inspect".into()),
                ("IP_COOLDOWN_PERIOD".into(), "30".into()),
            ],
            reconcile_interval: Duration::from_secs(1),
            ..AgentOptions::default()
        };
        let agent = vpcnet_agent::start(opts, AgentDeps::default())
            .await
            .unwrap();
        Lab {
            emu,
            _server: server,
            instance,
            dir,
            agent,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.agent.introspection_addr.unwrap())
    }

    fn env_settings(&self) -> Vec<(String, String)> {
        vec![
            ("WARM_ENI_TARGET".into(), "1".into()),
            ("CLUSTER_NAME".into(), "inspect".into()),
            ("IP_COOLDOWN_PERIOD".into(), "30".into()),
        ]
    }

    /// ENIs attached to the instance per EC2, by ENI ID.
    fn ec2_enis(&self) -> BTreeMap<String, Ec2Eni> {
        self.emu
            .enis()
            .into_iter()
            .filter_map(|e| {
                let a = e.attachment.as_ref()?;
                (a.instance_id == self.instance.instance_id).then(|| {
                    (
                        e.eni_id.clone(),
                        Ec2Eni {
                            mac: e.mac.clone(),
                            primary_ip: e.primary_ip.to_string(),
                            device_index: a.device_index,
                            secondary_ips: e.secondary_ips.iter().copied().collect(),
                        },
                    )
                })
            })
            .collect()
    }

    /// Waits until the agent has nothing left to do and holds exactly EC2's addresses, so
    /// what `vpcnet inspect` prints can be compared with the emulator.
    async fn settle(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ec2: BTreeMap<String, BTreeSet<Ipv4Addr>> = self
                .ec2_enis()
                .into_iter()
                .map(|(id, e)| (id, e.secondary_ips))
                .collect();
            let (agent, idle) = {
                let pool = self.agent.shared.pool();
                let enis: BTreeMap<String, BTreeSet<Ipv4Addr>> = pool
                    .enis()
                    .map(|e| (e.info.id.clone(), e.ips.keys().copied().collect()))
                    .collect();
                (enis, pool.plan(vpcnet_agent::clock::now_ms()).is_empty())
            };
            if idle && agent == ec2 {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "agent did not settle: agent {agent:?} vs EC2 {ec2:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn client(path: &Path) -> CniBackendClient<Channel> {
    let path = path.to_path_buf();
    let ch = Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = path.clone();
            async move { tokio::net::UnixStream::connect(p).await.map(TokioIo::new) }
        }))
        .await
        .unwrap();
    CniBackendClient::new(ch)
}

/// A pod the test started: container ID, namespace/name and the IP the agent gave it.
struct PodRec {
    container_id: String,
    pod: String,
    ip: Ipv4Addr,
}

async fn add_pods(c: &mut CniBackendClient<Channel>, n: usize) -> Vec<PodRec> {
    let mut out = Vec::new();
    for i in 0..n {
        // Distinct in the first 12 characters (the short form the tables show).
        let container_id = format!("c0ffee{i:02}{}", "ab".repeat(28));
        let req = AddNetworkRequest {
            container_id: container_id.clone(),
            if_name: "eth0".into(),
            netns: format!("/var/run/netns/p{i}"),
            k8s_pod_namespace: "team-a".into(),
            k8s_pod_name: format!("web-{i}"),
            network_name: "aws-cni".into(),
            requires_multi_nic_attachment: false,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let reply = loop {
            match c.add_network(req.clone()).await {
                Ok(r) => break r.into_inner(),
                Err(s)
                    if s.code() == tonic::Code::Unavailable
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(s) => panic!("AddNetwork {i}: {s:?}"),
            }
        };
        out.push(PodRec {
            container_id,
            pod: format!("team-a/web-{i}"),
            ip: reply.ipv4_addr.parse().unwrap(),
        });
    }
    out
}

async fn vpcnet(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_vpcnet"))
        .args(args)
        .output()
        .await
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "vpcnet failed: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// The first line of `text` that starts with `first` (a table row keyed by its first cell).
fn line<'a>(text: &'a str, first: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row for {first} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_match_ec2_and_the_agent() {
    let lab = Lab::start().await;
    let mut c = client(&lab.dir.path().join("agent.sock")).await;
    let mut pods = add_pods(&mut c, 3).await;
    // Release one: its address cools down (30 s) and must show as cooling.
    let gone = pods.pop().unwrap();
    let del = c
        .del_network(DelNetworkRequest {
            container_id: gone.container_id.clone(),
            if_name: "eth0".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(del.released);
    lab.settle().await;
    let ec2 = lab.ec2_enis();
    assert!(ec2.len() >= 2, "the first pod should have added an ENI");
    let ep = lab.endpoint();

    // enis (the default view)
    let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep]).await);
    let total: usize = ec2.values().map(|e| e.secondary_ips.len()).sum();
    assert!(
        out.contains(&format!("ENIs {}/3", ec2.len()))
            && out.contains(&format!("IPs {} assigned / {total} total", pods.len()))
            && out.contains("1 cooling"),
        "{out}"
    );
    for (id, e) in &ec2 {
        let row = line(&out, id);
        let cells: Vec<&str> = row.split_whitespace().collect();
        let dev = e.device_index.to_string();
        for want in [dev.as_str(), &e.mac, &e.primary_ip] {
            assert!(cells.contains(&want), "{want} missing from ENI row {row:?}");
        }
        for ip in &e.secondary_ips {
            let row = line(&out, &ip.to_string());
            assert!(row.contains(id.as_str()), "{ip} not on {id}: {row:?}");
            if let Some(p) = pods.iter().find(|p| p.ip == *ip) {
                assert!(
                    row.contains("assigned")
                        && row.contains(&p.pod)
                        && row.contains(&p.container_id[..12])
                        && !row.contains(&p.container_id),
                    "{row:?}"
                );
            } else if *ip == gone.ip {
                assert!(
                    row.contains("cooling (") && row.contains("s left)"),
                    "{row:?}"
                );
            } else {
                assert!(row.contains("free"), "{row:?}");
            }
        }
    }

    // pods
    let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "pods"]).await);
    for p in &pods {
        let row = line(&out, &p.pod);
        let (eni, e) = ec2
            .iter()
            .find(|(_, e)| e.secondary_ips.contains(&p.ip))
            .expect("pod IP listed by EC2");
        let cells: Vec<&str> = row.split_whitespace().collect();
        let (ip, dev) = (p.ip.to_string(), e.device_index.to_string());
        for want in [ip.as_str(), eni.as_str(), dev.as_str(), "eth0"] {
            assert!(cells.contains(&want), "{want} missing from pod row {row:?}");
        }
    }
    assert!(
        !out.contains(&gone.pod),
        "released pod still listed:\n{out}"
    );

    // env
    let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "env"]).await);
    for (k, v) in lab.env_settings() {
        assert_eq!(line(&out, &k).split_whitespace().nth(1), Some(v.as_str()));
    }

    // health
    let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "health"]).await);
    assert!(out.starts_with("ready\n"), "{out}");
    assert!(out.contains(&lab.instance.instance_id), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_unix_socket() {
    let lab = Lab::start().await;
    let mut c = client(&lab.dir.path().join("agent.sock")).await;
    let pods = add_pods(&mut c, 2).await;
    lab.settle().await;
    let ec2 = lab.ec2_enis();
    let unix = format!(
        "unix:{}",
        lab.dir.path().join("introspection.sock").display()
    );
    for ep in [lab.endpoint(), unix] {
        let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "-o", "json"]).await);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let got: BTreeMap<String, BTreeSet<Ipv4Addr>> = v["enis"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let ips = e["addresses"].as_array().unwrap().iter();
                (
                    e["id"].as_str().unwrap().to_string(),
                    ips.map(|a| a["ip"].as_str().unwrap().parse().unwrap())
                        .collect(),
                )
            })
            .collect();
        let want: BTreeMap<String, BTreeSet<Ipv4Addr>> = ec2
            .iter()
            .map(|(id, e)| (id.clone(), e.secondary_ips.clone()))
            .collect();
        assert_eq!(got, want, "{ep}");

        let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "pods", "-o", "json"]).await);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let got: BTreeSet<(String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["container_id"].as_str().unwrap().to_string(),
                    p["ip"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want: BTreeSet<(String, String)> = pods
            .iter()
            .map(|p| (p.container_id.clone(), p.ip.to_string()))
            .collect();
        assert_eq!(got, want, "{ep}");

        let out = stdout(&vpcnet(&["inspect", "--endpoint", &ep, "health", "-o", "json"]).await);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ready"], true, "{v}");
        assert_eq!(v["summary"]["assigned_ips"], pods.len(), "{v}");
    }
}

#[tokio::test]
async fn refused_endpoint_explains_what_to_do() {
    // A port that was just free: nothing listens there.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = l.local_addr().unwrap();
    drop(l);
    let dir = tempfile::tempdir().unwrap();
    let missing: PathBuf = dir.path().join("none.sock");
    for ep in [
        format!("http://{addr}"),
        format!("unix:{}", missing.display()),
    ] {
        let o = vpcnet(&["inspect", "--endpoint", &ep, "pods"]).await;
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        for want in [
            "not running",
            "DISABLE_INTROSPECTION",
            "INTROSPECTION_BIND_ADDRESS",
            "--endpoint",
            ep.as_str(),
        ] {
            assert!(err.contains(want), "{want:?} missing from: {err}");
        }
    }
    let o = vpcnet(&["inspect", "--endpoint", "127.0.0.1"]).await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("HOST:PORT"));
}

/// An agent that is still starting (503 on /healthz) and one answering an error.
#[tokio::test]
async fn not_ready_and_http_errors() {
    let app = axum::Router::new()
        .route(
            "/healthz",
            axum::routing::get(|| async {
                (axum::http::StatusCode::SERVICE_UNAVAILABLE, "starting\n")
            }),
        )
        .route(
            "/v1/enis",
            axum::routing::get(|| async {
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "pool lock poisoned",
                )
            }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });

    let o = vpcnet(&["inspect", "--endpoint", &ep, "health"]).await;
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("not ready") && out.contains("503"), "{out}");

    let o = vpcnet(&["inspect", "--endpoint", &ep, "enis"]).await;
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("HTTP 500") && err.contains("pool lock poisoned"),
        "{err}"
    );

    // A server that accepts but never answers: the deadline ends the wait.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ep = format!("http://{}", l.local_addr().unwrap());
    let o = vpcnet(&["inspect", "--endpoint", &ep, "--timeout", "0.5"]).await;
    drop(l);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no answer") && err.contains("0.5 s"), "{err}");
}

/// `vpcnet lab down` on drop, so a failing lab test leaves nothing behind.
#[cfg(feature = "lab")]
struct LabDown(String);

#[cfg(feature = "lab")]
impl Drop for LabDown {
    fn drop(&mut self) {
        let _ = std::process::Command::new(env!("CARGO_BIN_EXE_vpcnet"))
            .args(["lab", "down", "--name", &self.0])
            .output();
    }
}

/// `vpcnet lab inspect` reaches the agent inside the node's network namespace. Needs root and
/// the workspace binaries (`cargo build --workspace --all-targets`); fails when not root.
#[cfg(feature = "lab")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_inspect_reads_the_node_agent() {
    vpcnet_cni_harness::netns::require_root();
    let name = format!("e2e-inspect-{}-0", std::process::id());
    let _down = LabDown(name.clone());
    stdout(&vpcnet(&["lab", "up", "--no-kubernetes", "--name", &name]).await);
    // `lab run` prints "<container>\t<node>\t<ip>" per container (the IP of the CNI result).
    let run = stdout(&vpcnet(&["lab", "run", "--name", &name, "--count", "2"]).await);
    let started: Vec<(String, String)> = run
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[2].to_string())
        })
        .collect();
    assert_eq!(started.len(), 2, "{run}");

    let pods = stdout(&vpcnet(&["lab", "inspect", "--name", &name, "pods", "-o", "json"]).await);
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
    let ips: BTreeSet<&str> = pods
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ip"].as_str().unwrap())
        .collect();
    let want: BTreeSet<&str> = started.iter().map(|(_, ip)| ip.as_str()).collect();
    assert_eq!(ips, want);

    let enis = stdout(&vpcnet(&["lab", "inspect", "--name", &name, "--node", "n1"]).await);
    for (_, ip) in &started {
        assert!(line(&enis, ip).contains("assigned"), "{enis}");
    }
    let health = stdout(&vpcnet(&["lab", "inspect", "--name", &name, "health"]).await);
    assert!(health.starts_with("ready\n"), "{health}");

    let o = vpcnet(&["lab", "inspect", "--name", &name, "--node", "n9"]).await;
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no node \"n9\""));
}
