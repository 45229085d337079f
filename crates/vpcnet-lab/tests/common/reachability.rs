//! Watching running pods stay reachable while a node's CNI changes under them: a prober that
//! pings each pod once per round (and records the node's state at a miss), a fast pinger
//! (200 pings a second per pod) and a netlink monitor that times how long a pod's reply path
//! (its ENI's address and table, its `from` rule) was missing.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wait_until;

/// One missed ping: the address, when (since the prober started), whether an immediate second
/// ping answered, and the node's rules, routes and neighbour entries for it at that moment.
#[derive(Debug, Clone)]
pub struct Miss {
    pub ip: Ipv4Addr,
    pub at: Duration,
    pub retry_answered: bool,
    pub node_state: String,
}

/// Pings every address in `targets` from the namespace `netns` (busybox ping, 1 s deadline)
/// in rounds until stopped; records every miss with its time and the node's state for the
/// address (`node_ns`), and the test's phases ([`Prober::mark`]) on the same clock.
pub struct Prober {
    stop: Arc<AtomicBool>,
    targets: Arc<Mutex<Vec<Ipv4Addr>>>,
    misses: Arc<Mutex<Vec<Miss>>>,
    rounds: Arc<Mutex<u64>>,
    marks: Mutex<Vec<(Duration, String)>>,
    t0: Instant,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn ping(ns: &str, ip: Ipv4Addr) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "busybox", "ping", "-c", "1", "-W", "1"])
        .arg(ip.to_string())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The node's kernel state that decides whether `ip` is reachable: its rules, the routes of
