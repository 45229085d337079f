//! The cache the `scripts/build-*.sh` scripts build Go programs into, once per machine:
//! `$VPCNET_CACHE/<tool>/<key>/bin` (default cache `/var/cache/vpcnet`), with a `complete`
//! marker beside `bin` once a build finished.

use std::path::{Path, PathBuf};

/// `$VPCNET_CACHE/<tool>` (default `/var/cache/vpcnet/<tool>`).
pub fn root(tool: &str) -> PathBuf {
    PathBuf::from(std::env::var("VPCNET_CACHE").unwrap_or_else(|_| "/var/cache/vpcnet".into()))
        .join(tool)
}

/// The `bin` directory of the newest complete build under `root` (by its `complete`
/// marker's time); `None` when no build completed.
pub fn newest_complete(root: &Path) -> Option<PathBuf> {
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let t = std::fs::metadata(e.path().join("complete"))
                .ok()?
                .modified()
                .ok()?;
            Some((t, e.path().join("bin")))
        })
        .collect();
    builds.sort();
    builds.pop().map(|(_, p)| p)
}
