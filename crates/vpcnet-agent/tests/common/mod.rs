//! In-process emulator + in-process agent + tonic client over a temp Unix socket.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint, Uri};
use vpcnet_agent::{AgentHandle, AgentOptions};
use vpcnet_ec2::StaticCredentials;
use vpcnet_emu::{Emulator, InstanceInfo, RunInstance};
use vpcnet_proto::cni_backend_client::CniBackendClient;
use vpcnet_proto::*;

pub struct Lab {
    pub emu: Emulator,
    pub server: vpcnet_emu::EmuServer,
    pub instance: InstanceInfo,
    pub imds: String,
    pub dir: tempfile::TempDir,
    /// EC2 endpoint the agent uses (the emulator, or a fault-injecting front).
    pub endpoint: String,
}

pub async fn lab(instance_type: &str) -> Lab {
    lab_in_subnet(instance_type, "10.0.0.0/20").await
}

/// [`lab`] with the instance in a subnet of `cidr` (in VPC 10.0.0.0/16, us-east-1a).
pub async fn lab_in_subnet(instance_type: &str, cidr: &str) -> Lab {
    let emu = Emulator::new(7);
    let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
    let subnet = emu
        .create_subnet(&vpc.vpc_id, cidr.parse().unwrap(), "us-east-1a")
        .unwrap();
    let server = emu.spawn().await.unwrap();
    let instance = emu
        .run_instance(RunInstance {
            instance_type: instance_type.into(),
            subnet_id: subnet,
            ..Default::default()
        })
        .await
        .unwrap();
    let imds = emu.imds_endpoint(&instance.instance_id).await.unwrap();
    let endpoint = server.endpoint.clone();
    Lab {
        emu,
        server,
        instance,
        imds,
        dir: tempfile::tempdir().unwrap(),
        endpoint,
    }
}

impl Lab {
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }

    pub fn checkpoint(&self) -> PathBuf {
        self.dir.path().join("ipam.json")
    }

    /// The real `vpcnet-agent` binary with a cleared environment pointed at this lab's
    /// EC2 and IMDS, its socket and checkpoint in the temp dir, its log on stdout (never the
    /// default file under /host/var/log); callers add the rest.
    pub fn agent_command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_vpcnet-agent"));
        cmd.env_clear()
            .env("AWS_EC2_ENDPOINT", &self.endpoint)
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &self.imds)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("VPCNET_AGENT_SOCKET", self.socket())
            .env("VPCNET_CHECKPOINT_PATH", self.checkpoint())
            .env("AWS_VPC_K8S_CNI_LOG_FILE", "stdout");
        cmd
    }

    /// The conflist path of [`Lab::bare_agent_command`] and [`Lab::options`].
    pub fn conflist(&self) -> PathBuf {
        self.dir.path().join("net.d/10-vpcnet.conflist")
    }

    /// [`Lab::agent_command`] for an agent that manages no node datapath: its VPC CNI
    /// checkpoint, CNI cache and conflist in the temp dir, no introspection or metrics
    /// listener, stdin closed, killed when dropped.
    pub fn bare_agent_command(&self) -> tokio::process::Command {
        let mut cmd = self.agent_command();
        cmd.env(
            "VPCNET_VPC_CNI_CHECKPOINT",
            self.dir.path().join("aws-node.json"),
        )
        .env("VPCNET_CNI_CACHE_DIR", self.dir.path().join("cni-cache"))
        .env("VPCNET_CNI_CONFLIST", self.conflist())
        .env("DISABLE_INTROSPECTION", "true")
        .env("DISABLE_METRICS", "true")
        .env("VPCNET_NODE_DATAPATH", "false")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
        cmd
    }

    /// The instance's attached ENIs, per the emulator.
    pub fn attached_enis(&self) -> Vec<vpcnet_emu::EniInfo> {
        self.emu
            .enis()
            .into_iter()
            .filter(|e| {
                e.attachment
                    .as_ref()
                    .is_some_and(|a| a.instance_id == self.instance.instance_id)
            })
            .collect()
    }

    /// Options for an agent on this lab's instance: no TCP listeners, files in the temp dir.
    pub fn options(&self) -> AgentOptions {
        AgentOptions {
            socket_path: self.socket(),
            checkpoint_path: self.checkpoint(),
            introspection_addr: None,
            metrics_addr: None,
            conflist_path: Some(self.conflist()),
            imds_endpoint: Some(self.imds.clone()),
            ec2_endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            credentials: Some(StaticCredentials {
                access_key_id: "test".into(),
                secret_access_key: "test".into(),
                session_token: None,
            }),
            cluster_name: "lab".into(),
            reconcile_interval: Duration::from_secs(2),
            ..AgentOptions::default()
        }
    }

    /// ENIs attached to the instance per EC2: id → secondary IPs.
    pub fn ec2_enis(&self) -> BTreeMap<String, BTreeSet<Ipv4Addr>> {
        self.attached_enis()
            .into_iter()
            .map(|e| (e.eni_id, e.secondary_ips.into_iter().collect()))
            .collect()
    }

    /// Every secondary IP EC2 lists on the instance.
    pub fn ec2_ips(&self) -> BTreeSet<Ipv4Addr> {
        self.ec2_enis().into_values().flatten().collect()
    }

    /// ENIs that are not attached anywhere (leaks).
    pub fn detached_enis(&self) -> Vec<String> {
        self.emu
            .enis()
            .into_iter()
            .filter(|e| e.attachment.is_none())
            .map(|e| e.eni_id)
            .collect()
    }
}

