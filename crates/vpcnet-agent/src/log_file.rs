//! Where the agent writes its log: `AWS_VPC_K8S_CNI_LOG_FILE` as the VPC CNI's ipamd reads it
//! (`stdout`, `stderr`, or a file rotated by size as the VPC CNI rotates it; `vpcnet-log`).
//! Unlike the VPC CNI, which runs on without its log when the file cannot be written, the agent
//! stops at start ([`open`] fails): an operator who asked for a file gets it, or is told why not.

use std::fmt;

use vpcnet_log::{LogWriter, OpenError, Rotation, Target};

/// The log file of `AWS_VPC_K8S_CNI_LOG_FILE` cannot be created or opened.
#[derive(Debug)]
pub struct LogFileError {
    /// The variable's value (the default when unset).
    pub value: String,
    pub error: OpenError,
}

impl fmt::Display for LogFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot log to AWS_VPC_K8S_CNI_LOG_FILE={:?}: {}; instead: let the agent create \
             and write that file (in the aws-node DaemonSet, mount the node's \
             /var/log/aws-routed-eni at /host/var/log/aws-routed-eni), or set \
             AWS_VPC_K8S_CNI_LOG_FILE to stdout or stderr",
            self.value, self.error
        )
    }
}

impl std::error::Error for LogFileError {}

/// The writer for the agent's log: `value` is the validated `AWS_VPC_K8S_CNI_LOG_FILE`
/// (`Config::log_file`). A file is created (with its directory) and opened now.
pub fn open(value: &str) -> Result<LogWriter, LogFileError> {
    LogWriter::open(&Target::parse(value), Rotation::VPC_CNI).map_err(|error| LogFileError {
        value: value.to_string(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_stderr_or_a_file() {
        assert!(matches!(open("stdout"), Ok(LogWriter::Stdout)));
        assert!(matches!(open("STDERR"), Ok(LogWriter::Stderr)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aws-routed-eni/ipamd.log");
        assert!(matches!(
            open(path.to_str().unwrap()),
            Ok(LogWriter::File(_))
        ));
        assert!(path.is_file());
    }

    #[test]
    fn a_file_that_cannot_be_created_names_the_variable_path_error_and_fix() {
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("plain-file");
        std::fs::write(&not_a_dir, "").unwrap();
        let path = not_a_dir.join("ipamd.log");
        let msg = open(path.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "cannot log to AWS_VPC_K8S_CNI_LOG_FILE={:?}: cannot create the directory of {}: ",
                path.display().to_string(),
                path.display()
            )),
            "{msg}"
        );
        assert!(msg.contains("os error"), "{msg}");
        assert!(msg.contains("instead: "), "{msg}");
        assert!(msg.contains("stdout or stderr"), "{msg}");
    }
}
