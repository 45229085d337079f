//! HAProxy (Debian's `haproxy`) as one load balancer's data plane: the configuration rendered
//! from the emulator's [`LbSpec`], the runtime API on its admin socket (`add server`,
//! `enable health`, `set server ... state drain|maint|ready`, `shutdown sessions server`,
//! `del server`, `show stat`, `show servers state`) and reloads through the master CLI.
//!
//! Mapping: one `frontend` per listener (`mode tcp` for network load balancers, `mode http` for
//! application ones) bound on every address of the load balancer; one `backend` per target group
//! with `balance roundrobin` and the target group's health check (`inter` = interval, `rise` =
//! healthy threshold, `fall` = unhealthy threshold, `timeout check` = timeout, `option httpchk`
//! + `http-check expect rstatus` for HTTP checks, `port` for a fixed health-check port).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use vpcnet_emu::elbv2::{
    CheckFailure, HealthCheckPort, LbSpec, LbType, Protocol, TargetGroupSpec, TargetSpec,
};

/// NLB's idle timeout (350 s) for TCP frontends and backends.
const TCP_IDLE_TIMEOUT_S: u32 = 350;
/// ALB's default idle timeout (60 s) for HTTP frontends and backends.
const HTTP_IDLE_TIMEOUT_S: u32 = 60;

/// The files of one HAProxy, all in the load balancer's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub dir: PathBuf,
}

impl Files {
    pub fn config(&self) -> PathBuf {
        self.dir.join("haproxy.cfg")
    }
    /// The runtime API (stats socket, level admin).
    pub fn admin_socket(&self) -> PathBuf {
        self.dir.join("admin.sock")
    }
    /// The master CLI (reloads).
    pub fn master_socket(&self) -> PathBuf {
        self.dir.join("master.sock")
    }
    /// Server states dumped before a reload and loaded by the new worker.
    pub fn state_file(&self) -> PathBuf {
        self.dir.join("servers.state")
    }
}

/// Backend name of a target group: `tg-` + its name (ELBv2 names are unique per region).
pub fn backend_name(tg: &TargetGroupSpec) -> String {
    format!("tg-{}", tg.name)
}

/// Server name of a target: `a.b.c.d-port` (HAProxy allows letters, digits, `-_.:`).
pub fn server_name(ip: Ipv4Addr, port: u16) -> String {
    format!("{ip}-{port}")
}

/// The target of a server name made by [`server_name`].
pub fn parse_server_name(name: &str) -> Option<(Ipv4Addr, u16)> {
    let (ip, port) = name.rsplit_once('-')?;
    Some((ip.parse().ok()?, port.parse().ok()?))
}

/// The `http-check expect rstatus` regex of an ELBv2 matcher (`200`, `200,202`, `200-299`).
pub fn status_regex(matcher: &str) -> Result<String> {
    let codes = vpcnet_emu::elbv2::health_check::matcher_codes(matcher)
        .map_err(|e| anyhow::anyhow!("matcher {matcher:?}: {}", e.message))?;
    let list: Vec<String> = codes.iter().map(|c| c.to_string()).collect();
    Ok(format!("^({})$", list.join("|")))
}

/// The arguments of a server line / `add server` for target `t` of `tg`.
pub fn server_args(tg: &TargetGroupSpec, t: &TargetSpec) -> String {
    let h = &tg.health;
    let mut s = format!(
        "{}:{} check inter {}s rise {} fall {}",
        t.ip, t.port, h.interval_seconds, h.healthy_threshold, h.unhealthy_threshold
    );
    if let HealthCheckPort::Port(p) = h.port {
        let _ = write!(s, " port {p}");
    }
    s
}

