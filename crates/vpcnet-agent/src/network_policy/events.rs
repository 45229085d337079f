//! Policy event logs (`VPCNET_POLICY_EVENT_LOGS=true`): the rules of the node's table log
//! the first packet of each connection a policy allows and each packet the rules drop to an
//! NFLOG group (`vpcnet_datapath::policy_events`); [`run`] reads that group and writes one
//! line per event, as the VPC CNI's node agent writes its flow lines, to
//! `VPCNET_POLICY_EVENT_LOG_FILE` (by default its file, `network-policy-agent.log`):
//!
//! ```text
//! {"level":"info","ts":"…","caller":"network_policy/events.rs:…","msg":"Flow Info: Src IP: 10.0.0.11 Src Port: 40000 Dest IP: 10.0.0.12 Dest Port: 8080 Proto TCP Verdict DENY Direction ingress, Tier NETWORK_POLICY","pod":"shop/db-0"}
//! ```
//!
//! - `DENY` lines are at `info`, `ACCEPT` lines at `debug`, as the node agent writes them;
//!   both are written. `pod` is the node's pod whose rules decided (`namespace/name`),
//!   `policy` the allowing policy of an `ACCEPT`.
//! - Reading runs on tokio's blocking pool, one receive (at most [`POLL`]) at a time, so it
//!   never holds up the agent's other work and stops within [`POLL`] of the agent.
//! - A full socket buffer (`ENOBUFS`) loses events, counted in
//!   `vpcnet_network_policy_events_lost`; reading goes on. Any other socket error reopens the
//!   socket after [`RETRY`].

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;
use vpcnet_datapath::nflog::{NflogPacket, NflogSocket, RecvError};
use vpcnet_datapath::policy_events::{EventPrefix, Flow, PolicyEvent, Verdict, EVENT_GROUP};
use vpcnet_log::{LogWriter, Rotation, Target};
use vpcnet_policy::Ruleset;

use crate::metrics::Metrics;
use crate::node::NodeNetwork;

/// Longest one receive waits: how soon reading stops after the agent.
pub const POLL: Duration = Duration::from_millis(250);
/// Wait before opening the socket again after an error.
pub const RETRY: Duration = Duration::from_secs(5);
/// At most one warning about lost events per this interval.
const LOST_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// The pods of the applied table by host interface (`namespace/name`), shared between the
/// enforcer (which replaces them after each program) and the reader.
#[derive(Debug, Clone, Default)]
pub struct PodNames(Arc<RwLock<BTreeMap<String, String>>>);

impl PodNames {
    /// The pods of `rules`.
    pub fn replace(&self, rules: &Ruleset) {
        let names = rules
            .pods
            .iter()
            .map(|(interface, p)| (interface.clone(), p.pod.clone()))
            .collect();
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = names;
    }

    /// The pod behind host interface `interface`.
    pub fn get(&self, interface: &str) -> Option<String> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(interface)
            .cloned()
    }
}

/// The message of an event's line, as the node agent writes it for IPv4.
pub fn message(event: &PolicyEvent) -> String {
    let f = &event.flow;
    format!(
        "Flow Info: Src IP: {} Src Port: {} Dest IP: {} Dest Port: {} Proto {} Verdict {} Direction {}, Tier NETWORK_POLICY",
        f.src,
        f.src_port,
        f.dst,
        f.dst_port,
        f.protocol_name(),
        event.prefix.verdict.as_str(),
        event.prefix.side.as_str(),
    )
}

/// Reads a logged packet; `None` for another program's message or a packet that is not IPv4.
pub fn decode(packet: &NflogPacket) -> Option<PolicyEvent> {
    Some(PolicyEvent {
        prefix: EventPrefix::parse(&packet.prefix)?,
        flow: Flow::parse(&packet.payload)?,
    })
}

/// Writes event lines (JSON, `vpcnet-log`'s format) to one log target, counting them.
pub struct EventLines {
    dispatch: tracing::Dispatch,
    metrics: Arc<Metrics>,
}

