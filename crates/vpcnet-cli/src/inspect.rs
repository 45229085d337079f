//! `vpcnet inspect`: an agent's introspection endpoint (`/healthz`, `/v1/enis`, `/v1/pods`,
//! `/v1/env-settings`, `/v1/apiserver`, `/v1/eniconfig`, served on `INTROSPECTION_BIND_ADDRESS`, default 127.0.0.1:61679) as
//! tables or JSON. The HTTP client is hyper over TCP or a Unix socket, with one deadline for
//! the whole command. Fetching ([`fetch`]) is separate from rendering ([`render`]) so `vpcnet
//! lab inspect` can fetch from inside a lab node's network namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use vpcnet_introspection::text::table;
use vpcnet_introspection::{self as doc, Address, Eni, EnisDoc, EnvSettings, Pod, Pods};

mod datapath;

/// The agent's default introspection address (the VPC CNI's port).
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:61679";

#[derive(ClapArgs)]
pub struct Args {
    /// The agent's introspection endpoint: http://HOST:PORT, HOST:PORT or unix:/PATH (what the
    /// agent's INTROSPECTION_BIND_ADDRESS says).
    #[arg(long, default_value = DEFAULT_ENDPOINT)]
    pub endpoint: String,
    #[command(flatten)]
    pub view: View,
}