/// A server that already runs in HAProxy (rendered into the configuration, so a reload keeps
/// it; its state comes back from the state file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Present {
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// The configuration for `spec` with, per backend name, the servers present now. New servers
/// are added at runtime (so they start down, as ELBv2's `initial`), never through a reload.
pub fn render(
    spec: &LbSpec,
    files: &Files,
    present: &BTreeMap<String, Vec<Present>>,
) -> Result<String> {
    let mut c = String::new();
    let http_lb = spec.lb_type == LbType::Application;
    let idle = if http_lb {
        HTTP_IDLE_TIMEOUT_S
    } else {
        TCP_IDLE_TIMEOUT_S
    };
    let _ = writeln!(
        c,
        "# {} — rendered by vpcnet-lab from the emulator's ELBv2 state",
        spec.arn
    );
    let _ = writeln!(c, "global");
    let _ = writeln!(c, "  maxconn 4096");
    let _ = writeln!(
        c,
        "  stats socket {} level admin expose-fd listeners",
        files.admin_socket().display()
    );
    let _ = writeln!(c, "  server-state-file {}", files.state_file().display());
    let _ = writeln!(c, "defaults");
    let _ = writeln!(c, "  mode {}", if http_lb { "http" } else { "tcp" });
    let _ = writeln!(c, "  timeout connect 5s");
    let _ = writeln!(c, "  timeout client {idle}s");
    let _ = writeln!(c, "  timeout server {idle}s");
    let _ = writeln!(c, "  load-server-state-from-file global");
    for l in &spec.listeners {
        let Some(tg) = spec.target_groups.iter().find(|t| t.arn == l.target_group) else {
            bail!(
                "listener on port {} forwards to an unknown target group",
                l.port
            );
        };
        let _ = writeln!(c, "frontend listener-{}", l.port);
        for a in &spec.addresses {
            let _ = writeln!(c, "  bind {}:{}", a.ip, l.port);
        }
        if l.protocol == Protocol::Http {
            let _ = writeln!(c, "  option forwardfor");
        }
        let _ = writeln!(c, "  default_backend {}", backend_name(tg));
    }
    for tg in &spec.target_groups {
        let h = &tg.health;
        let name = backend_name(tg);
        let _ = writeln!(c, "backend {name}");
        let _ = writeln!(c, "  balance roundrobin");
        let _ = writeln!(c, "  timeout connect {}s", h.timeout_seconds);
        let _ = writeln!(c, "  timeout check {}s", h.timeout_seconds);
        if h.protocol != Protocol::Tcp {
            let path = h.path.as_deref().unwrap_or("/");
            let _ = writeln!(c, "  option httpchk GET {path}");
            let matcher = h.matcher.as_deref().unwrap_or("200");
            let _ = writeln!(c, "  http-check expect rstatus {}", status_regex(matcher)?);
        }
        for p in present.get(&name).into_iter().flatten() {
            let t = TargetSpec {
                ip: p.ip,
                port: p.port,
                draining: false,
            };
            let _ = writeln!(
                c,
                "  server {} {}",
                server_name(p.ip, p.port),
                server_args(tg, &t)
            );
        }
    }
    Ok(c)
}

/// Commands that add target `t` to `backend` as ELBv2 registers it: checks on, in service, and
/// down until `rise` checks pass (ELBv2's `initial`). One line: HAProxy runs them in order.
pub fn add_server_command(backend: &str, tg: &TargetGroupSpec, t: &TargetSpec) -> Vec<String> {
    let s = format!("{backend}/{}", server_name(t.ip, t.port));
    vec![
        format!("add server {s} {}", server_args(tg, t)),
        format!("enable health {s}"),
        format!("enable server {s}; set server {s} health down"),
    ]
}

/// Sends one runtime API command (several joined by `;`) to `socket` and returns the answer.
/// Errors: the socket does not answer within 5 s.
pub fn command(socket: &Path, cmd: &str) -> Result<String> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("HAProxy socket {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(cmd.as_bytes())?;
    s.write_all(b"\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("reading HAProxy's answer to {cmd:?}"))?;
    Ok(out)
}

/// Like [`command`], but an answer that is not one of HAProxy's success phrases (empty, `New
/// server registered.`, `Server deleted.`) is an error quoting it.
pub fn checked(socket: &Path, cmd: &str) -> Result<String> {
    let out = command(socket, cmd)?;
    let bad = out
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !["New server registered.", "Server deleted."].contains(l));
    match bad {
        Some(l) => bail!("HAProxy refused {cmd:?}: {l}"),
        None => Ok(out),
    }
}

