//! The lab's Kubernetes control plane, on its own host on the VPC fabric (an EC2 instance of
//! the lab cloud, as a self-managed control plane would be; EKS's sits behind ENIs in the VPC):
//! etcd, kube-apiserver (TLS from the lab's CA, client-certificate authentication, `Node,RBAC`
//! authorization, service CIDR [`SERVICE_CIDR`]), kube-controller-manager, kube-scheduler and
//! the AWS cloud controller manager pointed at the lab cloud's EC2 endpoint.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use super::kubectl::Kubectl;
use super::manifests;
use super::pki::{self, Ca, Identity};
use crate::daemon;
use crate::lab::{progress, Lab};

/// The cluster's service CIDR (EKS's default for a VPC in 10.0.0.0/8 is 172.20.0.0/16; the
/// issue and vpcnet-bootstrap's examples use 10.100.0.0/16).
pub const SERVICE_CIDR: &str = "10.100.0.0/16";
/// The `kubernetes` Service's ClusterIP (first address of [`SERVICE_CIDR`]).
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 1);
/// The API server's secure port.
pub const API_PORT: u16 = 6443;
/// Name of the lab's cluster (ENI tags, cloud controller cluster ID, NodeConfig).
pub const CLUSTER_NAME: &str = "vpcnet-lab";

pub use crate::state::ControlPlaneRecord;

impl ControlPlaneRecord {
    /// `https://<ip>:6443`.
    pub fn endpoint(&self) -> String {
        format!("https://{}:{API_PORT}", self.ip)
    }
    /// kubectl with the admin kubeconfig, run in the control-plane namespace.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl {
            bin: self.bin_dir.join("kubectl"),
            kubeconfig: self.admin_kubeconfig.clone(),
            netns: self.netns.clone(),
        }
    }
}

/// Where the control plane keeps its files: `<lab>/cp`.
pub fn dir(lab_dir: &Path) -> PathBuf {
    lab_dir.join("cp")
}

/// The cloud config of the AWS cloud controller manager: region from the zone, the lab's VPC
/// and subnet with a cluster ID (so it runs off-instance, as on a control plane outside the
/// nodes' account, and never asks IMDS), the EC2 endpoint overridden to the lab cloud.
pub fn cloud_config(vpc_id: &str, subnet_id: &str, ec2_endpoint: &str) -> String {
    format!(
        "[Global]\nZone = {az}\nVPC = {vpc_id}\nSubnetID = {subnet_id}\nKubernetesClusterID = {CLUSTER_NAME}\nDisableSecurityGroupIngress = true\n\n[ServiceOverride \"ec2\"]\nService = ec2\nRegion = {region}\nURL = {ec2_endpoint}\nSigningRegion = {region}\n",
        az = daemon::AZ,
        region = daemon::REGION,
    )
}

/// Inputs of [`start`].
pub struct Spec<'a> {
    /// The control-plane host's namespace, instance ID and address.
    pub netns: &'a str,
    /// EC2 instance ID of the control-plane host.
    pub instance_id: &'a str,
    /// The control-plane host's address.
    pub ip: Ipv4Addr,
    /// Kubernetes binaries.
    pub bin_dir: &'a Path,
    /// The lab cloud's VPC and the control plane's subnet (for the cloud controller).
    pub vpc_id: &'a str,
    /// Subnet of the control-plane host.
    pub subnet_id: &'a str,
    /// The EC2 endpoint as seen from the control-plane host.
    pub ec2_endpoint: &'a str,
    /// The agents run with `ANNOTATE_POD_IP=true`: their ClusterRole grants `patch` on pods
    /// ([`manifests::base`]).
    pub annotate_pod_ip: bool,
    /// The agents are installed by the chart, which brings their service account, RBAC and
    /// the ENIConfig CRD: the lab applies only the cloud controller's binding.
    pub agent_chart: bool,
}

