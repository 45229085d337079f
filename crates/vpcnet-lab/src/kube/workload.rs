//! Workloads on the lab cluster: a Deployment of busybox `httpd` pods with a ClusterIP Service
//! (the demo's and the end-to-end tests'), the pods' addresses and nodes, and commands run inside
//! pods with `kubectl exec` (ping, HTTP through the Service).

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use super::node::NODE_LABEL;
use crate::image;
use crate::lab::Lab;
use crate::wait::wait_for;

/// A pod as the API server reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Pod name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Kubernetes node name (EC2 private DNS name); empty while Pending.
    pub node: String,
    /// `status.podIP`, once assigned.
    pub ip: Option<Ipv4Addr>,
    /// `status.phase` (Pending, Running, ...).
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
}

/// Parses `kubectl get pods -o json`.
pub fn parse_pods(list: &Value) -> Vec<PodInfo> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|p| PodInfo {
                    name: p["metadata"]["name"].as_str().unwrap_or("").into(),
                    namespace: p["metadata"]["namespace"].as_str().unwrap_or("").into(),
                    node: p["spec"]["nodeName"].as_str().unwrap_or("").into(),
                    ip: p["status"]["podIP"].as_str().and_then(|s| s.parse().ok()),
                    phase: p["status"]["phase"].as_str().unwrap_or("").into(),
                    ready: p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    }),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How the demo Deployment places its pods.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    /// Prefer this lab node (`n1`), within `max_skew` pods of the others, so that it needs
    /// more addresses than its primary ENI has and a second ENI's addresses come into use.
    pub prefer_node: Option<String>,
    /// Largest difference in pod count between nodes (topology spread over hostnames).
    pub max_skew: u32,
    /// Only this lab node (`n1`): a required node affinity (wins over `prefer_node`).
    pub only_node: Option<String>,
}

/// A Deployment `name` of `replicas` busybox pods serving HTTP on port 80 (`httpd`, page
/// "hello from <pod name>", readiness probe on `/`), the lab's local image
/// (`imagePullPolicy: Never`), and a ClusterIP Service `name` in front of them.
pub fn httpd_manifest(name: &str, replicas: u32, placement: &Placement) -> String {
    let mut spec = serde_json::json!({
        "containers": [{
            "name": "httpd",
            "image": image::IMAGE_REF,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c",
                "mkdir -p /www && echo \"hello from $(hostname)\" > /www/index.html && exec httpd -f -p 80 -h /www"],
            "ports": [{"containerPort": 80}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 2},
        }],
        "terminationGracePeriodSeconds": 2,
        "automountServiceAccountToken": false,
    });
    if let Some(n) = &placement.prefer_node {
        spec["affinity"] = serde_json::json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": [n]}]}}]}});
        spec["topologySpreadConstraints"] = serde_json::json!([{
            "maxSkew": placement.max_skew.max(1),
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}},
        }]);
    }
    if let Some(n) = &placement.only_node {
        spec["affinity"] = serde_json::json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": NODE_LABEL, "operator": "In", "values": [n]}]}]}}});
        if let Some(o) = spec.as_object_mut() {
            o.remove("topologySpreadConstraints");
        }
    }
    let deploy = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    });
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80}]},
    });
    format!("{deploy}\n---\n{svc}\n")
}

/// The lab's Kubernetes workloads ([`Lab::workloads`]): pods and Services, reached with kubectl.
#[derive(Debug, Clone, Copy)]
pub struct Workloads<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// The lab's Kubernetes workloads (pods, Services).
    pub fn workloads(&self) -> Workloads<'_> {
        Workloads { lab: self }
    }
}