/// What to show and how (shared by `vpcnet inspect` and `vpcnet lab inspect`).
#[derive(ClapArgs, Clone, Copy)]
pub struct View {
    /// enis: ENIs and every address; pods: pod -> IP, ENI; env: the agent's settings;
    /// health: ready or not (exit status 1 when not ready); api: the agent's Kubernetes API
    /// connection (endpoint, since when, last error) and Node capacity check; datapath: the
    /// datapath audit (problems found per pod and node prerequisite, repairs); eniconfig: the
    /// node's ENIConfig under custom networking (subnet, security groups, or why none).
    #[arg(value_enum, default_value_t = What::Enis)]
    pub what: What,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Deadline for the whole exchange with the agent, in seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub timeout: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    Enis,
    Pods,
    Env,
    Health,
    Api,
    #[value(name = "eniconfig")]
    EniConfig,
    Datapath,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Where the agent's introspection listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` (from `http://host:port` or `host:port`).
    Tcp(String),
    /// A Unix socket path (from `unix:/path`).
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses `http://HOST:PORT[/]`, `HOST:PORT` or `unix:/PATH` (also `unix:///PATH`).
    /// Errors name the accepted forms.
    pub fn parse(s: &str) -> Result<Endpoint> {
        let s = s.trim();
        let bad = || {
            anyhow!(
                "--endpoint {s:?}: expected http://HOST:PORT, HOST:PORT or unix:/PATH \
                 (the agent's INTROSPECTION_BIND_ADDRESS, default 127.0.0.1:61679)"
            )
        };
        if let Some(path) = s.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if !path.starts_with('/') {
                return Err(bad());
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if s.starts_with("https://") {
            bail!("--endpoint {s:?}: the agent's introspection speaks plain HTTP; use http://");
        }
        let hostport = s.strip_prefix("http://").unwrap_or(s);
        let hostport = hostport.strip_suffix('/').unwrap_or(hostport);
        match hostport.rsplit_once(':') {
            Some((host, port))
                if !host.is_empty() && !hostport.contains('/') && port.parse::<u16>().is_ok() =>
            {
                Ok(Endpoint::Tcp(hostport.to_string()))
            }
            _ => Err(bad()),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "http://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// An HTTP answer: status code and body text.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

/// What the agent answered for one view.
#[derive(Debug, Clone, Default)]
pub struct Fetched {
    /// `/healthz` (health view).
    pub health: Option<Reply>,
    /// `/v1/enis` (enis and pods views; health when ready).
    pub enis: Option<Value>,
    /// `/v1/pods`.
    pub pods: Option<Value>,
    /// `/v1/env-settings`.
    pub env: Option<Value>,
    /// `/v1/apiserver`.
    pub api: Option<Value>,
    /// `/v1/eniconfig`.
    pub eniconfig: Option<Value>,
    /// `/v1/datapath`.
    pub datapath: Option<Value>,
}

pub fn run(args: Args) -> Result<()> {
    let ep = Endpoint::parse(&args.endpoint)?;
    let fetched = fetch(&ep, args.view)?;
    show(args.view, &fetched)
}

/// Prints `fetched`; a health view of an agent that is not ready prints "not ready" and
/// returns an error (exit status 1).
pub fn show(view: View, fetched: &Fetched) -> Result<()> {
    print!("{}", render(view, fetched, now_ms())?);
    if view.what == What::Health {
        if let Some(h) = fetched.health.as_ref().filter(|h| h.status != 200) {
            let why = if h.body.starts_with("datapath:") {
                "see `vpcnet inspect datapath`"
            } else {
                "it has not filled its warm pool yet"
            };
            bail!(
                "the agent is not ready (HTTP {}: {}): {why}",
                h.status,
                h.body.trim()
            );
        }
    }
    Ok(())
}

/// Fetches what `view` needs from the agent, on a runtime of its own (blocking), within
/// `view.timeout` seconds.
pub fn fetch(ep: &Endpoint, view: View) -> Result<Fetched> {
    if !(view.timeout.is_finite() && view.timeout > 0.0) {
        bail!(
            "--timeout {}: expected a positive number of seconds",
            view.timeout
        );
    }
    let deadline = Duration::from_secs_f64(view.timeout);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        tokio::time::timeout(deadline, fetch_view(ep, view.what))
            .await
            .map_err(|_| {
                anyhow!(
                    "no answer from the agent's introspection at {ep} within {:.1} s (--timeout)",
                    view.timeout
                )
            })?
    })
}

async fn fetch_view(ep: &Endpoint, what: What) -> Result<Fetched> {
    let mut f = Fetched::default();
    match what {
        What::Enis => f.enis = Some(get_json(ep, doc::ENIS).await?),
        What::Pods => {
            f.pods = Some(get_json(ep, doc::PODS).await?);
            f.enis = Some(get_json(ep, doc::ENIS).await?);
        }
        What::Env => f.env = Some(get_json(ep, doc::ENV_SETTINGS).await?),
        What::Api => f.api = Some(get_json(ep, doc::APISERVER).await?),
        What::EniConfig => f.eniconfig = Some(get_json(ep, doc::ENICONFIG).await?),
        What::Datapath => f.datapath = Some(get_json(ep, doc::DATAPATH).await?),
        What::Health => {
            let h = get(ep, doc::HEALTHZ).await?;
            if h.status == 200 {
                f.enis = Some(get_json(ep, doc::ENIS).await?);
            }
            f.health = Some(h);
        }
    }
    Ok(f)
}

/// GET `path`, expecting 200 and a JSON body.
async fn get_json(ep: &Endpoint, path: &str) -> Result<Value> {
    let r = get(ep, path).await?;
    if r.status != 200 {
        bail!(
            "GET {path} from the agent at {ep}: HTTP {}: {}",
            r.status,
            r.body.trim()
        );
    }
    serde_json::from_str(&r.body)
        .with_context(|| format!("GET {path} from the agent at {ep}: the answer is not JSON"))
}

/// One HTTP/1.1 GET over a fresh connection.
async fn get(ep: &Endpoint, path: &str) -> Result<Reply> {
    let host = match ep {
        Endpoint::Tcp(a) => a.clone(),
        Endpoint::Unix(_) => "localhost".to_string(),
    };
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, host)
        .body(Empty::<Bytes>::new())?;
    let reply = match ep {
        Endpoint::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a.as_str())
                .await
                .map_err(|e| connect_error(ep, e))?;
            send(TokioIo::new(s), req).await
        }
        Endpoint::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p)
                .await
                .map_err(|e| connect_error(ep, e))?;
            send(TokioIo::new(s), req).await
        }
    };
    reply.with_context(|| format!("GET {path} from the agent at {ep}"))
}