impl EventLines {
    pub fn new(writer: LogWriter, metrics: Arc<Metrics>) -> Self {
        let subscriber = tracing_subscriber::fmt()
            .event_format(vpcnet_log::JsonLines::new())
            .with_writer(Counted {
                writer,
                metrics: metrics.clone(),
            })
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        EventLines {
            dispatch: tracing::Dispatch::new(subscriber),
            metrics,
        }
    }

    /// Writes the lines of `packets`, naming each event's pod from `pods`.
    pub fn write(&self, packets: &[NflogPacket], pods: &PodNames) {
        for packet in packets {
            let Some(event) = decode(packet) else {
                tracing::debug!(prefix = %packet.prefix, "policy event logs: skipped a message that is not an IPv4 packet of vpcnet's rules");
                continue;
            };
            let msg = message(&event);
            let pod = pods.get(&event.prefix.interface).unwrap_or_default();
            let policy = event.prefix.policy.as_deref();
            tracing::dispatcher::with_default(&self.dispatch, || match event.prefix.verdict {
                Verdict::Deny => tracing::info!(pod, "{msg}"),
                Verdict::Accept => tracing::debug!(pod, policy, "{msg}"),
            });
            self.metrics
                .inc_policy_events_written(event.prefix.verdict.as_str());
        }
    }
}

/// The log target, counting failed writes.
struct Counted {
    writer: LogWriter,
    metrics: Arc<Metrics>,
}

struct CountedOutput<'a> {
    out: vpcnet_log::Output<'a>,
    metrics: &'a Metrics,
}

impl<'a> MakeWriter<'a> for Counted {
    type Writer = CountedOutput<'a>;

