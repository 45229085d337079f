//! NodeConfig from EC2 user data (`--config imds`) or a config file, as nodeadm reads every
//! config source: a MIME multi-part document (RFC 2046) contributes every part of media type
//! `application/node.eks.aws` (base64 transfer encoding decoded), merged in order; other
//! text is one NodeConfig document. Text that is itself base64 is decoded first.
//! Gzip-compressed user data is not supported (the error says so).

use base64::Engine;

use crate::error::BootstrapError;
use crate::node_config::NodeConfig;

/// Media type of a NodeConfig part.
pub const NODE_CONFIG_MEDIA_TYPE: &str = "application/node.eks.aws";

const LABEL: &str = "EC2 user data";

/// The NodeConfig in `user_data` (module docs).
///
/// Errors ([`BootstrapError::NodeConfig`]): a multi-part document without a NodeConfig part,
/// a part that does not parse (named by its number), a malformed MIME document.
pub fn node_config(user_data: &str) -> Result<NodeConfig, BootstrapError> {
    node_config_from(LABEL, user_data)
}

/// The NodeConfig in `text` read from the source `label` names (a file's path, or
/// "EC2 user data"), as [`node_config`] reads user data.
pub fn node_config_from(label: &str, text: &str) -> Result<NodeConfig, BootstrapError> {
    let decoded;
    let text = match decode_base64(text) {
        Some(d) => {
            decoded = d;
            decoded.as_str()
        }
        None => text,
    };
    let parts = multipart_parts(text).map_err(|e| match e {
        BootstrapError::NodeConfig { problem, .. } => BootstrapError::NodeConfig {
            path: label.into(),
            problem,
        },
        other => other,
    })?;
    match parts {
        None => NodeConfig::parse(label, text),
        Some(parts) => {
            let docs: Vec<(String, String)> = parts
                .into_iter()
                .enumerate()
                .filter(|(_, p)| p.media_type == NODE_CONFIG_MEDIA_TYPE)
                .map(|(i, p)| (format!("{label} part {}", i + 1), p.body))
                .collect();
            if docs.is_empty() {
                return Err(BootstrapError::NodeConfig {
                    path: label.into(),
                    problem: format!("the MIME multi-part document has no part of type {NODE_CONFIG_MEDIA_TYPE}. Fix: add the NodeConfig as such a part, or pass --config a source that holds one"),
                });
            }
            NodeConfig::merge(&docs)
        }
    }
}

/// One part of a multi-part document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Lower-case media type without parameters (`text/x-shellscript`); `text/plain` when the
    /// part has no Content-Type.
    pub media_type: String,
    /// The body, transfer encoding removed.
    pub body: String,
}

/// The parts of a MIME multi-part document; `None` when `text` is not one (no
/// `Content-Type: multipart/...` header with a boundary).
pub fn multipart_parts(text: &str) -> Result<Option<Vec<Part>>, BootstrapError> {
    let (headers, body) = split_headers(text);
    let Some(ct) = header(&headers, "content-type") else {
        return Ok(None);
    };
    let (media, params) = media_type(&ct);
    if !media.starts_with("multipart/") {
        return Ok(None);
    }
    let Some(boundary) = params
        .iter()
        .find(|(k, _)| k == "boundary")
        .map(|(_, v)| v.clone())
    else {
        return Err(mime_error(
            "the multipart Content-Type has no boundary parameter",
        ));
    };
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut closed = false;
    for line in body.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\r', '\n']);
        if let Some(rest) = bare.strip_prefix(&delimiter) {
            if let Some(lines) = current.take() {
                parts.push(part(&lines.concat())?);
            }
            if rest.starts_with("--") {
                closed = true;
                break;
            }
            current = Some(Vec::new());
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if !closed {
        if let Some(lines) = current.take() {
            parts.push(part(&lines.concat())?);
        }
    }
    Ok(Some(parts))
}

fn part(raw: &str) -> Result<Part, BootstrapError> {
    let (headers, body) = split_headers(raw);
    let media = header(&headers, "content-type")
        .map(|ct| media_type(&ct).0)
        .unwrap_or_else(|| "text/plain".into());
    // The line break before the next delimiter belongs to the delimiter.
    let body = body
        .strip_suffix("\r\n")
        .or_else(|| body.strip_suffix('\n'))
        .unwrap_or(body);
    let encoding = header(&headers, "content-transfer-encoding")
        .map(|e| e.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let body = if encoding == "base64" {
        decode_base64(body).ok_or_else(|| {
            mime_error(format!(
                "a {media} part says Content-Transfer-Encoding: base64 but is not base64 of UTF-8 text"
            ))
        })?
    } else {
        body.to_string()
    };
    Ok(Part {
        media_type: media,
        body,
    })
}

/// Header lines (unfolded) and the body after the first empty line. Text that does not start
/// with a header line has no headers.
fn split_headers(text: &str) -> (Vec<(String, String)>, &str) {
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\r', '\n']);
        offset += line.len();
        if bare.is_empty() {
            return (headers, &text[offset..]);
        }
        if bare.starts_with([' ', '\t']) {
            match headers.last_mut() {
                Some((_, v)) => {
                    v.push(' ');
                    v.push_str(bare.trim());
                    continue;
                }
                None => return (Vec::new(), text),
            }
        }
        match bare.split_once(':') {
            Some((k, v)) if !k.is_empty() && !k.contains(' ') => {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()))
            }
            _ => return (Vec::new(), text),
        }
    }
    (headers, "")
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// `type/subtype; k=v; k2="v 2"` → (lower-case type, parameters with lower-case names).
fn media_type(ct: &str) -> (String, Vec<(String, String)>) {
    let mut pieces = ct.split(';');
    let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
    let params = pieces
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.trim().to_ascii_lowercase(), v.to_string())
        })
        .collect();
    (media, params)
}

