//! The lab as a Kubernetes cluster, from the real binaries built from the Kubernetes project's
//! Go modules (`scripts/build-k8s.sh`): the control plane on its own host on the VPC fabric
//! ([`control_plane`]), and on every node kubelet, containerd's CRI plugin and kube-proxy, booted
//! through `vpcnet-bootstrap` as EKS nodes are ([`node`]), with the lab's PKI ([`pki`]); EKS's
//! default add-ons, kube-proxy's DaemonSet and CoreDNS, from the lab's own images ([`addons`]).

pub mod addons;
pub mod aws_lbc;
pub mod bins;
pub mod cluster;
pub mod conformance;
pub mod control_plane;
pub mod csr;
pub mod kubectl;
pub mod manifests;
pub mod node;
pub mod pki;
pub mod targets;
pub mod targets_chart;
pub mod vpcnet_chart;
pub mod workload;
