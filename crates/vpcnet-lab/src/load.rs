//! The lab's load generator: HTTP/1.1 `GET`s from inside a lab namespace against a load
//! balancer address (or any address of the VPC), `connections` at a time for a duration, one
//! request per connection (`Connection: close`, as busybox httpd answers). Reports requests,
//! errors by kind, throughput, latency percentiles and which target answered (the first line of
//! each response body: the lab's `httpd` containers answer their name).

use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub target: SocketAddrV4,
    /// Request path, e.g. `/`.
    pub path: String,
    /// Requests in flight at once (1..=256).
    pub connections: usize,
    /// How long to send.
    pub duration: Duration,
    /// Deadline of one request (connect + answer).
    pub timeout: Duration,
    /// Ends the load early once set (before `duration` ran out): each connection finishes its
    /// request in flight and sends no more.
    pub stop: Option<Arc<AtomicBool>>,
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadReport {
    /// Requests sent (answered or not).
    pub requests: u64,
    /// Requests that did not get a 2xx answer.
    pub errors: u64,
    /// Errors by kind: `connect: ...`, `timeout`, `HTTP 503`, `closed without an answer`.
    pub error_kinds: BTreeMap<String, u64>,
    /// Seconds the run took.
    pub seconds: f64,
    /// Requests per second.
    pub rate: f64,
    /// Latency of the successful requests.
    pub latency: Latency,
    /// Successful answers by the first line of their body (the answering target).
    pub by_responder: BTreeMap<String, u64>,
}

/// The `q`-quantile (0..=1) of sorted `samples` by the nearest-rank method; 0 when empty.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Percentiles of unsorted `samples`.
pub fn latency(samples: &mut [Duration]) -> Latency {
    samples.sort_unstable();
    Latency {
        p50_ms: ms(quantile(samples, 0.50)),
        p90_ms: ms(quantile(samples, 0.90)),
        p99_ms: ms(quantile(samples, 0.99)),
        max_ms: ms(samples.last().copied().unwrap_or_default()),
    }
}

/// The outcome of one request: Ok(first body line) on 2xx, else the error kind.
pub type Outcome = std::result::Result<String, String>;

/// Parse an HTTP/1.x answer: a 2xx status gives the first line of the body.
pub fn parse_answer(raw: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(raw);
    let Some(status) = text.lines().next() else {
        return Err("closed without an answer".into());
    };
    let code: u16 = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| "malformed answer".to_string())?;
    if !(200..300).contains(&code) {
        return Err(format!("HTTP {code}"));
    }
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok(body.lines().next().unwrap_or("").trim().to_string())
}

async fn one(opts: &LoadOptions) -> Outcome {
    let go = async {
        let mut s = tokio::net::TcpStream::connect(opts.target)
            .await
            .map_err(|e| format!("connect: {}", e.kind()))?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: vpcnet-lab-load\r\nConnection: close\r\n\r\n",
            opts.path,
            opts.target.ip()
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send: {}", e.kind()))?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf)
            .await
            .map_err(|e| format!("receive: {}", e.kind()))?;
        parse_answer(&buf)
    };
    tokio::time::timeout(opts.timeout, go)
        .await
        .unwrap_or_else(|_| Err("timeout".into()))
}

/// Send load as `opts` says, from the calling thread's network namespace. Errors: bad options.
pub async fn run(opts: &LoadOptions) -> Result<LoadReport> {
    if !(1..=256).contains(&opts.connections) {
        bail!(
            "connections must be between 1 and 256 (got {})",
            opts.connections
        );
    }
    if opts.duration.is_zero() {
        bail!("the duration must be longer than zero");
    }
    let t0 = Instant::now();
    let end = t0 + opts.duration;
    let workers = (0..opts.connections).map(|_| async {
        let mut out: Vec<(Duration, Outcome)> = Vec::new();
        let stopped = || {
            opts.stop
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed))
        };
        while Instant::now() < end && !stopped() {
            let sent = Instant::now();
            let r = one(opts).await;
            out.push((sent.elapsed(), r));
        }
        out
    });
    let results = futures::future::join_all(workers).await;
    let mut report = LoadReport {
        seconds: t0.elapsed().as_secs_f64(),
        ..Default::default()
    };
    let mut samples = Vec::new();
    for (took, r) in results.into_iter().flatten() {
        report.requests += 1;
        match r {
            Ok(who) => {
                samples.push(took);
                *report.by_responder.entry(who).or_default() += 1;
            }
            Err(kind) => {
                report.errors += 1;
                *report.error_kinds.entry(kind).or_default() += 1;
            }
        }
    }
    report.rate = (report.requests as f64 / report.seconds * 10.0).round() / 10.0;
    report.latency = latency(&mut samples);
    Ok(report)
}

/// Runs [`run`] on a thread inside network namespace `netns` (a lab node's, say), with its own
/// runtime, so every packet stays in the lab.
pub fn run_in_netns(netns: &str, opts: LoadOptions) -> Result<LoadReport> {
    crate::spawn::in_netns_async(netns, move || async move { run(&opts).await })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_set_stop_flag_ends_the_load_before_its_duration() {
        let opts = LoadOptions {
            target: "127.0.0.1:9".parse().unwrap(),
            path: "/".into(),
            connections: 2,
            duration: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
            stop: Some(Arc::new(AtomicBool::new(true))),
        };
        let r = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(&opts))
            .unwrap();
        assert_eq!(r.requests, 0, "{r:?}");
        assert!(r.seconds < 5.0, "{r:?}");
    }

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<Duration> = (1..=100).map(d).collect();
        assert_eq!(quantile(&s, 0.5), d(50));
        assert_eq!(quantile(&s, 0.9), d(90));
        assert_eq!(quantile(&s, 0.99), d(99));
        assert_eq!(quantile(&s, 1.0), d(100));
        assert_eq!(quantile(&s, 0.0), d(1));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
        assert_eq!(quantile(&[d(7)], 0.99), d(7));
        let mut shuffled = vec![d(30), d(10), d(20)];
        let l = latency(&mut shuffled);
        assert_eq!((l.p50_ms, l.max_ms), (20.0, 30.0));
    }

    #[test]
    fn answers() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nc1\nmore\n";
        assert_eq!(parse_answer(ok), Ok("c1".into()));
        assert_eq!(
            parse_answer(b"HTTP/1.0 503 Service Unavailable\r\n\r\n"),
            Err("HTTP 503".into())
        );
        assert_eq!(parse_answer(b""), Err("closed without an answer".into()));
        assert_eq!(parse_answer(b"garbage"), Err("malformed answer".into()));
    }
}
