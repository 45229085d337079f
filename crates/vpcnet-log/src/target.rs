//! The text of a log-file setting, read as the VPC CNI reads it.

use std::path::PathBuf;

/// Where a log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stdout,
    Stderr,
    /// A file, rotated by size.
    File(PathBuf),
}

impl Target {
    /// `stdout` and `stderr` in any case (the VPC CNI compares the lower-cased value), anything
    /// else a file path. Callers decide what an empty value means before calling this.
    pub fn parse(text: &str) -> Target {
        match text.to_ascii_lowercase().as_str() {
            "stdout" => Target::Stdout,
            "stderr" => Target::Stderr,
            _ => Target::File(PathBuf::from(text)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdout_and_stderr_in_any_case_else_a_path() {
        assert_eq!(Target::parse("stdout"), Target::Stdout);
        assert_eq!(Target::parse("STDOUT"), Target::Stdout);
        assert_eq!(Target::parse("Stderr"), Target::Stderr);
        assert_eq!(
            Target::parse("/host/var/log/aws-routed-eni/ipamd.log"),
            Target::File("/host/var/log/aws-routed-eni/ipamd.log".into())
        );
        assert_eq!(
            Target::parse("/var/log/stdout"),
            Target::File("/var/log/stdout".into())
        );
    }
}