/// Asks the master (its CLI `socket`) to reload: re-read the configuration and replace the
/// worker. The master re-executes itself on every reload, so its socket may refuse connections
/// for a moment: tried again for up to `patience`.
pub fn reload(socket: &Path, patience: Duration) -> Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        match command(socket, "reload") {
            Ok(_) => return Ok(()),
            Err(e) if t0.elapsed() >= patience => {
                return Err(e.context("asking the HAProxy master to reload"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The pid of the worker answering on the admin socket (`show info`).
pub fn worker_pid(socket: &Path) -> Result<u32> {
    let info = command(socket, "show info")?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid: "))
        .and_then(|p| p.trim().parse().ok())
        .context("no Pid in HAProxy's show info")
}

/// One server row of `show stat` (CSV).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStat {
    pub backend: String,
    pub server: String,
    /// `UP`, `UP 1/2` (going down), `DOWN`, `DOWN 1/3` (going up), `DRAIN`, `MAINT`, `no check`.
    pub status: String,
    /// `L4OK`, `L7OK`, `L4CON`, `L4TOUT`, `L7STS`, `INI`, ... (empty without checks).
    pub check_status: String,
    /// HTTP status of the last HTTP check.
    pub check_code: Option<u16>,
    /// Current sessions.
    pub sessions: u32,
}

/// Parse `show stat` CSV (header `# pxname,svname,...`), servers only.
pub fn parse_stat(csv: &str) -> Vec<ServerStat> {
    let mut lines = csv.lines();
    let Some(header) = lines.next().and_then(|h| h.strip_prefix("# ")) else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').collect();
    let idx = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(px), Some(sv), Some(st), Some(cs), Some(cc), Some(sc)) = (
        idx("pxname"),
        idx("svname"),
        idx("status"),
        idx("check_status"),
        idx("check_code"),
        idx("scur"),
    ) else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let server = f.get(sv)?.to_string();
            if server == "FRONTEND" || server == "BACKEND" {
                return None;
            }
            Some(ServerStat {
                backend: f.get(px)?.to_string(),
                server,
                status: f.get(st)?.to_string(),
                check_status: f.get(cs)?.trim_start_matches('*').trim().to_string(),
                check_code: f.get(cc).and_then(|c| c.parse().ok()),
                sessions: f.get(sc).and_then(|c| c.parse().ok()).unwrap_or(0),
            })
        })
        .collect()
}

impl ServerStat {
    /// HAProxy counts the server up (`UP`, `UP x/y` going down, or `DRAIN`: up but taking no
    /// new connections).
    pub fn up(&self) -> bool {
        self.status.starts_with("UP") || self.status == "DRAIN"
    }

    /// Whether a check has completed (not `INI`, not empty).
    pub fn checked(&self) -> bool {
        !self.check_status.is_empty() && self.check_status != "INI"
    }