/// every table (main and the ENI tables), its neighbour entry, and the links (the pod's veth).
fn node_state(node_ns: &str, ip: Ipv4Addr) -> String {
    let ip_s = ip.to_string();
    let run = |args: &[&str]| {
        Command::new("ip")
            .arg("-n")
            .arg(node_ns)
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let neigh: Vec<String> = run(&["neigh", "show"])
        .lines()
        .filter(|l| l.contains(&ip_s))
        .map(String::from)
        .collect();
    format!(
        "rules:\n{}routes:\n{}neighbour: {neigh:?}\nlinks:\n{}",
        run(&["rule", "show"]),
        run(&["route", "show", "table", "all"])
            .lines()
            .filter(|l| !l.starts_with("local ") && !l.starts_with("broadcast "))
            .collect::<Vec<_>>()
            .join("\n"),
        run(&["-br", "link", "show"])
    )
}

impl Prober {
    pub fn start(netns: &str, node_ns: &str, targets: Vec<Ipv4Addr>) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let targets = Arc::new(Mutex::new(targets));
        let misses = Arc::new(Mutex::new(Vec::new()));
        let rounds = Arc::new(Mutex::new(0));
        let (s, t, m, r, ns, node_ns) = (
            stop.clone(),
            targets.clone(),
            misses.clone(),
            rounds.clone(),
            netns.to_string(),
            node_ns.to_string(),
        );
        let t0 = Instant::now();
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let now: Vec<Ipv4Addr> = t.lock().unwrap().clone();
                for ip in now {
                    if !ping(&ns, ip) {
                        let at = t0.elapsed();
                        let node_state = node_state(&node_ns, ip);
                        let retry_answered = ping(&ns, ip);
                        m.lock().unwrap().push(Miss {
                            ip,
                            at,
                            retry_answered,
                            node_state,
                        });
                    }
                }
                *r.lock().unwrap() += 1;
            }
        });
        Prober {
            stop,
            targets,
            misses,
            rounds,
            marks: Mutex::new(Vec::new()),
            t0,
            thread: Some(thread),
        }
    }

    /// Notes the start of a test phase on the prober's clock (printed with the misses);
    /// returns that time.
    pub fn mark(&self, phase: &str) -> Duration {
        let at = self.t0.elapsed();
        eprintln!("[{at:?}] {phase}");
        self.marks.lock().unwrap().push((at, phase.to_string()));
        at
    }

    /// Stops probing `ip` (its pod is being deleted on purpose).
    pub fn forget(&self, ip: Ipv4Addr) {
        self.targets.lock().unwrap().retain(|t| *t != ip);
    }

    pub fn rounds(&self) -> u64 {
        *self.rounds.lock().unwrap()
    }

    /// Waits until the prober has done `n` more rounds.
    pub fn wait_rounds(&self, n: u64) {
        let start = self.rounds();
        wait_until("prober rounds", Duration::from_secs(60), || {
            self.rounds() >= start + n
        });
    }

    /// Stops; returns the rounds done and the misses (each printed with the node's state).
    pub fn finish(mut self) -> (u64, Vec<Miss>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let m = self.misses.lock().unwrap().clone();
        for miss in &m {
            eprintln!(
                "miss: {} at {:?} (second ping {}):\n{}",
                miss.ip,
                miss.at,
                if miss.retry_answered {
                    "answered"
                } else {
                    "missed too"
                },
                miss.node_state
            );
        }
        eprintln!("phases: {:?}", self.marks.lock().unwrap());
        (self.rounds(), m)
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Pings each of `targets` 200 times a second from `netns` (busybox ping, one process per
/// address) until [`FastPinger::lost`]: a reply path missing for 5 ms or more shows as lost
/// pings, which the once-per-round [`Prober`] catches only by chance.
pub struct FastPinger {
    pings: Vec<(Ipv4Addr, Child)>,
}

/// Pings of one address: how many were sent, and how many of them got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingCount {
    pub ip: Ipv4Addr,
    pub sent: u64,
    pub lost: u64,
}

impl FastPinger {
    pub fn start(netns: &str, targets: &[Ipv4Addr]) -> FastPinger {
        let pings = targets
            .iter()
            .map(|ip| {
                let child = Command::new("ip")
                    .args([
                        "netns", "exec", netns, "busybox", "ping", "-q", "-i", "0.005",
                    ])
                    .arg(ip.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn busybox ping");
                (*ip, child)
            })
            .collect();
        // Let the first replies come back before the phase under test starts.
        std::thread::sleep(Duration::from_millis(300));
        FastPinger { pings }
    }

    /// Waits 1 s (replies still in flight arrive, even on a loaded host), stops the pingers
    /// (SIGINT: busybox prints its statistics) and counts, per address, the pings sent and
    /// those never answered (the one sent just before SIGINT is not counted as lost).
    pub fn lost(mut self) -> Vec<PingCount> {
        std::thread::sleep(Duration::from_secs(1));
        for (_, child) in &self.pings {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        std::mem::take(&mut self.pings)
            .into_iter()
            .map(|(ip, child)| {
                let out = child.wait_with_output().expect("busybox ping output");
                let text = String::from_utf8_lossy(&out.stdout);
                // "N packets transmitted, M packets received, ..."
                let nums: Vec<u64> = text
                    .lines()
                    .find(|l| l.contains("packets transmitted"))
                    .unwrap_or_else(|| panic!("no ping statistics for {ip}: {text}"))
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|w| w.parse().ok())
                    .collect();
                let (sent, got) = (nums[0], nums[1]);
                PingCount {
                    ip,
                    sent,
                    lost: sent.saturating_sub(got + 1),
                }
            })
            .collect()
    }
}

/// A test that fails mid-phase must not leave pingers running (they would keep the lab's
/// namespace alive after its teardown).
impl Drop for FastPinger {
    fn drop(&mut self) {
        for (_, child) in &mut self.pings {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `ip -ts monitor address route rule` in a node's namespace: the kernel's own record of every
/// address, route and rule change while it runs.
pub struct NetlinkMonitor {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// A time the reply path of pods on a secondary ENI was missing, from the netlink monitor:
/// `what` was deleted and came back after `length` (`None`: not back when the monitor
/// stopped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGap {
    pub what: String,
    pub length: Option<Duration>,
}

impl NetlinkMonitor {
    pub fn start(node_ns: &str) -> NetlinkMonitor {
        let mut child = Command::new("ip")
            .args(["-ts", "-n", node_ns, "monitor", "address", "route", "rule"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ip monitor");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        // Let it subscribe before the phase under test starts.
        std::thread::sleep(Duration::from_millis(200));
        NetlinkMonitor {
            child,
            lines,
            reader: Some(reader),
        }
    }

    /// Stops the monitor; the reply-path gaps it saw ([`reply_path_gaps`]).
    pub fn gaps(mut self) -> Vec<PathGap> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let lines = self.lines.lock().unwrap().clone();
        reply_path_gaps(&lines)
    }
}

impl Drop for NetlinkMonitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `[2026-12-01T20:57:45.925842] text` → (microseconds since midnight, text). Lines without a
/// timestamp (an address's `valid_lft` continuation) are `None`.
fn stamped(line: &str) -> Option<(i64, &str)> {
    let rest = line.strip_prefix('[')?;
    let (ts, text) = rest.split_once("] ")?;
    let time = ts.split_once('T')?.1;
    let mut parts = time.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    let micros = ((h * 60 + m) * 60) as f64 * 1e6 + s * 1e6;
    Some((micros.round() as i64, text))
}

/// From `ip -ts monitor address route rule` lines, every stretch in which the reply path of
/// pods on a secondary ENI (eth1 and up) was gone:
/// - the ENI's address deleted (`Deleted 12: eth1 inet …`; with its last address the kernel
///   flushes every route via the ENI without a netlink message) until its table's default
///   route is back (`default via … dev eth1 table N`);
/// - an ENI table's default route deleted until it is back;
/// - a pod's rule at 1536 deleted (`Deleted 1536: from <ip> lookup N`) until it is back.
pub fn reply_path_gaps(lines: &[String]) -> Vec<PathGap> {
    let events: Vec<(i64, &str)> = lines.iter().filter_map(|l| stamped(l)).collect();
    let mut gaps = Vec::new();
    for (i, (t, text)) in events.iter().enumerate() {
        let Some(gone) = text.strip_prefix("Deleted ") else {
            continue;
        };
        let back: Box<dyn Fn(&str) -> bool> = if let Some(dev) = secondary_eni_address(gone) {
            let want = format!(" dev {dev} table ");
            Box::new(move |l: &str| l.starts_with("default via ") && l.contains(&want))
        } else if gone.starts_with("default via ")
            && gone.contains(" table ")
            && !gone.contains(" dev eth0")
        {
            let again = gone.to_string();
            Box::new(move |l: &str| l == again)
        } else if gone.starts_with("1536:") {
            let again = gone.to_string();
            Box::new(move |l: &str| l == again)
        } else {
            continue;
        };
        let length = events[i + 1..]
            .iter()
            .find(|(_, l)| back(l))
            .map(|(t2, _)| Duration::from_micros((t2 - t).max(0) as u64));
        gaps.push(PathGap {
            what: gone.trim_end().to_string(),
            length,
        });
    }
    gaps
}

/// `12: eth1    inet 10.0.1.14/24 …` → `Some("eth1")` for an IPv4 address of eth1 and up.
fn secondary_eni_address(deleted: &str) -> Option<&str> {
    let mut words = deleted.split_whitespace();
    let _index = words.next()?.strip_suffix(':')?;
    let dev = words.next()?;
    let n: u32 = dev.strip_prefix("eth")?.parse().ok()?;
    (n >= 1 && words.next()? == "inet").then_some(dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(String::from).collect()
    }

    #[test]
    fn an_address_flush_counts_until_the_default_route_is_back() {
        // As recorded in the lab when the VPC CNI's ipamd started on a node with eth1 in use.
        let log = lines(
            "[2026-12-01T20:57:45.788296] Deleted 1024:\tfrom all fwmark 0x80/0x80 lookup main
[2026-12-01T20:57:45.925842] Deleted 12: eth1    inet 10.0.1.14/24 brd 10.0.1.255 scope global eth1
       valid_lft forever preferred_lft forever
[2026-12-01T20:57:45.928785] 12: eth1    inet 10.0.1.14/24 brd 10.0.1.255 scope global eth1
[2026-12-01T20:57:45.928873] 10.0.1.1 dev eth1 table 2 scope link 
[2026-12-01T20:57:45.928879] default via 10.0.1.1 dev eth1 table 2 
[2026-12-01T20:57:45.942100] Deleted 1536:\tfrom 10.0.1.92 lookup 2
[2026-12-01T20:57:45.942146] 1536:\tfrom 10.0.1.92 lookup 2
[2026-12-01T20:57:46.000000] Deleted 1536:\tfrom 10.0.1.57 lookup 2
[2026-12-01T20:57:46.100000] Deleted 7: eth0    inet 10.0.1.85/24 scope global eth0",
        );
        assert_eq!(
            reply_path_gaps(&log),
            vec![
                PathGap {
                    what: "12: eth1    inet 10.0.1.14/24 brd 10.0.1.255 scope global eth1".into(),
                    length: Some(Duration::from_micros(3037)),
                },
                PathGap {
                    what: "1536:\tfrom 10.0.1.92 lookup 2".into(),
                    length: Some(Duration::from_micros(46)),
                },
                PathGap {
                    what: "1536:\tfrom 10.0.1.57 lookup 2".into(),
                    length: None,
                },
            ]
        );
    }

    #[test]
    fn replaced_routes_and_new_rules_are_no_gap() {
        let log = lines(
            "[2026-12-01T20:57:28.756916] 10.0.1.1 dev eth1 table 2 scope link 
[2026-12-01T20:57:28.757042] default via 10.0.1.1 dev eth1 table 2 
[2026-12-01T20:57:28.757414] Deleted 10.0.1.0/24 dev eth1 proto kernel scope link src 10.0.1.14 
[2026-12-01T20:57:28.762657] 1536:\tfrom 10.0.1.154 lookup 2",
        );
        assert_eq!(reply_path_gaps(&log), vec![]);
    }
}
