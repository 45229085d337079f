//! Plugin logging (`pluginLogFile`, `pluginLogLevel`, like the VPC CNI's
//! AWS_VPC_K8S_PLUGIN_LOG_FILE / _LEVEL). Never stdout: stdout carries the CNI result.

use std::fs::OpenOptions;
use std::sync::Mutex;

use tracing_subscriber::filter::LevelFilter;

/// Starts logging to `file` ("stderr", a path, or "" for none) at `level`
/// (Debug/Info/Warn/Error, case-insensitive). A log file that cannot be opened disables logging
/// rather than failing the pod.
pub fn init(file: &str, level: &str) {
    let level = match level.to_ascii_lowercase().as_str() {
        "trace" => LevelFilter::TRACE,
        "debug" => LevelFilter::DEBUG,
        "warn" | "warning" => LevelFilter::WARN,
        "error" => LevelFilter::ERROR,
        _ => LevelFilter::INFO,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    match file {
        "" | "none" | "stdout" => {}
        "stderr" => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
        path => {
            if let Some(dir) = std::path::Path::new(path).parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            if let Ok(f) = OpenOptions::new().create(true).append(true).open(path) {
                let _ = builder.with_writer(Mutex::new(f)).try_init();
            }
        }
    }
}