    fn make_writer(&'a self) -> CountedOutput<'a> {
        CountedOutput {
            out: self.writer.make_writer(),
            metrics: &self.metrics,
        }
    }
}

impl Write for CountedOutput<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf).inspect_err(|e| {
            self.metrics.inc_policy_events_write_error();
            tracing::warn!("policy event logs: writing a line failed: {e}");
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// What one receive came to.
enum Step {
    Read,
    Overrun,
    Failed(vpcnet_datapath::Error),
}

/// Reads the node's policy events into `target` (`VPCNET_POLICY_EVENT_LOG_FILE`) until the
/// future is dropped (the agent stops). A target that cannot be opened is logged and nothing
/// is read.
pub async fn run(
    node: Arc<dyn NodeNetwork>,
    pods: PodNames,
    target: String,
    metrics: Arc<Metrics>,
) {
    let writer = match LogWriter::open(&Target::parse(&target), Rotation::NODE_AGENT) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                "policy event logs are off: cannot write VPCNET_POLICY_EVENT_LOG_FILE={target:?}: {e}; instead: let the agent create that file (in the aws-node DaemonSet, mount the node's /var/log/aws-routed-eni at /host/var/log/aws-routed-eni), or set VPCNET_POLICY_EVENT_LOG_FILE to stdout or stderr"
            );
            return;
        }
    };
    let lines = Arc::new(EventLines::new(writer, metrics.clone()));
    let mut socket: Option<NflogSocket> = None;
    let mut last_lost_warning: Option<tokio::time::Instant> = None;
    loop {
        let s = match socket.take() {
            Some(s) => s,
            None => {
                let node = node.clone();
                match tokio::task::spawn_blocking(move || {
                    node.open_policy_events(EVENT_GROUP, POLL)
                })
                .await
                {
                    Ok(Ok(s)) => {
                        tracing::info!(
                            "policy event logs: reading NFLOG group {EVENT_GROUP} into {target}"
                        );
                        s
                    }
                    Ok(Err(e)) => {
                        tracing::error!("policy event logs: {e:#}; retrying in {RETRY:?}");
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                    Err(e) => {
                        tracing::error!("policy event logs: opening the socket: {e}");
                        tokio::time::sleep(RETRY).await;
                        continue;
                    }
                }
            }
        };
        let (lines2, pods2) = (lines.clone(), pods.clone());
        let mut s = s;
        let received = tokio::task::spawn_blocking(move || {
            let step = match s.recv() {
                Ok(packets) => {
                    lines2.write(&packets, &pods2);
                    Step::Read
                }
                Err(RecvError::Timeout) => Step::Read,
                Err(RecvError::Overrun) => Step::Overrun,
                Err(RecvError::Io(e)) => Step::Failed(e),
            };
            let lost = s.take_lost();
            (s, step, lost)
        })
        .await;
        let Ok((s, step, lost)) = received else {
            tracing::error!("policy event logs: the reading task failed; reopening");
            continue;
        };
        if lost > 0 {
            metrics.add_policy_events_lost(lost);
        }
        match step {
            Step::Read => socket = Some(s),
            Step::Overrun => {
                let now = tokio::time::Instant::now();
                if last_lost_warning.is_none_or(|t| now >= t + LOST_WARNING_INTERVAL) {
                    last_lost_warning = Some(now);
                    tracing::warn!(
                        "policy event logs: the kernel dropped events (socket buffer full, ENOBUFS); they are counted in vpcnet_network_policy_events_lost"
                    );
                }
                socket = Some(s);
            }
            Step::Failed(e) => {
                tracing::error!("policy event logs: {e}; reopening the socket in {RETRY:?}");
                drop(s);
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_policy::{Direction, PodRules};

    fn packet(
        prefix: &str,
        src: [u8; 4],
        dst: [u8; 4],
        protocol: u8,
        ports: [u8; 4],
    ) -> NflogPacket {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[9] = protocol;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p.extend_from_slice(&ports);
        NflogPacket {
            prefix: prefix.into(),
            payload: p,
        }
    }

    #[test]
    fn lines_are_the_node_agents_with_the_pod_and_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aws-routed-eni/network-policy-agent.log");
        let writer = LogWriter::open(&Target::File(path.clone()), Rotation::NODE_AGENT).unwrap();
        let metrics = Arc::new(Metrics::new());
        let lines = EventLines::new(writer, metrics.clone());
        let pods = PodNames::default();
        let mut rules = Ruleset::default();
        rules.pods.insert(
            "eni1a2b3c4d5e6".into(),
            PodRules {
                pod: "shop/db-0".into(),
                ingress: Direction::Isolated(vec![]),
                egress: Direction::Open,
            },
        );
        pods.replace(&rules);
        lines.write(
            &[
                packet(
                    "D in eni1a2b3c4d5e6",
                    [10, 0, 0, 11],
                    [10, 0, 0, 12],
                    6,
                    [0x9c, 0x40, 0x1f, 0x90],
                ),
                packet(
                    "A out eni1a2b3c4d5e6 shop/to-dns",
                    [10, 0, 0, 12],
                    [10, 0, 0, 2],
                    17,
                    [0x9c, 0x41, 0, 53],
                ),
                packet("someone else's", [10, 0, 0, 1], [10, 0, 0, 2], 6, [0; 4]),
                NflogPacket {
                    prefix: "D in eni1a2b3c4d5e6".into(),
                    payload: vec![0x60; 40],
                },
            ],
            &pods,
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let got: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(got.len(), 2, "{text}");
        assert_eq!(got[0]["level"], "info");
        assert_eq!(
            got[0]["msg"],
            "Flow Info: Src IP: 10.0.0.11 Src Port: 40000 Dest IP: 10.0.0.12 Dest Port: 8080 Proto TCP Verdict DENY Direction ingress, Tier NETWORK_POLICY"
        );
        assert_eq!(got[0]["pod"], "shop/db-0");
        assert!(got[0].get("policy").is_none(), "{text}");
        assert!(
            got[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("network_policy/events.rs:"),
            "{text}"
        );
        assert_eq!(got[1]["level"], "debug");
        assert_eq!(
            got[1]["msg"],
            "Flow Info: Src IP: 10.0.0.12 Src Port: 40001 Dest IP: 10.0.0.2 Dest Port: 53 Proto UDP Verdict ACCEPT Direction egress, Tier NETWORK_POLICY"
        );
        assert_eq!(got[1]["policy"], "shop/to-dns");
        let exposed = metrics.encode();
        assert!(
            exposed.contains("vpcnet_network_policy_events_written{verdict=\"DENY\"} 1"),
            "{exposed}"
        );
        assert!(
            exposed.contains("vpcnet_network_policy_events_written{verdict=\"ACCEPT\"} 1"),
            "{exposed}"
        );
    }
}
