use super::*;

fn warned<T>(f: impl FnOnce(&mut Vec<String>) -> Result<T, BootstrapError>) -> (T, Vec<String>) {
    let mut w = Vec::new();
    let v = f(&mut w).unwrap();
    (v, w)
}

#[test]
fn service_cidrs_like_bootstrap_sh() {
    let (c, w) = warned(|w| parse_v4("f", "10.100.0.0/16", w));
    assert_eq!((c.dns.to_string(), w.len()), ("10.100.0.10".into(), 0));
    let (c, w) = warned(|w| parse_v4("f", "10.100.5.0/16", w));
    assert_eq!(c.dns.to_string(), "10.100.0.10");
    assert!(w[0].contains("host bits"), "{w:?}");
    let (c, w) = warned(|w| parse_v4("f", "172.16.3.0", w));
    assert_eq!(c.dns.to_string(), "172.16.3.10");
    assert!(w[0].contains("no prefix length"), "{w:?}");
    let (_, w) = warned(|w| parse_v4("f", "10.100.0.0/30", w));
    assert!(w[0].contains("too small"), "{w:?}");
    assert!(parse_v4("f", "fd00::/108", &mut Vec::new()).is_err());
    assert!(parse_v4("f", "10.100.0/16", &mut Vec::new()).is_err());

    let (c, w) = warned(|w| parse_v6("f", "fd00:c0de::/108", w));
    assert_eq!((c.dns.to_string(), w.len()), ("fd00:c0de::a".into(), 0));
    let (c, w) = warned(|w| parse_v6("f", "fe80::1", w));
    assert_eq!(c.dns.to_string(), "fe80::1a");
    assert_eq!(w.len(), 1);
    let (c, _) = warned(|w| parse_v6("f", "fd00::5/108", w));
    assert_eq!(c.dns.to_string(), "fd00::a");
    assert!(parse_v6("f", "fd00::zz/108", &mut Vec::new()).is_err());
}

#[test]
fn endpoints_like_bootstrap_sh() {
    let (e, w) = warned(|w| parse_endpoint("f", "https://a.example.com", w));
    assert_eq!(
        (e.0.as_str(), e.1.as_str(), w.len()),
        ("https://a.example.com", "a.example.com", 0)
    );
    let (e, w) = warned(|w| parse_endpoint("f", "http://localhost", w));
    assert_eq!(e.1, "localhost");
    assert!(w[0].contains("plain http"), "{w:?}");
    let (e, w) = warned(|w| parse_endpoint("f", "api.example.com:6443", w));
    assert_eq!(e.0, "https://api.example.com:6443");
    assert!(w[0].contains("no scheme"), "{w:?}");
    let (_, w) = warned(|w| parse_endpoint("f", "https://a.example.com/x?y=1", w));
    assert!(w[0].contains("path or query"), "{w:?}");
    let (e, _) = warned(|w| parse_endpoint("f", "https://[fd00::1]:443", w));
    assert_eq!(e.1, "fd00::1");
    assert!(parse_endpoint("f", "not a url", &mut Vec::new()).is_err());
    assert!(parse_endpoint("f", "ftp://a", &mut Vec::new()).is_err());
}

#[test]
fn cas_like_bootstrap_sh() {
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    let pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
    let (c, w) = warned(|w| decode_ca("f", &b64(pem.as_bytes()), w));
    assert_eq!((c, w.len()), (format!("{pem}\n"), 0));
    let (c, w) = warned(|w| decode_ca("f", pem, w));
    assert_eq!(c, format!("{pem}\n"));
    assert!(w[0].contains("PEM text"), "{w:?}");
    let (c, w) = warned(|w| decode_ca("f", &b64(&[0x30, 0x82, 0x01, 0xff]), w));
    assert!(
        c.starts_with("-----BEGIN CERTIFICATE-----\nMIIB/w==\n"),
        "{c}"
    );
    assert!(w[0].contains("DER"), "{w:?}");
    let (c, w) = warned(|w| decode_ca("f", "Y2VydGlmaWNhdGVBdXRob3JpdHk=", w));
    assert_eq!(c, "certificateAuthority\n");
    assert!(w[0].contains("refuse to start"), "{w:?}");
    assert!(decode_ca("f", "%%%", &mut Vec::new())
        .unwrap_err()
        .to_string()
        .contains("not base64"));
    assert!(decode_ca("f", &b64(&[0xff, 0xfe]), &mut Vec::new()).is_err());
}

fn described() -> ClusterInfo {
    ClusterInfo {
        name: "c".into(),
        status: "ACTIVE".into(),
        endpoint: Some("https://eks.example.com".into()),
        certificate_authority: Some(
            base64::engine::general_purpose::STANDARD
                .encode("-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n"),
        ),
        service_ipv4_cidr: Some("172.20.0.0/16".into()),
        service_ipv6_cidr: None,
        ip_family: Some("ipv4".into()),
        id: Some("0123-id".into()),
        outpost_arns: vec!["arn:aws:outposts:us-west-2:1:outpost/op-1".into()],
        version: Some("1.31".into()),
    }
}

#[test]
fn described_values_fill_gaps_and_given_values_win() {
    let input = ClusterInput {
        name: "c".into(),
        service_ipv4_cidr: Some("10.100.0.0/16".into()),
        ..Default::default()
    };
    assert!(input.needs_lookup());
    let (c, w) = input.resolve(Some(&described())).unwrap();
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(c.endpoint, "https://eks.example.com");
    assert_eq!(c.service_ipv4_cidr.unwrap().dns.to_string(), "10.100.0.10");
    // An Outpost ARN makes it a local cluster with the described ID.
    assert_eq!(c.outpost_cluster_id.as_deref(), Some("0123-id"));
    // --enable-local-outpost false wins over the detection.
    let input = ClusterInput {
        outpost: Some(false),
        ..input
    };
    assert_eq!(
        input
            .resolve(Some(&described()))
            .unwrap()
            .0
            .outpost_cluster_id,
        None
    );
    // Without a lookup the endpoint is missing.
    let e = input.resolve(None).unwrap_err().to_string();
    assert!(e.contains("--apiserver-endpoint"), "{e}");
}