/// Starts etcd, kube-apiserver (waits for `/readyz`, 90 s), applies the lab's base manifests
/// (RBAC for the cloud controller, and for the agent and the ENIConfig CRD unless the chart
/// installs them), then kube-controller-manager, kube-scheduler and
/// aws-cloud-controller-manager, and the kubelet serving certificate approver. Every process is
/// recorded in the lab state before it starts, the control plane once the API server is ready;
/// a component that exits is named in the error with the end of its log.
pub fn start(lab: &Lab, ca: &Ca, spec: &Spec) -> Result<ControlPlaneRecord> {
    let d = dir(&lab.dir);
    let pki_dir = d.join("pki");
    std::fs::create_dir_all(&pki_dir)?;
    let ip = IpAddr::V4(spec.ip);
    let endpoint = format!("https://{}:{API_PORT}", spec.ip);

    let ca_file = pki_dir.join("ca.crt");
    pki::write_file(&ca_file, &ca.cert_pem, 0o644)?;
    pki::write_file(&pki_dir.join("ca.key"), &ca.key_pem(), 0o600)?;
    let serving = ca.server(
        "kube-apiserver",
        &[
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ],
        &[
            ip,
            IpAddr::V4(KUBERNETES_SERVICE_IP),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        ],
    )?;
    let (api_crt, api_key) = pki::write_pair(&pki_dir, "apiserver", &serving)?;
    let kubelet_client = ca.client(&Identity {
        user: "kube-apiserver-kubelet-client".into(),
        groups: vec!["system:masters".into()],
    })?;
    let (kc_crt, kc_key) = pki::write_pair(&pki_dir, "apiserver-kubelet-client", &kubelet_client)?;
    let (sa_key, sa_pub) = pki::service_account_key()?;
    let sa_key_file = pki_dir.join("sa.key");
    let sa_pub_file = pki_dir.join("sa.pub");
    pki::write_file(&sa_key_file, &sa_key, 0o600)?;
    pki::write_file(&sa_pub_file, &sa_pub, 0o644)?;

    let kubeconfig_for = |name: &str, id: &Identity| -> Result<PathBuf> {
        let ck = ca.client(id)?;
        let p = d.join(format!("{name}.kubeconfig"));
        pki::write_file(
            &p,
            &pki::kubeconfig(&endpoint, &ca.cert_pem, &id.user, &ck),
            0o600,
        )?;
        Ok(p)
    };
    let admin = kubeconfig_for("admin", &Identity::admin())?;
    let kcm = kubeconfig_for(
        "controller-manager",
        &Identity::user("system:kube-controller-manager"),
    )?;
    let sched = kubeconfig_for("scheduler", &Identity::user("system:kube-scheduler"))?;
    let ccm = kubeconfig_for(
        "cloud-controller-manager",
        &Identity::user(manifests::CCM_USER),
    )?;
    let cloud_conf = d.join("cloud.conf");
    std::fs::write(
        &cloud_conf,
        cloud_config(spec.vpc_id, spec.subnet_id, spec.ec2_endpoint),
    )?;

    let bin = |b: &str| spec.bin_dir.join(b);
    let p = |x: &Path| x.display().to_string();
    let record = ControlPlaneRecord {
        netns: spec.netns.to_string(),
        instance_id: spec.instance_id.to_string(),
        ip: spec.ip.to_string(),
        bin_dir: spec.bin_dir.to_path_buf(),
        admin_kubeconfig: admin.clone(),
        ca_file: ca_file.clone(),
    };

    progress(&format!(
        "control plane {} ({}): starting etcd and kube-apiserver",
        spec.ip, spec.instance_id
    ));
    let mut etcd = Command::new(bin("etcd"));
    etcd.args([
        "--name",
        "cp",
        "--data-dir",
        &p(&d.join("etcd")),
        "--listen-client-urls",
        "http://127.0.0.1:2379",
        "--advertise-client-urls",
        "http://127.0.0.1:2379",
        "--listen-peer-urls",
        "http://127.0.0.1:2380",
        "--initial-advertise-peer-urls",
        "http://127.0.0.1:2380",
        "--initial-cluster",
        "cp=http://127.0.0.1:2380",
        "--log-level",
        "warn",
        // Lab data is thrown away at `lab down`: no fsync on the shared test disk.
        "--unsafe-no-fsync",
    ]);
    let etcd = lab
        .processes()
        .start("etcd", etcd, &crate::spawn::Place::netns(spec.netns))?;

    let mut api = Command::new(bin("kube-apiserver"));
    api.args([
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=0.0.0.0",
        &format!("--secure-port={API_PORT}"),
        &format!("--advertise-address={}", spec.ip),
        &format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        &format!("--client-ca-file={}", p(&ca_file)),
        &format!("--tls-cert-file={}", p(&api_crt)),
        &format!("--tls-private-key-file={}", p(&api_key)),
        &format!("--kubelet-client-certificate={}", p(&kc_crt)),
        &format!("--kubelet-client-key={}", p(&kc_key)),
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        &format!("--service-account-key-file={}", p(&sa_pub_file)),
        &format!("--service-account-signing-key-file={}", p(&sa_key_file)),
        "--profiling=false",
    ]);
    let api = lab.processes().start(
        "kube-apiserver",
        api,
        &crate::spawn::Place::netns(spec.netns),
    )?;
    let kubectl = record.kubectl();
    lab.processes().wait_ready(
        "kube-apiserver /readyz",
        Duration::from_secs(90),
        &[&etcd, &api],
        || {
            let out = kubectl.output(&["get", "--raw", "/readyz"], None)?;
            Ok(out.status.success().then_some(()))
        },
    )?;
    if spec.agent_chart {
        kubectl
            .apply(&manifests::cloud_controller())
            .context("applying the cloud controller's binding")?;
    } else {
        kubectl
            .apply(&manifests::base(spec.annotate_pod_ip))
            .context("applying the lab's base manifests (RBAC)")?;
        kubectl
            .apply(manifests::ENICONFIG_CRD)
            .context("installing the ENIConfig CRD (charts/vpcnet/crds/eniconfig.yaml)")?;
        kubectl
            .run(&[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{}", manifests::ENICONFIG_CRD_NAME),
            ])
            .context("waiting for the ENIConfig CRD to be established")?;
    }

    progress("control plane: starting kube-controller-manager, kube-scheduler, aws-cloud-controller-manager");
    let kcm_args = [
        format!("--kubeconfig={}", p(&kcm)),
        format!("--authentication-kubeconfig={}", p(&kcm)),
        format!("--authorization-kubeconfig={}", p(&kcm)),
        format!("--service-account-private-key-file={}", p(&sa_key_file)),
        format!("--root-ca-file={}", p(&ca_file)),
        format!("--cluster-signing-cert-file={}", p(&ca_file)),
        format!("--cluster-signing-key-file={}", p(&pki_dir.join("ca.key"))),
        "--use-service-account-credentials=true".into(),
        "--cloud-provider=external".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
    ];
    let mut c = Command::new(bin("kube-controller-manager"));
    c.args(&kcm_args);
    let kcm_proc = lab.processes().start(
        "kube-controller-manager",
        c,
        &crate::spawn::Place::netns(spec.netns),
    )?;
    let mut c = Command::new(bin("kube-scheduler"));
    c.args([
        format!("--kubeconfig={}", p(&sched)),
        format!("--authentication-kubeconfig={}", p(&sched)),
        format!("--authorization-kubeconfig={}", p(&sched)),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
    ]);
    let sched_proc =
        lab.processes()
            .start("kube-scheduler", c, &crate::spawn::Place::netns(spec.netns))?;
    let mut c = Command::new(bin("aws-cloud-controller-manager"));
    c.args([
        "--cloud-provider=aws".to_string(),
        format!("--cloud-config={}", p(&cloud_conf)),
        format!("--kubeconfig={}", p(&ccm)),
        format!("--authentication-kubeconfig={}", p(&ccm)),
        format!("--authorization-kubeconfig={}", p(&ccm)),
        "--controllers=cloud-node,cloud-node-lifecycle".into(),
        "--configure-cloud-routes=false".into(),
        "--use-service-account-credentials=false".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
    ]);
    c.envs(crate::cloud::aws_env(spec.ec2_endpoint));
    c.env("AWS_EC2_METADATA_DISABLED", "true");
    let ccm_proc = lab.processes().start(
        "aws-cloud-controller-manager",
        c,
        &crate::spawn::Place::netns(spec.netns),
    )?;
    crate::state::update(&lab.dir, |s| {
        s.control_plane = Some(record.clone());
        Ok(())
    })?;
    // The managed control plane's approver of kubelet serving certificates (see super::csr).
    let mut c = Command::new(lab.bin_dir().join("vpcnet"));
    c.args(["lab", "csr-approver", "--dir"]).arg(&lab.dir);
    let csr_proc =
        lab.processes()
            .start("csr-approver", c, &crate::spawn::Place::netns(spec.netns))?;
    // Each must still be running after its first seconds (flag and kubeconfig errors end them).
    std::thread::sleep(Duration::from_secs(2));
    lab.processes()
        .check_alive(&[&etcd, &api, &kcm_proc, &sched_proc, &ccm_proc, &csr_proc])?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_config_runs_off_instance_against_the_lab_endpoint() {
        let c = cloud_config("vpc-1", "subnet-2", "http://10.0.0.1:8080");
        assert!(c.contains("VPC = vpc-1\nSubnetID = subnet-2\nKubernetesClusterID = vpcnet-lab"));
        assert!(c.contains("[ServiceOverride \"ec2\"]\nService = ec2\nRegion = us-east-1\nURL = http://10.0.0.1:8080"));
        assert!(c.contains("Zone = us-east-1a"));
    }
}
