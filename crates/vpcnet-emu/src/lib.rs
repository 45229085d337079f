//! `vpcnet-emu`: the lab and test cloud. It speaks the subset of the EC2 Query API and IMDSv2
//! that vpcnet uses, with EC2's limits, error codes and injectable faults, so the unmodified
//! aws-sdk-ec2 client (through its endpoint override) cannot tell it from EC2.
//!
//! - [`Emulator`]: the cloud (cloneable handle). Set it up in-process (`create_vpc`,
//!   `create_subnet`, `create_security_group`, `run_instance`, `register_instance_type`), inject
//!   faults (`set_faults`, `set_action_faults`, `set_imds_lag`, `set_empty_private_dns_names`),
//!   act behind the agent's back (`unassign_behind_back`, `detach_behind_back`), read call
//!   counts (`calls`) and the log of every request with its caller and answer (`requests`,
//!   [`request_log`]).
//! - Serving: [`Emulator::spawn`] (tests; 127.0.0.1 on a free port) or [`Emulator::serve`] for
//!   EC2 + the JSON control API under `/_emu/` ([`control`]); IMDS per instance with
//!   [`Emulator::imds_endpoint`] or shared by source address with [`Emulator::serve_imds`].
//! - The account's EC2 and ELBv2 rate limits ([`account_limits`], off by default):
//!   request-token buckets per account and action with AWS's documented sizes
//!   (`set_account_limits`, `account_limits`, `/_emu/account-limits`).
//! - [`FabricHooks`]: what the lab implements to mirror ENI attach/detach and address changes.
//!
//! EKS: DescribeCluster (`GET /clusters/{name}`) for the cluster records created with
//! [`Emulator::create_eks_cluster`] or `POST /_emu/eks/clusters` (endpoint, CA, service CIDR,
//! IP family, Outposts cluster ID); see [`eks`].
//!
//! EC2 actions served: DescribeInstances, DescribeInstanceTypes, DescribeSubnets, DescribeVpcs,
//! DescribeNetworkInterfaces (filters, MaxResults/NextToken), CreateNetworkInterface,
//! AttachNetworkInterface, DetachNetworkInterface, DeleteNetworkInterface,
//! ModifyNetworkInterfaceAttribute, AssignPrivateIpAddresses, UnassignPrivateIpAddresses,
//! AssignIpv6Addresses, UnassignIpv6Addresses (IPv6 /56 per VPC, /64 per subnet, addresses and
//! /80 prefixes per ENI: see `model::Ipv6Request`), CreateTags, DeleteTags, TerminateInstances, CreateSecurityGroup, DescribeSecurityGroups,
//! AuthorizeSecurityGroupIngress, RevokeSecurityGroupIngress.
//!
//! ELBv2 (API 2015-12-01) on the same endpoint, dispatched by `Version` or signing service:
//! see [`elbv2`] (load balancers, target groups, listeners, targets and their health, tags; a
//! [`elbv2::LoadBalancerPlane`] serves the traffic).
//!
//! # Binary
//!
//! `vpcnet-emu --listen 127.0.0.1:8080 --seed 1 [--config lab.json] [--imds-listen ADDR]
//! [--account-limits off|aws-defaults]`
//! builds the cloud described by the JSON file ([`config::LabConfig`]), prints the created IDs
//! as one JSON line on stdout, and serves until killed.

pub mod account_limits;
pub mod config;
pub mod control;
pub mod ecr;
pub mod eks;
pub mod elbv2;
mod emulator;
pub mod error;
pub mod faults;
pub mod hooks;
mod imds;
pub mod model;
pub mod query;
pub mod request_log;
mod server;
mod token_bucket;

pub use account_limits::{AccountLimits, AccountLimitsView, BucketOverride, BucketState};
pub use control::InstanceTypeSpec;
pub use emulator::{
    AttachmentInfo, Emulator, EmulatorOptions, EniInfo, InstanceInfo, RunInstance, VpcInfo,
};
pub use error::Ec2Error;
pub use faults::{ActionFaults, CallCounts, Faults, InstanceCalls};
pub use hooks::{
    AddressesChanged, EniAttached, EniDetached, EniIngress, FabricEvent, FabricHooks, GroupIngress,
    HookFuture, IngressRulesChanged, NoHooks,
};
pub use model::{EksCluster, EksClusterSpec};
pub use request_log::{Api, RequestLog, RequestRecord};
pub use server::EmuServer;
