//! `vpcnet inspect`: an agent's introspection endpoint (`/healthz`, `/v1/enis`, `/v1/pods`,
//! `/v1/env-settings`, `/v1/apiserver`, `/v1/eniconfig`, served on `INTROSPECTION_BIND_ADDRESS`, default 127.0.0.1:61679) as
//! tables or JSON. The HTTP client is hyper over TCP or a Unix socket, with one deadline for
//! the whole command. Fetching ([`fetch`]) is separate from rendering ([`render`]) so `vpcnet
//! lab inspect` can fetch from inside a lab node's network namespace.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use serde_json::Value;
use tables::{api_text, eniconfig_text, enis_text, pods_text, row, summary_text};
use vpcnet_introspection::client::{get, get_json, Endpoint, Reply, DEFAULT_ENDPOINT};
use vpcnet_introspection::text::table;
use vpcnet_introspection::{self as doc, EnisDoc, EnvSettings, Pods};

mod datapath;
mod tables;

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
