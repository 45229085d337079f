//! Plugin logging (`pluginLogFile`, `pluginLogLevel`, like the VPC CNI's
//! AWS_VPC_K8S_PLUGIN_LOG_FILE / _LEVEL). Never stdout: stdout carries the CNI result. A log
//! file is rotated by size as the VPC CNI rotates the plugin's log (`vpcnet-log`).

use tracing_subscriber::filter::LevelFilter;
use vpcnet_log::{LogWriter, Rotation, Target};

/// Where the plugin's log goes for `file`: nowhere for "" (and for `none` or `stdout`, which
/// the plugin cannot use), stderr, or a rotated file.
pub fn target(file: &str) -> Option<Target> {
    match Target::parse(file) {
        _ if file.is_empty() || file.eq_ignore_ascii_case("none") => None,
        Target::Stdout => None,
        t => Some(t),
    }
}

/// The level of `level` (Debug/Info/Warn/Error, case-insensitive; Info otherwise).
pub fn level(level: &str) -> LevelFilter {
    match level.to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "warn" | "warning" => LevelFilter::WARN,
        "error" => LevelFilter::ERROR,
        _ => LevelFilter::INFO,
    }
}

/// Starts logging to `file` ("stderr", a path, or "" for none) at `level`. A log file that
/// cannot be opened disables logging rather than failing the pod.
pub fn init(file: &str, level_name: &str) {
    let Some(target) = target(file) else {
        return;
    };
    let Ok(writer) = LogWriter::open(&target, Rotation::VPC_CNI) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level(level_name))
        .event_format(vpcnet_log::JsonLines::new())
        .with_writer(writer)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_stdout() {
        for none in ["", "none", "stdout", "STDOUT"] {
            assert_eq!(target(none), None, "{none:?}");
        }
        assert_eq!(target("stderr"), Some(Target::Stderr));
        assert_eq!(
            target("/var/log/aws-routed-eni/plugin.log"),
            Some(Target::File("/var/log/aws-routed-eni/plugin.log".into()))
        );
    }

    #[test]
    fn levels() {
        assert_eq!(level("Debug"), LevelFilter::DEBUG);
        assert_eq!(level("WARNING"), LevelFilter::WARN);
        assert_eq!(level("Error"), LevelFilter::ERROR);
        assert_eq!(level("anything"), LevelFilter::INFO);
    }
}