/// `text` decoded when all of it is base64 of UTF-8 text.
fn decode_base64(text: &str) -> Option<String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.is_empty() {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn mime_error(problem: impl Into<String>) -> BootstrapError {
    BootstrapError::NodeConfig {
        path: LABEL.into(),
        problem: problem.into(),
    }
}

/// An error for user data that cannot be text (e.g. gzip).
pub fn not_text() -> BootstrapError {
    mime_error("the user data is not UTF-8 text (gzip-compressed user data is not supported). Fix: pass the NodeConfig uncompressed")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NC1: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: one\n  kubelet:\n    flags: [--node-labels=a=b]\n";
    const NC2: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: two\n  kubelet:\n    flags: [--v=4]\n";

    fn mime(parts: &[(&str, &str, Option<&str>)]) -> String {
        let mut s = String::from(
            "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"//\"\r\n\r\n",
        );
        for (ct, body, enc) in parts {
            s.push_str(&format!("--//\r\nContent-Type: {ct}\r\n"));
            if let Some(e) = enc {
                s.push_str(&format!("Content-Transfer-Encoding: {e}\r\n"));
            }
            s.push_str(&format!("\r\n{body}\r\n"));
        }
        s.push_str("--//--\r\n");
        s
    }

    #[test]
    fn node_config_parts_merge_in_order_and_scripts_are_skipped() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(NC2);
        let ud = mime(&[
            ("application/node.eks.aws", NC1, None),
            (
                "text/x-shellscript; charset=\"us-ascii\"",
                "#!/bin/bash\necho hi\n",
                None,
            ),
            ("application/node.eks.aws", &b64, Some("base64")),
        ]);
        let nc = node_config(&ud).unwrap();
        assert_eq!(nc.spec.cluster.name.as_deref(), Some("two"));
        assert_eq!(nc.spec.kubelet.flags, vec!["--node-labels=a=b", "--v=4"]);
    }

    #[test]
    fn plain_and_base64_user_data_is_one_document() {
        assert_eq!(
            node_config(NC1).unwrap().spec.cluster.name.as_deref(),
            Some("one")
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(mime(&[(
            "application/node.eks.aws",
            NC2,
            None,
        )]));
        assert_eq!(
            node_config(&b64).unwrap().spec.cluster.name.as_deref(),
            Some("two")
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let e = node_config(&mime(&[("text/x-shellscript", "#!/bin/sh\n", None)]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no part of type application/node.eks.aws"),
            "{e}"
        );
        let e = node_config(&mime(&[
            ("application/node.eks.aws", NC1, None),
            (
                "application/node.eks.aws",
                "apiVersion: v1\nkind: Pod\n",
                None,
            ),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("part 2"), "{e}");
        let e = node_config("#!/bin/bash\n/etc/eks/bootstrap.sh my-cluster\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("EC2 user data"), "{e}");
        let no_boundary = "Content-Type: multipart/mixed\n\nx\n";
        assert!(node_config(no_boundary)
            .unwrap_err()
            .to_string()
            .contains("boundary"));
    }
}
