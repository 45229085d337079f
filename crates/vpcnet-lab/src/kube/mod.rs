//! The lab as a Kubernetes cluster, from the real binaries built from the Kubernetes project's
//! Go modules (`scripts/build-k8s.sh`): the control plane on its own host on the VPC fabric
//! ([`control_plane`]), and on every node kubelet, containerd's CRI plugin and kube-proxy, booted
//! through `vpcnet-bootstrap` as EKS nodes are ([`node`]), with the lab's PKI ([`pki`]).

pub mod aws_lbc;
pub mod bins;
pub mod cluster;
pub mod control_plane;
pub mod csr;
pub mod kubectl;
pub mod manifests;
pub mod node;
pub mod pki;
pub mod targets;
pub mod vpcnet_chart;
pub mod workload;
