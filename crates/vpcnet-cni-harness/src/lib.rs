//! Test and benchmark harness for `vpcnet-cni`.
//!
//! - [`fake_agent`]: an in-process `CniBackend` server on a Unix socket that hands out addresses
//!   from a fixed range, with switches for readiness and injected errors;
//! - [`runtime`]: a small CNI runtime that executes a conflist chain as libcni does (prevResult
//!   from each plugin to the next on ADD, DEL in reverse, CHECK, STATUS, GC), optionally inside a
//!   network namespace;
//! - [`netns`]: test namespaces removed on drop;
//! - [`build_cache`]: where the `scripts/build-*.sh` scripts put the Go programs they build;
//! - [`npa_contract`]: the AWS node agent's gRPC edges from the VPC CNI's generated code
//!   (`npa-contract`, built by scripts/build-npa-contract.sh), for the contract tests;
//! - [`timing`]: the `timed-<plugin>` shim (`vpcnet-cni-timing`) that logs plugin-level
//!   ADD/DEL wall time and peak RSS while a real runtime drives the plugin.

pub mod build_cache;
pub mod fake_agent;
pub mod netns;
pub mod npa_contract;
pub mod runtime;
pub mod timing;
