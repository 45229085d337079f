//! How vpcnet-agent and vpcnet-cni write their logs: [`JsonLines`], one JSON object per line
//! with `level`, `ts`, `caller` and `msg` as the VPC CNI's zap logger writes them.
//!
//! Where they write them, as the VPC CNI does with
//! `AWS_VPC_K8S_CNI_LOG_FILE` (ipamd) and `AWS_VPC_K8S_PLUGIN_LOG_FILE` (the plugin):
//! `stdout`, `stderr`, or a file rotated by size ([`Rotation::VPC_CNI`]: a new file past
//! 100 MiB, the last 5 kept as `<file>.1` (newest) to `<file>.5`).
//!
//! [`LogWriter`] is a `tracing_subscriber` writer for any of the three; [`LogWriter::open`]
//! creates the file's directory and opens the file at once, so a caller learns at start, not at
//! the first line, that the file cannot be written (the agent stops; the plugin logs nothing and
//! goes on). Rotation is the `rolling-file` crate's.

mod json;
mod rotation;
mod target;
mod writer;

pub use json::JsonLines;
pub use rotation::{OpenError, RotatingFile, Rotation};
pub use target::Target;
pub use writer::{LogWriter, Output};