/// The agent's view: ENI id → secondary IPs.
pub fn agent_enis(h: &AgentHandle) -> BTreeMap<String, BTreeSet<Ipv4Addr>> {
    h.shared
        .pool()
        .enis()
        .map(|e| (e.info.id.clone(), e.ips.keys().copied().collect()))
        .collect()
}

pub async fn client(path: &Path) -> CniBackendClient<Channel> {
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

pub fn add_req(id: &str) -> AddNetworkRequest {
    AddNetworkRequest {
        container_id: id.into(),
        if_name: "eth0".into(),
        netns: format!("/var/run/netns/{id}"),
        k8s_pod_namespace: "default".into(),
        k8s_pod_name: format!("pod-{id}"),
        network_name: "aws-cni".into(),
        requires_multi_nic_attachment: false,
    }
}

pub fn del_req(id: &str) -> DelNetworkRequest {
    DelNetworkRequest {
        container_id: id.into(),
        if_name: "eth0".into(),
        ..Default::default()
    }
}

/// ADD, retrying while the agent answers UNAVAILABLE (as the plugin's caller would).
pub async fn add_retry(
    c: &mut CniBackendClient<Channel>,
    id: &str,
    within: Duration,
) -> Result<AddNetworkReply, tonic::Status> {
    add_retry_req(c, add_req(id), within).await
}

/// [`add_retry`] of request `req`.
pub async fn add_retry_req(
    c: &mut CniBackendClient<Channel>,
    req: AddNetworkRequest,
    within: Duration,
) -> Result<AddNetworkReply, tonic::Status> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match c.add_network(req.clone()).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s)
                if s.code() == tonic::Code::Unavailable
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(s) => return Err(s),
        }
    }
}

/// Waits until `f` holds (polling every 20 ms) or panics after `within`.
pub async fn eventually(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `done` every 50 ms while the agent process `child` (stdout and stderr piped) runs,
/// for at most `within`. Returns whether `done` held; `Err` with its exit status, stdout and
/// stderr if the agent exited first.
pub async fn while_agent_runs(
    child: &mut tokio::process::Child,
    within: Duration,
    done: impl Fn() -> bool,
) -> Result<bool, String> {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        if let Ok(Some(status)) = child.try_wait() {
            let (mut out, mut err) = (String::new(), String::new());
            if let Some(mut o) = child.stdout.take() {
                let _ = o.read_to_string(&mut out).await;
            }
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err).await;
            }
            return Err(format!("the agent exited ({status}):\n{out}{err}"));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(true)
}

/// Counts of the fault-injecting front.
#[derive(Default)]
pub struct FrontCounts {
    pub total: AtomicU64,
    pub throttled: AtomicU64,
    pub server_errors: AtomicU64,
    /// Calls the emulator applied whose reply was replaced by a 500 (lost reply).
    pub lost_replies: AtomicU64,
}

/// An EC2 endpoint in front of the emulator that answers `throttle` of the requests with
/// RequestLimitExceeded (HTTP 503) and `server_error` with InternalError (HTTP 500) before
/// they reach the emulator (seeded), and forwards the rest.
pub async fn faulty_front(
    emu: Emulator,
    throttle: f64,
    server_error: f64,
    seed: u64,
) -> (String, Arc<FrontCounts>) {
    faulty_front_lossy(emu, throttle, server_error, 0.0, seed).await
}

/// [`faulty_front`], and `lost` of the requests reach the emulator (and are applied) but
/// their reply is replaced by InternalError (HTTP 500), as when EC2's answer is lost.
pub async fn faulty_front_lossy(
    emu: Emulator,
    throttle: f64,
    server_error: f64,
    lost: f64,
    seed: u64,
) -> (String, Arc<FrontCounts>) {
    let counts = Arc::new(FrontCounts::default());
    let rng = Arc::new(Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(seed)));
    let c2 = counts.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let (emu, rng, counts) = (emu.clone(), rng.clone(), c2.clone());
        async move {
            counts.total.fetch_add(1, Ordering::Relaxed);
            let draw: f64 = rng.lock().unwrap().random();
            let fail = |code: &str, msg: &str, status: u16| {
                let xml = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{msg}</Message></Error></Errors><RequestID>front</RequestID></Response>");
                (axum::http::StatusCode::from_u16(status).unwrap(), [(axum::http::header::CONTENT_TYPE, "text/xml")], xml)
            };
            if draw < throttle {
                counts.throttled.fetch_add(1, Ordering::Relaxed);
                return fail("RequestLimitExceeded", "Request limit exceeded.", 503);
            }
            if draw < throttle + server_error {
                counts.server_errors.fetch_add(1, Ordering::Relaxed);
                return fail("InternalError", "An internal error has occurred.", 500);
            }
            let params = vpcnet_emu::query::params::Params::parse(&body);
            let (status, xml) = emu.ec2_call(params, None).await;
            if draw < throttle + server_error + lost {
                counts.lost_replies.fetch_add(1, Ordering::Relaxed);
                return fail("InternalError", "An internal error has occurred.", 500);
            }
            (axum::http::StatusCode::from_u16(status).unwrap(), [(axum::http::header::CONTENT_TYPE, "text/xml")], xml)
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    (format!("http://{addr}"), counts)
}
pub mod fake_cloud;
pub mod fake_kube;
pub mod fake_node;
pub mod netns;
