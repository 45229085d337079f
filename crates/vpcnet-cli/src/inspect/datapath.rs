//! The `datapath` view of `vpcnet inspect`: the agent's datapath audit (`/v1/datapath`).

use vpcnet_introspection::{DatapathDoc, Finding};

use super::table;
use super::tables::{pod_name, row, short};

/// A summary line, the node's prerequisite findings, then one row per pod finding (healthy
/// pods are counted, not listed), then the repairs since start. Ages relative to `now_ms`.
pub(super) fn datapath_text(d: &DatapathDoc, now_ms: u64) -> String {
    if d.passes == 0 {
        return "no datapath audit yet (the node datapath is off, or the first periodic pass has not run)\n".into();
    }
    let ago = |ms: u64| format!("{}s ago", now_ms.saturating_sub(ms) / 1000);
    let healthy = d.pods.iter().filter(|p| p.findings.is_empty()).count();
    let mut out = format!(
        "{} audit passes, last {}: {} pods checked ({} healthy), {} unrepaired problems\n",
        d.passes,
        d.checked_at_ms.map(ago).unwrap_or_else(|| "-".into()),
        d.pods.len(),
        healthy,
        d.unrepaired
    );
    if let Some(why) = &d.not_ready {
        out.push_str(&format!("NOT READY: {why}\n"));
    }
    if let Some(e) = &d.last_error {
        out.push_str(&format!("last pass failed: {e}\n"));
    }
    let mut rows = vec![row(["WHERE", "KIND", "OBJECT", "STATE", "PROBLEM"])];
    let state = |f: &Finding| {
        if f.repaired {
            "repaired".to_string()
        } else {
            format!("UNREPAIRED: {}", f.error.as_deref().unwrap_or("-"))
        }
    };
    for f in &d.node {
        rows.push(row(["node", &f.kind, &f.object, &state(f), &f.problem]));
    }
    for p in &d.pods {
        let who = format!(
            "{} {} {}",
            pod_name(&p.namespace, &p.name),
            short(&p.container_id),
            p.ip
        );
        for f in &p.findings {
            rows.push(row([&who, &f.kind, &f.object, &state(f), &f.problem]));
        }
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    } else {
        out.push_str("no problems found at the last pass\n");
    }
    if !d.repairs.is_empty() {
        let by_kind: Vec<String> = d.repairs.iter().map(|(k, n)| format!("{k} {n}")).collect();
        out.push_str(&format!("repairs since start: {}\n", by_kind.join(", ")));
    }
    if let Some(r) = &d.last_repair {
        out.push_str(&format!(
            "last repair {}: {} {} ({})\n",
            ago(r.at_ms),
            r.kind,
            r.object,
            r.problem
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use vpcnet_introspection::{PodCheck, Repair};

    use super::*;

    #[test]
    fn shows_unrepaired_and_repaired_findings_and_not_ready() {
        let d = DatapathDoc {
            passes: 3,
            checked_at_ms: Some(8_000),
            node: vec![Finding {
                kind: "ip_forward".into(),
                object: "net.ipv4.ip_forward".into(),
                problem: "IPv4 forwarding is disabled".into(),
                repaired: false,
                error: Some("read-only /proc/sys".into()),
            }],
            pods: vec![
                PodCheck {
                    container_id: "c1".into(),
                    namespace: "default".into(),
                    name: "web".into(),
                    ip: "10.0.1.5".into(),
                    findings: vec![Finding {
                        kind: "pod_route".into(),
                        object: "10.0.1.5/32".into(),
                        problem: "host route 10.0.1.5/32 dev eni1 is missing".into(),
                        repaired: true,
                        error: None,
                    }],
                    ..Default::default()
                },
                PodCheck::default(),
            ],
            unrepaired: 1,
            not_ready: Some("IPv4 forwarding is disabled".into()),
            repairs: [("pod_route".to_string(), 2)].into(),
            last_repair: Some(Repair {
                at_ms: 5_000,
                kind: "pod_route".into(),
                object: "10.0.1.5/32".into(),
                problem: "missing".into(),
            }),
            ..Default::default()
        };
        let t = datapath_text(&d, 10_000);
        assert!(
            t.starts_with("3 audit passes, last 2s ago: 2 pods checked (1 healthy), 1 unrepaired"),
            "{t}"
        );
        assert!(t.contains("NOT READY: IPv4 forwarding is disabled"), "{t}");
        assert!(t.contains("UNREPAIRED: read-only /proc/sys"), "{t}");
        assert!(t.contains("default/web c1 10.0.1.5  pod_route"), "{t}");
        assert!(t.contains("repairs since start: pod_route 2"), "{t}");
        assert!(
            t.contains("last repair 5s ago: pod_route 10.0.1.5/32"),
            "{t}"
        );
        assert!(datapath_text(&DatapathDoc::default(), 0).starts_with("no datapath audit yet"));
    }
}
