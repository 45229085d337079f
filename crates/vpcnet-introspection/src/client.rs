//! A client of the agent's introspection (feature `client`): plain HTTP/1.1 GETs over TCP or
//! the Unix socket, with errors that say what to do. Used by `vpcnet inspect` and the lab.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

/// The agent's default introspection address (the VPC CNI's port).
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:61679";

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

/// GET `path`, expecting 200 and a JSON body.
pub async fn get_json<T: DeserializeOwned>(ep: &Endpoint, path: &str) -> Result<T> {
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
pub async fn get(ep: &Endpoint, path: &str) -> Result<Reply> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