    /// The last check's failure in ELBv2's terms, None when it passed or none completed:
    /// timeouts (`L4TOUT`, `L6TOUT`, `L7TOUT`) → Timeout, a wrong HTTP status (`L7STS`) →
    /// ResponseCode, every other failure (`L4CON`, `L7RSP`, `SOCKERR`, ...) → Failed.
    pub fn failure(&self) -> Option<CheckFailure> {
        match self.check_status.as_str() {
            "" | "INI" | "L4OK" | "L6OK" | "L7OK" | "L7OKC" | "UNK" => None,
            "L4TOUT" | "L6TOUT" | "L7TOUT" => Some(CheckFailure::Timeout),
            "L7STS" => Some(CheckFailure::ResponseCode(self.check_code)),
            _ => Some(CheckFailure::Failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_emu::elbv2::{HealthCheck, ListenerSpec, PlaneAddress};

    fn tg(protocol: Protocol, port: HealthCheckPort) -> TargetGroupSpec {
        TargetGroupSpec {
            arn: "arn:tg".into(),
            name: "web".into(),
            protocol,
            health: HealthCheck {
                enabled: true,
                protocol,
                port,
                path: (protocol == Protocol::Http).then(|| "/healthz".into()),
                interval_seconds: 5,
                timeout_seconds: 2,
                healthy_threshold: 2,
                unhealthy_threshold: 3,
                matcher: (protocol == Protocol::Http).then(|| "200-202".into()),
            },
            targets: vec![],
            terminate_on_removal: false,
        }
    }

    fn spec(lb_type: LbType, tg: TargetGroupSpec) -> LbSpec {
        LbSpec {
            arn: "arn:lb".into(),
            name: "web".into(),
            lb_type,
            addresses: vec![PlaneAddress {
                eni_id: "eni-1".into(),
                mac: "02:00:00:00:00:01".into(),
                ip: "10.0.1.50".parse().unwrap(),
                subnet_cidr: "10.0.1.0/24".parse().unwrap(),
            }],
            listeners: vec![ListenerSpec {
                port: 80,
                protocol: if lb_type == LbType::Network {
                    Protocol::Tcp
                } else {
                    Protocol::Http
                },
                target_group: tg.arn.clone(),
            }],
            target_groups: vec![tg],
        }
    }

    #[test]
    fn tcp_config_has_frontend_backend_checks_and_present_servers() {
        let files = Files {
            dir: "/run/x".into(),
        };
        let s = spec(
            LbType::Network,
            tg(Protocol::Tcp, HealthCheckPort::TrafficPort),
        );
        let mut present = BTreeMap::new();
        present.insert(
            "tg-web".to_string(),
            vec![Present {
                ip: "10.0.1.7".parse().unwrap(),
                port: 8080,
            }],
        );
        let c = render(&s, &files, &present).unwrap();
        for want in [
            "stats socket /run/x/admin.sock level admin expose-fd listeners",
            "server-state-file /run/x/servers.state",
            "load-server-state-from-file global",
            "mode tcp",
            "frontend listener-80\n  bind 10.0.1.50:80\n  default_backend tg-web",
            "backend tg-web\n  balance roundrobin",
            "timeout check 2s",
            "server 10.0.1.7-8080 10.0.1.7:8080 check inter 5s rise 2 fall 3\n",
            "timeout client 350s",
        ] {
            assert!(c.contains(want), "missing {want:?} in\n{c}");
        }
        assert!(!c.contains("httpchk"));
    }

    #[test]
    fn http_config_checks_path_and_matcher() {
        let files = Files { dir: "/d".into() };
        let s = spec(
            LbType::Application,
            tg(Protocol::Http, HealthCheckPort::Port(9000)),
        );
        let c = render(&s, &files, &BTreeMap::new()).unwrap();
        assert!(c.contains("mode http"), "{c}");
        assert!(c.contains("option httpchk GET /healthz"), "{c}");
        assert!(
            c.contains("http-check expect rstatus ^(200|201|202)$"),
            "{c}"
        );
        assert!(c.contains("option forwardfor"), "{c}");
        let t = TargetSpec {
            ip: "10.0.1.9".parse().unwrap(),
            port: 80,
            draining: false,
        };
        let cmds = add_server_command("tg-web", &s.target_groups[0], &t);
        assert_eq!(
            cmds[0],
            "add server tg-web/10.0.1.9-80 10.0.1.9:80 check inter 5s rise 2 fall 3 port 9000"
        );
        assert_eq!(
            cmds[2],
            "enable server tg-web/10.0.1.9-80; set server tg-web/10.0.1.9-80 health down"
        );
    }

    #[test]
    fn names_round_trip() {
        let n = server_name("10.0.1.5".parse().unwrap(), 8080);
        assert_eq!(
            parse_server_name(&n),
            Some(("10.0.1.5".parse().unwrap(), 8080))
        );
        assert_eq!(parse_server_name("nope"), None);
    }

    #[test]
    fn stat_rows_and_their_meaning() {
        let csv = "# pxname,svname,qcur,qmax,scur,status,check_status,check_code\n\
                   tg-web,10.0.1.5-80,0,0,2,UP,L4OK,\n\
                   tg-web,10.0.1.6-80,0,0,0,DOWN 1/2,L7STS,404\n\
                   tg-web,10.0.1.7-80,0,0,0,DOWN,* L4TOUT,\n\
                   tg-web,10.0.1.8-80,0,0,0,UP 1/3,L4CON,\n\
                   tg-web,BACKEND,0,0,2,UP,,\n";
        let rows = parse_stat(csv);
        assert_eq!(rows.len(), 4);
        assert!(rows[0].up() && rows[0].checked() && rows[0].failure().is_none());
        assert_eq!(rows[0].sessions, 2);
        assert!(!rows[1].up());
        assert_eq!(
            rows[1].failure(),
            Some(CheckFailure::ResponseCode(Some(404)))
        );
        assert_eq!(rows[2].failure(), Some(CheckFailure::Timeout));
        assert!(rows[3].up(), "going down is still up");
        assert_eq!(rows[3].failure(), Some(CheckFailure::Failed));
        assert!(parse_stat("garbage").is_empty());
    }

    #[test]
    fn bad_matcher_is_an_error() {
        assert!(status_regex("abc").is_err());
        assert_eq!(status_regex("200,204").unwrap(), "^(200|204)$");
    }
}
