//! The client of the lab daemon's emulator API on its Unix socket
//! ([`crate::daemon::api_socket`]): the emulator's JSON control API under `/_emu/` and the EC2
//! Query API at `/`, reachable from the host without entering the VPC namespace. HTTP/1.1 over
//! hyper, one connection per request, 30 s deadline for the whole exchange.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// Deadline of one request, connect to last body byte.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one request and returns (status code, body). Blocking: it runs on the lab's runtime
/// ([`crate::runtime`]), so call it from synchronous code. Errors: the daemon is not running (no socket), no
/// answer within 30 s, or the answer is not HTTP.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "lab")
        .header(hyper::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .with_context(|| format!("{method} {path}: not a valid request"))?;
    crate::runtime::block_on(async {
        tokio::time::timeout(TIMEOUT, send(socket, req))
            .await
            .with_context(|| {
                format!(
                    "{method} {path}: no answer from the lab's emulator within {} s",
                    TIMEOUT.as_secs()
                )
            })?
    })?
}

async fn send(socket: &Path, req: hyper::Request<Full<Bytes>>) -> Result<(u16, String)> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| {
            format!(
                "cannot reach the lab's emulator at {} (is the lab up?)",
                socket.display()
            )
        })?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .context("HTTP handshake with the lab's emulator")?;
    let conn = tokio::spawn(conn);
    let resp = tx
        .send_request(req)
        .await
        .context("no HTTP answer from the lab's emulator")?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .context("reading the lab emulator's answer")?
        .to_bytes();
    drop(tx);
    let _ = conn.await;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `GET /_emu/<path>` and parse the JSON answer. Errors on non-2xx (with the body).
pub fn control_get<T: serde::de::DeserializeOwned>(socket: &Path, path: &str) -> Result<T> {
    let (status, body) = request(
        socket,
        "GET",
        &format!("/_emu/{path}"),
        "application/json",
        b"",
    )?;
    if !(200..300).contains(&status) {
        bail!("emulator GET /_emu/{path}: HTTP {status}: {body}");
    }
    serde_json::from_str(&body).with_context(|| format!("emulator GET /_emu/{path}: bad JSON"))
}

/// `<method> /_emu/<path>` with an empty body and parse the JSON answer. Errors on non-2xx
/// (with the body).
pub fn control_send<T: serde::de::DeserializeOwned>(
    socket: &Path,
    method: &str,
    path: &str,
) -> Result<T> {
    let (status, body) = request(
        socket,
        method,
        &format!("/_emu/{path}"),
        "application/json",
        b"",
    )?;
    if !(200..300).contains(&status) {
        bail!("emulator {method} /_emu/{path}: HTTP {status}: {body}");
    }
    serde_json::from_str(&body).with_context(|| format!("emulator {method} /_emu/{path}: bad JSON"))
}

/// One EC2 Query API call (`Action=<action>&Version=2016-11-15&<params>`, form-encoded);
/// returns the XML body. Errors on non-2xx (with EC2's error XML).
pub fn ec2_query(socket: &Path, action: &str, params: &[(&str, &str)]) -> Result<String> {
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", action)
        .append_pair("Version", "2016-11-15")
        .extend_pairs(params)
        .finish();
    let (status, text) = request(
        socket,
        "POST",
        "/",
        "application/x-www-form-urlencoded",
        body.as_bytes(),
    )?;
    if !(200..300).contains(&status) {
        bail!("EC2 {action}: HTTP {status}: {text}");
    }
    Ok(text)
}
