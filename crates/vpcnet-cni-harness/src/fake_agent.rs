//! A fake vpcnet-agent: serves `vpcnet.cni.v1.CniBackend` on a Unix socket from a background
//! thread. Addresses come from `base + first .. base + first + count`; addresses at or above
//! `secondary_from` are "on ENI device 1" (route table 2: device number + 1, as the agent numbers
//! ENI tables, `vpcnet_datapath::node::eni_route_table`), the rest on the primary ENI (table 0).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Code, Request, Response, Status};
use vpcnet_proto::cni_backend_server::{CniBackend, CniBackendServer};
use vpcnet_proto::*;

/// How the fake agent hands out addresses.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// First address of the pool.
    pub first: Ipv4Addr,
    /// Pool size.
    pub count: u32,
    /// Addresses from this index (0-based) on are on ENI device 1.
    pub secondary_from: u32,
    /// MTU to report.
    pub mtu: u32,
    /// `network_policy_mode` of every Add/Del answer (the agent's with
    /// `VPCNET_NETWORK_POLICY_AGENT=aws-eks-nodeagent`); empty: none.
    pub network_policy_mode: String,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            first: Ipv4Addr::new(10, 0, 1, 10),
            count: 200,
            secondary_from: 100,
            mtu: 9001,
            network_policy_mode: String::new(),
        }
    }
}

/// Shared state, inspectable by tests.
#[derive(Debug, Default)]
pub struct State {
    /// (container ID, ifname) → address index.
    pub assigned: BTreeMap<(String, String), u32>,
    /// Addresses released by DelNetwork or GarbageCollect, in order.
    pub released: Vec<Ipv4Addr>,
    /// Not ready: Status says so and AddNetwork answers FAILED_PRECONDITION.
    pub not_ready: bool,
    /// When set, AddNetwork fails with this code.
    pub add_error: Option<Code>,
    /// Number of calls per RPC name.
    pub calls: BTreeMap<&'static str, u32>,
}

#[derive(Clone)]
struct Svc {
    cfg: FakeConfig,
    state: Arc<Mutex<State>>,
}

impl Svc {
    fn ip(&self, i: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cfg.first) + i)
    }
    fn device(&self, i: u32) -> u32 {
        u32::from(i >= self.cfg.secondary_from)
    }

    /// 0 on the primary ENI, else device number + 1 (the agent's and the VPC CNI's numbering).
    fn route_table(&self, i: u32) -> u32 {
        match self.device(i) {
            0 => 0,
            d => vpcnet_datapath::node::eni_route_table(d),
        }
    }
}

#[tonic::async_trait]
impl CniBackend for Svc {
    async fn add_network(
        &self,
        req: Request<AddNetworkRequest>,
    ) -> Result<Response<AddNetworkReply>, Status> {
        let r = req.into_inner();
        let mut st = self.state.lock().unwrap();
        *st.calls.entry("AddNetwork").or_default() += 1;
        if r.container_id.is_empty() {
            return Err(Status::invalid_argument("empty container_id"));
        }
        if st.not_ready {
            return Err(Status::failed_precondition("fake agent not ready"));
        }
        if let Some(c) = st.add_error {
            return Err(Status::new(c, "injected by the test"));
        }
        let key = (r.container_id, r.if_name);
        let i = match st.assigned.get(&key) {
            Some(i) => *i,
            None => {
                let used: Vec<u32> = st.assigned.values().copied().collect();
                let Some(i) = (0..self.cfg.count).find(|i| !used.contains(i)) else {
                    return Err(Status::unavailable("warm pool empty"));
                };
                st.assigned.insert(key, i);
                i
            }
        };
        let device = self.device(i);
        Ok(Response::new(AddNetworkReply {
            ipv4_addr: self.ip(i).to_string(),
            device_number: device,
            route_table: self.route_table(i),
            vpc_cidrs: vec!["10.0.0.0/16".into()],
            use_external_snat: false,
            eni_id: format!("eni-fake{device}"),
            mtu: self.cfg.mtu,
            extra_interfaces: Vec::new(),
            network_policy_mode: self.cfg.network_policy_mode.clone(),
        }))
    }

    async fn del_network(
        &self,
        req: Request<DelNetworkRequest>,
    ) -> Result<Response<DelNetworkReply>, Status> {
        let r = req.into_inner();
        let mut st = self.state.lock().unwrap();
        *st.calls.entry("DelNetwork").or_default() += 1;
        match st.assigned.remove(&(r.container_id, r.if_name)) {
            Some(i) => {
                st.released.push(self.ip(i));
                Ok(Response::new(DelNetworkReply {
                    released: true,
                    ipv4_addr: self.ip(i).to_string(),
                    device_number: self.device(i),
                    route_table: self.route_table(i),
                    extra_interfaces: Vec::new(),
                    network_policy_mode: self.cfg.network_policy_mode.clone(),
                }))
            }
            None => Ok(Response::new(DelNetworkReply {
                network_policy_mode: self.cfg.network_policy_mode.clone(),
                ..Default::default()
            })),
        }
    }

    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let mut st = self.state.lock().unwrap();
        *st.calls.entry("Status").or_default() += 1;
        Ok(Response::new(StatusReply {
            ready: !st.not_ready,
            available_ips: self.cfg.count - st.assigned.len() as u32,
            message: if st.not_ready {
                "starting".into()
            } else {
                "ok".into()
            },
        }))
    }

    async fn garbage_collect(
        &self,
        req: Request<GarbageCollectRequest>,
    ) -> Result<Response<GarbageCollectReply>, Status> {
        let valid: Vec<(String, String)> = req
            .into_inner()
            .valid_attachments
            .into_iter()
            .map(|a| (a.container_id, a.if_name))
            .collect();
        let mut st = self.state.lock().unwrap();
        *st.calls.entry("GarbageCollect").or_default() += 1;
        let stale: Vec<_> = st
            .assigned
            .keys()
            .filter(|k| !valid.contains(k))
            .cloned()
            .collect();
        let mut released = Vec::new();
        for k in stale {
            let i = st.assigned.remove(&k).unwrap();
            st.released.push(self.ip(i));
            released.push(self.ip(i).to_string());
        }
        Ok(Response::new(GarbageCollectReply { released }))
    }
}

/// A running fake agent; stops (and removes its socket) on drop.
pub struct FakeAgent {
    pub socket: PathBuf,
    pub state: Arc<Mutex<State>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeAgent {
    /// Starts serving on `socket` (removed first if it exists). Returns once the socket listens.
    pub fn start(socket: &Path, cfg: FakeConfig) -> anyhow::Result<FakeAgent> {
        let _ = std::fs::remove_file(socket);
        let state = Arc::new(Mutex::new(State::default()));
        let svc = Svc {
            cfg,
            state: state.clone(),
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
        let path = socket.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = match UnixListener::bind(&path) {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                let _ = tonic::transport::Server::builder()
                    .add_service(CniBackendServer::new(svc))
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        ready_rx.recv()??;
        Ok(FakeAgent {
            socket: socket.to_path_buf(),
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Stops serving and removes the socket (the plugin then sees an unreachable agent).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Locks the state for inspection or to flip switches.
    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop();
    }
}
