//! The lab cluster's PKI: one CA the lab creates (ECDSA P-256, rcgen), the API server's serving
//! certificate, client certificates for every component (Kubernetes authenticates them by
//! subject: CN = user, O = groups), the service-account signing key, and kubeconfig files.
//!
//! Identities follow Kubernetes' conventions, so the default RBAC roles and the Node authorizer
//! apply unchanged: `system:kube-controller-manager`, `system:kube-scheduler`,
//! `system:kube-proxy`, `system:node:<node name>` in `system:nodes`, and `admin` in
//! `system:masters`.

use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::json;

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct CertKey {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// PKCS#8 private key, PEM.
    pub key_pem: String,
}

/// The cluster CA: signs every certificate of the lab.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    key_pem: String,
    /// The CA certificate, PEM (what kubeconfigs and `--client-ca-file` carry).
    pub cert_pem: String,
}

/// Who a client certificate identifies: user (CN) and groups (O).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Kubernetes user name, e.g. `system:node:ip-10-0-1-32.ec2.internal`.
    pub user: String,
    /// Kubernetes groups, e.g. `system:nodes`.
    pub groups: Vec<String>,
}

impl Identity {
    /// A user with no groups.
    pub fn user(user: &str) -> Self {
        Identity {
            user: user.into(),
            groups: Vec::new(),
        }
    }
    /// The kubelet identity the Node authorizer expects for `node_name`.
    pub fn node(node_name: &str) -> Self {
        Identity {
            user: format!("system:node:{node_name}"),
            groups: vec!["system:nodes".into()],
        }
    }
    /// Cluster administrator (`system:masters`).
    pub fn admin() -> Self {
        Identity {
            user: "admin".into(),
            groups: vec!["system:masters".into()],
        }
    }
}

impl Ca {
    /// Creates a new CA named `kubernetes-ca` (valid from now for ten years).
    pub fn new() -> Result<Ca> {
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::CommonName, "vpcnet-lab kubernetes-ca");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut p);
        let key = KeyPair::generate().context("generating the CA key")?;
        let cert = p.self_signed(&key).context("self-signing the CA")?;
        Ok(Ca {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(p, key),
        })
    }

    /// The CA's private key, PKCS#8 PEM (kube-controller-manager signs kubelet serving
    /// certificates with it).
    pub fn key_pem(&self) -> String {
        self.key_pem.clone()
    }

    /// A client certificate for `id`.
    pub fn client(&self, id: &Identity) -> Result<CertKey> {
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, &id.user);
        for g in &id.groups {
            p.distinguished_name
                .push(DnType::OrganizationName, g.as_str());
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(p)
    }

    /// A serving certificate for `dns_names` and `ips` (subject alternative names).
    pub fn server(&self, cn: &str, dns_names: &[&str], ips: &[IpAddr]) -> Result<CertKey> {
        let sans: Vec<String> = dns_names
            .iter()
            .map(|s| s.to_string())
            .chain(ips.iter().map(IpAddr::to_string))
            .collect();
        let mut p = CertificateParams::new(sans).context("subject alternative names")?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(p)
    }

    fn sign(&self, mut p: CertificateParams) -> Result<CertKey> {
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.use_authority_key_identifier_extension = true;
        validity(&mut p);
        let key = KeyPair::generate().context("generating a key")?;
        let cert = p.signed_by(&key, &self.issuer).context("signing")?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn validity(p: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(3650);
}

/// A new key pair for signing service-account tokens (ES256): PKCS#8 private key PEM and
/// the public key PEM (`--service-account-key-file`).
pub fn service_account_key() -> Result<(String, String)> {
    let key = KeyPair::generate().context("generating the service-account key")?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

/// Writes `data` to `path` with `mode`, creating parent directories.
pub fn write_file(path: &Path, data: &str, mode: u32) -> Result<()> {
    if let Some(d) = path.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Writes `ck` as `<dir>/<name>.crt` and `<dir>/<name>.key` (0600); returns both paths.
pub fn write_pair(dir: &Path, name: &str, ck: &CertKey) -> Result<(PathBuf, PathBuf)> {
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    write_file(&crt, &ck.cert_pem, 0o644)?;
    write_file(&key, &ck.key_pem, 0o600)?;
    Ok((crt, key))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig (JSON, which kubectl and client-go read like YAML) for `server` (an https
/// URL) trusting `ca_pem`, authenticating with the embedded client certificate `client`.
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, client: &CertKey) -> String {
    serde_json::to_string_pretty(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {
            "server": server,
            "certificate-authority-data": b64(ca_pem),
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(&client.cert_pem),
            "client-key-data": b64(&client.key_pem),
        }}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": user}}],
        "current-context": "lab",
    }))
    .expect("JSON of strings")
}

/// The `ExecCredential` an exec credential plugin prints (client.authentication.k8s.io/v1beta1)
/// carrying a client certificate: what the lab's stand-in for `aws eks get-token` returns to a
/// node's kubelet (EKS maps IAM identities to `system:node:<name>`; the lab's API server
/// authenticates the equivalent client certificate).
pub fn exec_credential(client: &CertKey) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {
            "clientCertificateData": client.cert_pem,
            "clientKeyData": client.key_pem,
        },
    }))
    .expect("JSON of strings")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_carry_user_and_groups() {
        let ca = Ca::new().unwrap();
        let ck = ca
            .client(&Identity::node("ip-10-0-1-5.ec2.internal"))
            .unwrap();
        assert!(ck.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(ck.key_pem.contains("PRIVATE KEY"));
        // Decode and check the subject with openssl when present (Debian's openssl).
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-ext", "extendedKeyUsage"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(ck.cert_pem.as_bytes())?;
                c.wait_with_output()
            });
        if let Ok(o) = out {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("CN = system:node:ip-10-0-1-5.ec2.internal"),
                "{text}"
            );
            assert!(text.contains("O = system:nodes"), "{text}");
            assert!(text.contains("Client Authentication"), "{text}");
        }
    }

    #[test]
    fn kubeconfig_embeds_ca_and_client() {
        let ca = Ca::new().unwrap();
        let ck = ca.client(&Identity::admin()).unwrap();
        let k: serde_json::Value = serde_json::from_str(&kubeconfig(
            "https://10.0.0.10:6443",
            &ca.cert_pem,
            "admin",
            &ck,
        ))
        .unwrap();
        assert_eq!(
            k["clusters"][0]["cluster"]["server"],
            "https://10.0.0.10:6443"
        );
        let ca_data = k["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(ca_data)
            .unwrap();
        assert_eq!(decoded, ca.cert_pem.as_bytes());
        assert_eq!(k["contexts"][0]["context"]["user"], "admin");
    }

    #[test]
    fn exec_credential_has_the_v1beta1_shape() {
        let ca = Ca::new().unwrap();
        let ck = ca.client(&Identity::user("x")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&exec_credential(&ck)).unwrap();
        assert_eq!(v["kind"], "ExecCredential");
        assert_eq!(v["status"]["clientCertificateData"], ck.cert_pem);
    }
}
