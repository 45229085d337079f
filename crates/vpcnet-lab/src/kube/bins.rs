//! Finding the lab's Kubernetes binaries, built from the upstream Go modules by
//! `scripts/build-k8s.sh` into a cache outside the repository.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Every binary the Kubernetes lab runs.
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "aws-cloud-controller-manager",
    "kubelet",
    "kube-proxy",
    "kubectl",
];

/// Environment variable naming the directory of the binaries (what `scripts/build-k8s.sh`
/// prints last).
pub const BIN_DIR_ENV: &str = "VPCNET_K8S_BIN_DIR";

/// Root of `scripts/build-k8s.sh`'s cache (`$VPCNET_CACHE/k8s/<key>/bin`).
pub fn cache_root() -> PathBuf {
    PathBuf::from(std::env::var("VPCNET_CACHE").unwrap_or_else(|_| "/var/cache/vpcnet".into()))
        .join("k8s")
}

/// The newest complete build in the cache (a `<key>/complete` marker next to `<key>/bin`).
fn newest_cached() -> Option<PathBuf> {
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(cache_root())
        .ok()?
        .flatten()
        .filter_map(|e| {
            let marker = e.path().join("complete");
            let t = std::fs::metadata(&marker).ok()?.modified().ok()?;
            Some((t, e.path().join("bin")))
        })
        .collect();
    builds.sort();
    builds.pop().map(|(_, p)| p)
}

/// The directory holding [`BINARIES`]: `explicit` (`--k8s-bin-dir`), else `$VPCNET_K8S_BIN_DIR`,
/// else the newest complete build in the cache. Errors say how to build them and list what is
/// missing.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = match explicit {
        Some(d) => d.to_path_buf(),
        None => match std::env::var_os(BIN_DIR_ENV) {
            Some(d) => PathBuf::from(d),
            None => match newest_cached() {
                Some(d) => d,
                None => bail!(
                    "the Kubernetes binaries are not built: run scripts/build-k8s.sh (builds \
                     them from the Go modules pinned in lab/, once per machine; the first build \
                     takes several minutes), or pass --k8s-bin-dir / set {BIN_DIR_ENV}, or use \
                     --no-kubernetes for a lab without Kubernetes"
                ),
            },
        },
    };
    let missing: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} lacks {}: run scripts/build-k8s.sh and use the directory it prints",
            dir.display(),
            missing.join(", ")
        );
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_directory_must_hold_every_binary() {
        let d = tempfile::tempdir().unwrap();
        for b in &BINARIES[..3] {
            std::fs::write(d.path().join(b), b"").unwrap();
        }
        let e = locate(Some(d.path())).unwrap_err().to_string();
        assert!(e.contains("kube-scheduler"), "{e}");
        assert!(e.contains("scripts/build-k8s.sh"), "{e}");
        for b in BINARIES {
            std::fs::write(d.path().join(b), b"").unwrap();
        }
        assert_eq!(locate(Some(d.path())).unwrap(), d.path());
    }
}
