//! The agent's Kubernetes API client. IPAM never waits for it (docs/architecture.md, principle
//! 3): the pool fills, the plugin is served and the conflist is written whether the API server
//! is reachable or not; this client connects in the background with backoff, logs which
//! endpoint it uses, and, once connected, reads the agent's Node to warn when kubelet's pod
//! capacity exceeds the addresses the node can ever get. Its state is shown in introspection
//! and metrics; health and readiness never depend on it.
//!
//! Endpoint, as the VPC CNI chooses it: `CLUSTER_ENDPOINT` when set (the API server's own
//! address, reachable before kube-proxy has programmed anything), else the in-cluster
//! `kubernetes` Service (`KUBERNETES_SERVICE_HOST`/`_PORT`, reachable only once kube-proxy has
//! programmed it on the node). Credentials are the pod's service-account token and CA.
//!
//! Its state is [`vpcnet_introspection::ApiServerDoc`] (`/v1/apiserver`, `vpcnet inspect api`)
//! and the metrics `vpcnet_apiserver_connected`, `vpcnet_apiserver_connect_attempts` and
//! `vpcnet_max_pods_exceeds_pod_ips`.
//!
//! With custom networking (`AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true`) it also watches the
//! Node and the ENIConfigs ([`eniconfig_watch`]) and keeps the node's ENIConfig ([`eniconfig`])
//! in a watch channel: `/v1/eniconfig`, `vpcnet inspect eniconfig`, the metric
//! `vpcnet_eniconfig_resolved`, the Node condition `vpcnet.io/ENIConfigResolved` and Events.
//!
//! With `AWS_MANAGE_ENIS_NON_SCHEDULABLE=false` (the default) it watches the Node for the
//! cordon taint and pauses ENI management meanwhile ([`node_watch`]); with
//! `ANNOTATE_POD_IP=true` ADD and DEL annotate the pod `vpc.amazonaws.com/pod-ips`
//! ([`pod_ips`]).

pub mod capacity;
pub mod client;
pub mod eniconfig;
pub mod eniconfig_watch;
pub mod node_report;
pub mod node_watch;
pub mod pod_ips;
pub mod prefix_fallback_report;

pub use client::{endpoint, ApiSettings, Endpoint, EndpointSource};