impl Workloads<'_> {
    /// Pods of the `default` namespace matching the label `selector` (e.g. `app=web`).
    pub fn pods(&self, selector: &str) -> Result<Vec<PodInfo>> {
        Ok(parse_pods(
            &self
                .lab
                .kube()
                .kubectl()?
                .json(&["get", "pods", "-n", "default", "-l", selector])?,
        ))
    }

    /// Waits until no pod matches `selector`.
    pub fn wait_pods_gone(&self, selector: &str, timeout: Duration) -> Result<()> {
        crate::wait::wait_for(&format!("pods {selector} to go"), timeout, || {
            Ok(self.pods(selector)?.is_empty().then_some(()))
        })
    }

    /// Waits until `count` pods match `selector`, all Running and Ready with an IP.
    pub fn wait_pods_ready(
        &self,
        selector: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<PodInfo>> {
        let procs = self.lab.state()?.processes;
        let refs: Vec<&crate::procs::ProcRecord> = procs
            .iter()
            .filter(|p| !p.role.starts_with("ctr "))
            .collect();
        let mut last = Vec::new();
        self.lab
            .processes()
            .wait_ready(
                &format!("{count} pods {selector} Running and Ready"),
                timeout,
                &refs,
                || {
                    last = self.pods(selector)?;
                    let ok = last
                        .iter()
                        .filter(|p| p.phase == "Running" && p.ready && p.ip.is_some())
                        .count();
                    Ok((ok == count && last.len() == count).then(|| last.clone()))
                },
            )
            .with_context(|| {
                let states: Vec<String> = last
                    .iter()
                    .map(|p| format!("{} {} ready={} node={}", p.name, p.phase, p.ready, p.node))
                    .collect();
                format!("pods now: {}", states.join("; "))
            })
    }

    /// Runs `argv` in `pod` (namespace `default`) with `kubectl exec`; returns the output.
    pub fn pod_exec(&self, pod: &str, argv: &[&str]) -> Result<std::process::Output> {
        let mut args = vec!["exec", "-n", "default", pod, "--"];
        args.extend_from_slice(argv);
        self.lab.kube().kubectl()?.output(&args, None)
    }

    /// One ping (2 s deadline) from inside `pod`; whether the echo came back. Errors when the
    /// ping could not be run at all (kubectl exec failed).
    pub fn pod_ping(&self, pod: &str, to: Ipv4Addr) -> Result<bool> {
        let out = self.pod_exec(pod, &["ping", "-c", "1", "-W", "2", &to.to_string()])?;
        if out.status.success() {
            return Ok(true);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        // kubectl reports the remote command's own failure this way; anything else means
        // the exec itself failed.
        if err.contains("command terminated with exit code") {
            return Ok(false);
        }
        anyhow::bail!("kubectl exec {pod} -- ping: {}", err.trim())
    }

    /// HTTP/1.0 GET of `path` on `addr:port` from inside `pod` (busybox `nc`, 5 s deadline;
    /// Debian's static busybox `wget` crashes in a container without NSS files). Returns the
    /// body of a 200 answer; other answers and failures are errors quoting what came back.
    pub fn pod_http_get(&self, pod: &str, addr: Ipv4Addr, port: u16, path: &str) -> Result<String> {
        let script = format!(
            "printf 'GET {path} HTTP/1.0\\r\\nHost: {addr}\\r\\n\\r\\n' | nc -w 5 {addr} {port}"
        );
        let out = self.pod_exec(pod, &["sh", "-c", &script])?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        parse_http_response(&text).with_context(|| {
            format!(
                "GET http://{addr}:{port}{path} from {pod}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
    }

    /// The ClusterIP of Service `name` in `default`.
    pub fn service_ip(&self, name: &str) -> Result<Ipv4Addr> {
        let v = self
            .lab
            .kube()
            .kubectl()?
            .json(&["get", "service", "-n", "default", name])?;
        v["spec"]["clusterIP"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("service {name} has no IPv4 clusterIP"))
    }

    /// Waits (`timeout`) until `pod` gets a 200 from `addr:port` (e.g. a ClusterIP, which
    /// works only once kube-proxy has programmed it on the pod's node); the error quotes the
    /// last failure.
    pub fn wait_http(
        &self,
        pod: &str,
        addr: Ipv4Addr,
        port: u16,
        timeout: Duration,
    ) -> Result<String> {
        let mut last = None;
        wait_for(
            &format!("http://{addr}:{port}/ from {pod}"),
            timeout,
            || match self.pod_http_get(pod, addr, port, "/") {
                Ok(body) => Ok(Some(body)),
                Err(e) => {
                    last = Some(format!("{e:#}"));
                    Ok(None)
                }
            },
        )
        .with_context(|| last.unwrap_or_default())
    }
}

/// The body of an HTTP/1.x response with status 200; errors name the status line, or say that
/// nothing came back.
pub fn parse_http_response(text: &str) -> Result<String> {
    let Some(status) = text.lines().next().filter(|l| !l.is_empty()) else {
        anyhow::bail!("no answer");
    };
    let code = status.split_whitespace().nth(1);
    if !status.starts_with("HTTP/1.") || code != Some("200") {
        anyhow::bail!("answer {status:?}");
    }
    Ok(text
        .split_once("\r\n\r\n")
        .or_else(|| text.split_once("\n\n"))
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_has_deployment_and_service() {
        let m = httpd_manifest(
            "web",
            12,
            &Placement {
                prefer_node: Some("n1".into()),
                max_skew: 8,
                ..Default::default()
            },
        );
        let docs: Vec<Value> = m
            .split("\n---\n")
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect();
        assert_eq!(docs[0]["spec"]["replicas"], 12);
        let pod = &docs[0]["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(pod["topologySpreadConstraints"][0]["maxSkew"], 8);
        assert_eq!(docs[1]["kind"], "Service");
        assert_eq!(docs[1]["spec"]["selector"]["app"], "web");
    }

    #[test]
    fn http_responses() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhello\n";
        assert_eq!(parse_http_response(ok).unwrap(), "hello\n");
        let e = parse_http_response("HTTP/1.1 404 Not Found\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("404"), "{e}");
        assert!(parse_http_response("")
            .unwrap_err()
            .to_string()
            .contains("no answer"));
    }

    #[test]
    fn pods_parse() {
        let v = serde_json::json!({"items": [{"metadata": {"name": "a", "namespace": "default"},
            "spec": {"nodeName": "ip-1"}, "status": {"phase": "Running", "podIP": "10.0.1.9",
            "conditions": [{"type": "Ready", "status": "True"}]}}]});
        let p = parse_pods(&v);
        assert_eq!(p[0].ip, Some(Ipv4Addr::new(10, 0, 1, 9)));
        assert!(p[0].ready);
        assert_eq!(p[0].node, "ip-1");
    }
}
