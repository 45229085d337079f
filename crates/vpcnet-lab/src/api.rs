//! A minimal HTTP/1.0 client for the lab daemon's emulator API on its Unix socket
//! ([`crate::daemon::api_socket`]): the emulator's JSON control API under `/_emu/` and the EC2
//! Query API at `/`, reachable from the host without entering the VPC namespace.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Sends one request and returns (status code, body). Errors: the daemon is not running (no
/// socket), or the answer is not HTTP.
pub fn request(
    socket: &Path,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Result<(u16, String)> {
    let mut s = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach the lab's emulator at {} (is the lab up?)",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nHost: lab\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // One write for head and body: a handler that ignores the body (e.g. detach) lets the
    // server answer and close before a separately written body arrives, and closing a Unix
    // socket with unread data resets the connection (ECONNRESET) before we read the answer.
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    s.write_all(&request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("malformed HTTP answer from the lab emulator");
    };
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no status code in the lab emulator's answer")?;
    Ok((status, body.to_string()))
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

/// One EC2 Query API call (`Action=<action>&Version=2016-11-15&<params>`); returns the XML body.
/// Errors on non-2xx (with EC2's error XML).
pub fn ec2_query(socket: &Path, action: &str, params: &[(&str, &str)]) -> Result<String> {
    let mut body = form_encode(&[("Action", action), ("Version", "2016-11-15")]);
    if !params.is_empty() {
        body.push('&');
        body.push_str(&form_encode(params));
    }
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

fn form_encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_forms() {
        assert_eq!(
            form_encode(&[("Filter.1.Name", "attachment.instance-id"), ("a", "b c")]),
            "Filter.1.Name=attachment.instance-id&a=b%20c"
        );
    }
}