async fn send<T>(io: T, req: hyper::Request<Empty<Bytes>>) -> Result<Reply>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut tx, conn) = hyper::client::conn::http1::handshake(io).await?;
    let conn = tokio::spawn(conn);
    let resp = tx.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    drop(tx);
    let _ = conn.await;
    Ok(Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The connect error, with what it usually means and what to do.
fn connect_error(ep: &Endpoint, e: std::io::Error) -> anyhow::Error {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused | NotFound => anyhow!(
            "cannot reach the vpcnet agent's introspection at {ep}: {e}.\n\
             The agent is not running on this node, or its introspection is disabled \
             (DISABLE_INTROSPECTION=true) or listens elsewhere (INTROSPECTION_BIND_ADDRESS).\n\
             Point --endpoint at the agent's INTROSPECTION_BIND_ADDRESS, e.g. \
             --endpoint http://127.0.0.1:61679 or --endpoint unix:/run/vpcnet/introspection.sock."
        ),
        PermissionDenied => anyhow!(
            "cannot reach the vpcnet agent's introspection at {ep}: {e} (the socket is mode \
             0660: run as root or as a member of its group)"
        ),
        _ => anyhow!("cannot reach the vpcnet agent's introspection at {ep}: {e}"),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The document fetched from `what` (e.g. [`doc::ENIS`]) as its type.
fn parse<T: serde::de::DeserializeOwned>(v: Option<&Value>, what: &str) -> Result<T> {
    let v = v.ok_or_else(|| anyhow!("internal: {what} was not fetched"))?;
    T::deserialize(v).with_context(|| format!("the agent's {what} has an unexpected shape"))
}

/// Renders `fetched` for `view` (pure; `now_ms` is the wall clock, for cooldowns left).
pub fn render(view: View, fetched: &Fetched, now_ms: u64) -> Result<String> {
    if view.output == Output::Json {
        let v = match view.what {
            What::Enis => fetched.enis.clone(),
            What::Pods => fetched.pods.clone(),
            What::Env => fetched.env.clone(),
            What::Api => fetched.api.clone(),
            What::EniConfig => fetched.eniconfig.clone(),
            What::Datapath => fetched.datapath.clone(),
            What::Health => fetched.health.as_ref().map(|h| {
                serde_json::json!({
                    "ready": h.status == 200, "status": h.status, "body": h.body.trim(),
                    "summary": fetched.enis.as_ref().map(|e| e["summary"].clone()),
                })
            }),
        }
        .ok_or_else(|| anyhow!("internal: nothing fetched"))?;
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    match view.what {
        What::Enis => Ok(enis_text(&parse(fetched.enis.as_ref(), doc::ENIS)?, now_ms)),
        What::Pods => {
            let pods: Pods = parse(fetched.pods.as_ref(), doc::PODS)?;
            Ok(pods_text(&pods, &parse(fetched.enis.as_ref(), doc::ENIS)?))
        }
        What::Env => {
            let env: EnvSettings = parse(fetched.env.as_ref(), doc::ENV_SETTINGS)?;
            let mut rows = vec![row(["KEY", "VALUE"])];
            rows.extend(env.into_iter().map(|(k, v)| vec![k, v]));
            Ok(table(&rows))
        }
        What::Api => Ok(api_text(
            &parse(fetched.api.as_ref(), doc::APISERVER)?,
            now_ms,
        )),
        What::EniConfig => Ok(eniconfig_text(
            &parse(fetched.eniconfig.as_ref(), doc::ENICONFIG)?,
            now_ms,
        )),
        What::Datapath => Ok(datapath::datapath_text(
            &parse(fetched.datapath.as_ref(), doc::DATAPATH)?,
            now_ms,
        )),
        What::Health => {
            let h = fetched
                .health
                .as_ref()
                .ok_or_else(|| anyhow!("internal: /healthz was not fetched"))?;
            if h.status != 200 {
                return Ok(format!(
                    "not ready (HTTP {}: {})\n",
                    h.status,
                    h.body.trim()
                ));
            }
            let enis: EnisDoc = parse(fetched.enis.as_ref(), doc::ENIS)?;
            Ok(format!("ready\n{}", summary_text(&enis)))
        }
    }
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// "instance ... ENIs x/max, IPs assigned/total ..." plus the pending plan and last error.
/// The API client as KEY VALUE lines; times as ages ("12s ago").
fn api_text(d: &doc::ApiServerDoc, now_ms: u64) -> String {
    let ago = |ms: Option<u64>| {
        ms.map(|t| format!("{}s ago", now_ms.saturating_sub(t) / 1000))
            .unwrap_or_else(|| "-".into())
    };
    let state = serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut rows = vec![
        row(["STATE", &state]),
        row(["ENDPOINT", d.endpoint.as_deref().unwrap_or("-")]),
        row(["SOURCE", d.source.as_deref().unwrap_or("-")]),
        row(["CONNECTED SINCE", &ago(d.connected_since_ms)]),
        row([
            "FIRST CONNECTED",
            &d.first_connected_after_ms
                .map(|ms| format!("{ms} ms after the agent started"))
                .unwrap_or_else(|| "-".into()),
        ]),
        row(["ATTEMPTS", &d.attempts.to_string()]),
        row(["SERVER VERSION", d.server_version.as_deref().unwrap_or("-")]),
        row([
            "LAST ERROR",
            &d.last_error
                .as_ref()
                .map(|e| format!("{e} ({})", ago(d.last_error_ms)))
                .unwrap_or_else(|| "-".into()),
        ]),
    ];
    if let Some(n) = &d.node {
        rows.push(row([
            "NODE",
            &format!(
                "{}: capacity.pods {}, pod IPs for {} pods{}",
                n.name,
                n.capacity_pods,
                n.supported_pods,
                if n.exceeded {
                    " (EXCEEDED: pods beyond that stay ContainerCreating)"
                } else {
                    ""
                }
            ),
        ]));
    }
    table(&rows)
}

/// The node's ENIConfig as KEY VALUE lines; the state's age, and the last wait for it.
fn eniconfig_text(d: &doc::EniConfigDoc, now_ms: u64) -> String {
    let state = serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    if d.state == doc::EniConfigState::Disabled {
        return "custom networking is off (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG is not true): new ENIs use the node's subnet and security groups\n".into();
    }
    let dash = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".into());
    let rows = vec![
        row([
            "STATE",
            &match d.since_ms {
                Some(t) => format!("{state} (for {}s)", now_ms.saturating_sub(t) / 1000),
                None => state,
            },
        ]),
        row(["NODE", &dash(d.node.as_ref())]),
        row(["ENICONFIG", &dash(d.name.as_ref())]),
        row(["SELECTED BY", &dash(d.selected_by.as_ref())]),
        row(["SUBNET", &dash(d.subnet.as_ref())]),
        row([
            "SECURITY GROUPS",
            &if d.security_groups.is_empty() {
                "-".to_string()
            } else {
                d.security_groups.join(",")
            },
        ]),
        row(["REASON", &dash(d.reason.as_ref())]),
        row(["MESSAGE", &dash(d.message.as_ref())]),
        row([
            "LAST WAIT",
            &d.last_wait_ms
                .map(|ms| format!("{ms} ms without a valid ENIConfig before it resolved"))
                .unwrap_or_else(|| "-".into()),
        ]),
    ];
    table(&rows)
}

fn summary_text(d: &EnisDoc) -> String {
    let s = &d.summary;
    let mut out = format!(
        "instance {} ({}): ENIs {}/{}, IPs {} assigned / {} total (max {}), {} available, \
         {} cooling, {} releasing, {} prefixes",
        d.instance_id,
        d.instance_type,
        s.enis,
        s.max_enis,
        s.assigned_ips,
        s.total_ips,
        s.max_ips,
        s.available_ips,
        s.cooling_ips,
        s.releasing_ips,
        s.prefixes
    );
    if !d.orphaned.is_empty() {
        out.push_str(&format!(
            ", {} orphaned (address no longer on EC2)",
            d.orphaned.len()
        ));
    }
    out.push('\n');
    // Only when the agent does not provision (older agents send no mode).
    match d.provisioning.as_str() {
        "disabled" => out.push_str(
            "provisioning: disabled (DISABLE_NETWORK_RESOURCE_PROVISIONING): only the addresses attached to the node's ENIs serve pods\n",
        ),
        "imds-only" => out.push_str(
            "provisioning: imds-only (ENABLE_IMDS_ONLY_MODE): only the addresses IMDS lists serve pods; no EC2 call\n",
        ),
        _ => {}
    }
    if let Some(f) = &s.prefix_fallback {
        out.push_str(&format!(
            "prefix delegation falls back to secondary IPs: no free /28 in the subnet \
             (InsufficientCidrBlocks {} time(s)); next prefix try at {}\n",
            f.failures,
            rfc3339(f.retry_at_ms)
        ));
    }
    if !d.plan.is_empty() {
        let steps: Vec<String> = d
            .plan
            .iter()
            .map(|action| {
                // `{"action": "assign_ips", "count": 2, ...}` → `assign_ips(count=2, ...)`.
                let a: BTreeMap<String, Value> = serde_json::to_value(action)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default();
                let name = a.get("action").and_then(Value::as_str).unwrap_or("?");
                let args: Vec<String> = a
                    .iter()
                    .filter(|(k, _)| *k != "action")
                    .map(|(k, v)| {
                        format!(
                            "{k}={}",
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string())
                        )
                    })
                    .collect();
                format!("{name}({})", args.join(", "))
            })
            .collect();
        out.push_str(&format!("pending EC2 actions: {}\n", steps.join("; ")));
    }
    if let Some(e) = &d.last_error {
        out.push_str(&format!("last EC2 error: {e}\n"));
    }
    out
}

/// A runtime's 64-hex container ID as its usual 12-character short form; other IDs whole.
fn short(container_id: &str) -> String {
    if container_id.len() > 12 && container_id.chars().all(|c| c.is_ascii_hexdigit()) {
        container_id[..12].to_string()
    } else {
        container_id.to_string()
    }
}

/// `namespace/name`, or `-` when the runtime gave neither (e.g. `ctr run --cni`).
fn pod_name(namespace: &str, name: &str) -> String {
    if namespace.is_empty() && name.is_empty() {
        "-".into()
    } else {
        format!("{namespace}/{name}")
    }
}

fn enis_text(d: &EnisDoc, now_ms: u64) -> String {
    let mut out = summary_text(d);
    out.push('\n');
    let mut rows = vec![row([
        "ENI",
        "DEVICE",
        "MAC",
        "PRIMARY IP",
        "SUBNET",
        "CIDR",
        "TOTAL",
        "ASSIGNED",
        "COOLING",
        "FREE",
        "PREFIXES",
    ])];
    let mut enis: Vec<&Eni> = d.enis.iter().collect();
    enis.sort_by_key(|e| (e.network_card, e.device_number));
    for e in &enis {
        let total = e.addresses.len();
        let assigned = e.addresses.iter().filter(|a| a.assigned.is_some()).count();
        let cooling = e
            .addresses
            .iter()
            .filter(|a| a.assigned.is_none() && a.cooling)
            .count();
        let mut id = e.id.clone();
        if e.primary {
            id.push_str(" (primary)");
        }
        if e.deleting {
            id.push_str(" (deleting)");
        }
        rows.push(vec![
            id,
            // An ENI on a further network card (ENABLE_MULTI_NIC) as card/device.
            if e.network_card == 0 {
                e.device_number.to_string()
            } else {
                format!("{}/{}", e.network_card, e.device_number)
            },
            e.mac.clone(),
            e.primary_ip.clone(),
            e.subnet_id.clone(),
            e.subnet_cidr.clone(),
            total.to_string(),
            assigned.to_string(),
            cooling.to_string(),
            (total - assigned - cooling).to_string(),
            if e.prefixes.is_empty() {
                "-".into()
            } else {
                e.prefixes.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');
    let mut rows = vec![row(["IP", "ENI", "STATE", "CONTAINER", "POD"])];
    for e in &enis {
        let mut addrs: Vec<&Address> = e.addresses.iter().collect();
        addrs.sort_by_key(|a| a.ip.parse::<std::net::Ipv4Addr>().ok());
        for a in addrs {
            let (state, container, pod) = match &a.assigned {
                Some(p) => (
                    "assigned".to_string(),
                    short(&p.container_id),
                    pod_name(&p.namespace, &p.name),
                ),
                None if a.cooling => {
                    let left = a
                        .cooldown_ends_at_ms
                        .map(|t| t.saturating_sub(now_ms).div_ceil(1000));
                    let state = match left {
                        Some(s) => format!("cooling ({s}s left)"),
                        None => "cooling".into(),
                    };
                    (state, "-".into(), "-".into())
                }
                None => ("free".into(), "-".into(), "-".into()),
            };
            rows.push(vec![a.ip.clone(), e.id.clone(), state, container, pod]);
        }
    }
    out.push_str(&table(&rows));
    out
}

fn pods_text(pods: &[Pod], enis: &EnisDoc) -> String {
    let device: BTreeMap<&str, u32> = enis
        .enis
        .iter()
        .map(|e| (e.id.as_str(), e.device_number))
        .collect();
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.container_id).cmp(&(&b.namespace, &b.name, &b.container_id))
    });
    let mut rows = vec![row([
        "POD",
        "CONTAINER",
        "IF",
        "IP",
        "ENI",
        "DEVICE",
        "ASSIGNED AT",
    ])];
    for p in pods {
        rows.push(vec![
            pod_name(&p.namespace, &p.name),
            short(&p.container_id),
            p.if_name.clone(),
            p.ip.clone(),
            p.eni_id.clone(),
            device
                .get(p.eni_id.as_str())
                .map(u32::to_string)
                .unwrap_or_else(|| "-".into()),
            rfc3339(p.assigned_at_ms),
        ]);
    }
    table(&rows)
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_view_shows_endpoint_error_age_and_capacity() {
        let d = doc::ApiServerDoc {
            state: doc::ApiState::Connecting,
            endpoint: Some("https://10.100.0.1:443".into()),
            source: Some("kubernetes Service".into()),
            attempts: 7,
            last_error: Some("no answer".into()),
            last_error_ms: Some(10_000),
            node: Some(doc::NodeCapacity {
                name: "ip-1".into(),
                capacity_pods: 110,
                supported_pods: 29,
                exceeded: true,
            }),
            ..Default::default()
        };
        let t = api_text(&d, 25_000);
        assert!(t.contains("STATE            connecting"), "{t}");
        assert!(t.contains("no answer (15s ago)"), "{t}");
        assert!(
            t.contains("capacity.pods 110, pod IPs for 29 pods (EXCEEDED"),
            "{t}"
        );
        assert!(t.contains("ATTEMPTS         7"), "{t}");
    }

    #[test]
    fn an_eni_of_a_further_network_card_shows_as_card_slash_device() {
        let eni = |id: &str, card: u32, device: u32| doc::Eni {
            id: id.into(),
            network_card: card,
            device_number: device,
            ..Default::default()
        };
        let d = EnisDoc {
            enis: vec![eni("eni-c1", 1, 0), eni("eni-0", 0, 0), eni("eni-1", 0, 1)],
            ..Default::default()
        };
        let t = enis_text(&d, 0);
        let ids: Vec<String> = t
            .lines()
            .filter(|l| l.starts_with("eni-"))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect();
        assert_eq!(ids, ["eni-0 0", "eni-1 1", "eni-c1 1/0"], "{t}");
    }

    #[test]
    fn eniconfig_view_shows_the_choice_or_the_reason() {
        let d = doc::EniConfigDoc {
            state: doc::EniConfigState::Unresolved,
            node: Some("ip-1".into()),
            name: Some("us-east-1b".into()),
            selected_by: Some("label topology.kubernetes.io/zone".into()),
            reason: Some("ENIConfigNotFound".into()),
            message: Some("ENIConfig \"us-east-1b\" does not exist: create it".into()),
            since_ms: Some(10_000),
            ..Default::default()
        };
        let t = eniconfig_text(&d, 25_000);
        assert!(t.contains("STATE            unresolved (for 15s)"), "{t}");
        assert!(t.contains("REASON           ENIConfigNotFound"), "{t}");
        assert!(
            t.contains("SELECTED BY      label topology.kubernetes.io/zone"),
            "{t}"
        );
        let d = doc::EniConfigDoc {
            state: doc::EniConfigState::Resolved,
            subnet: Some("subnet-9".into()),
            security_groups: vec!["sg-1".into(), "sg-2".into()],
            last_wait_ms: Some(1234),
            ..Default::default()
        };
        let t = eniconfig_text(&d, 0);
        assert!(t.contains("SUBNET           subnet-9"), "{t}");
        assert!(t.contains("SECURITY GROUPS  sg-1,sg-2"), "{t}");
        assert!(t.contains("1234 ms without a valid ENIConfig"), "{t}");
        let t = eniconfig_text(&doc::EniConfigDoc::default(), 0);
        assert!(t.contains("custom networking is off"), "{t}");
    }

    #[test]
    fn endpoint_forms() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:61679").unwrap(),
            Endpoint::Tcp("127.0.0.1:61679".into())
        );
        assert_eq!(
            Endpoint::parse("localhost:1/").unwrap(),
            Endpoint::Tcp("localhost:1".into())
        );
        assert_eq!(
            Endpoint::parse("unix:/run/a.sock").unwrap(),
            Endpoint::Unix("/run/a.sock".into())
        );
        assert_eq!(
            Endpoint::parse("unix:///run/a.sock").unwrap(),
            Endpoint::Unix("/run/a.sock".into())
        );
        for bad in [
            "",
            "127.0.0.1",
            "http://h:99999",
            "unix:rel.sock",
            "http://h:1/v1/enis",
        ] {
            let e = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(e.contains("unix:/PATH"), "{bad}: {e}");
        }
        assert!(Endpoint::parse("https://h:1")
            .unwrap_err()
            .to_string()
            .contains("plain HTTP"));
    }

    #[test]
    fn short_ids_and_pod_names() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(short(&hex), hex[..12]);
        assert_eq!(short("vlbd592-n1-c1"), "vlbd592-n1-c1");
        assert_eq!(pod_name("", ""), "-");
        assert_eq!(pod_name("default", "web"), "default/web");
    }

    #[test]
    fn cooling_shows_seconds_left() {
        let doc = EnisDoc {
            enis: vec![Eni {
                id: "eni-1".into(),
                addresses: vec![
                    Address {
                        ip: "10.0.0.5".into(),
                        cooling: true,
                        cooldown_ends_at_ms: Some(10_500),
                        ..Default::default()
                    },
                    Address {
                        ip: "10.0.0.6".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
            last_error: Some("RequestLimitExceeded".into()),
            ..Default::default()
        };
        let t = enis_text(&doc, 3_000);
        assert!(!t.contains("provisioning:"), "{t}");
        let imds_only = EnisDoc {
            provisioning: "imds-only".into(),
            ..doc.clone()
        };
        assert!(
            enis_text(&imds_only, 3_000)
                .contains("provisioning: imds-only (ENABLE_IMDS_ONLY_MODE)"),
            "{t}"
        );
        assert!(t.contains("cooling (8s left)"), "{t}");
        assert!(t.contains("10.0.0.6  eni-1  free"), "{t}");
        assert!(t.contains("last EC2 error: RequestLimitExceeded"), "{t}");
    }

    #[test]
    fn a_prefix_fallback_is_said_with_its_next_try() {
        let mut d = EnisDoc::default();
        assert!(!enis_text(&d, 0).contains("falls back"));
        d.summary.prefix_fallback = Some(doc::PrefixFallback {
            since_ms: 0,
            failures: 2,
            retry_at_ms: 360_000,
        });
        let t = enis_text(&d, 0);
        assert!(
            t.contains("falls back to secondary IPs")
                && t.contains("InsufficientCidrBlocks 2 time(s)")
                && t.contains("1970-01-01T00:06:00"),
            "{t}"
        );
    }
}
