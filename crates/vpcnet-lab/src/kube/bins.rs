//! Finding the lab's Kubernetes binaries, built from the upstream Go modules by
//! `scripts/build-k8s.sh` into a cache outside the repository.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use vpcnet_cni_harness::build_cache;

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
    build_cache::root("k8s")
}

/// The newest complete build in the cache (a `<key>/complete` marker next to `<key>/bin`).
fn newest_cached() -> Option<PathBuf> {
    build_cache::newest_complete(&cache_root())
}

/// The directory holding [`BINARIES`]: `explicit` (`--k8s-bin-dir`), else `$VPCNET_K8S_BIN_DIR`,
/// else the newest complete build in the cache. Errors say how to build them and list what is
/// missing.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf> {
    find(
        explicit,
        BINARIES,
        &format!(
            "the Kubernetes binaries are not built: run scripts/build-k8s.sh (builds \
             them from the Go modules pinned in lab/, once per machine; the first build \
             takes several minutes), or pass --k8s-bin-dir / set {BIN_DIR_ENV}, or use \
             --no-kubernetes for a lab without Kubernetes"
        ),
        "run scripts/build-k8s.sh and use the directory it prints",
    )
}

/// The first of `explicit`, `$VPCNET_K8S_BIN_DIR` and the newest cached build, checked to hold
/// every one of `wanted`. Errors: `not_built` when there is no directory at all; the directory
/// and the missing names, then `fix`, when some are absent.
fn find(explicit: Option<&Path>, wanted: &[&str], not_built: &str, fix: &str) -> Result<PathBuf> {
    find_in(explicit, BIN_DIR_ENV, newest_cached, wanted, not_built, fix)
}

/// [`find`] with the environment variable `env` and the cache lookup `cached`.
fn find_in(
    explicit: Option<&Path>,
    env: &str,
    cached: impl FnOnce() -> Option<PathBuf>,
    wanted: &[&str],
    not_built: &str,
    fix: &str,
) -> Result<PathBuf> {
    let Some(dir) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(env).map(PathBuf::from))
        .or_else(cached)
    else {
        bail!("{not_built}");
    };
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if !missing.is_empty() {
        bail!("{} lacks {}: {fix}", dir.display(), missing.join(", "));
    }
    Ok(dir)
}

/// The peer CNI's binaries, AWS's VPC CNI built unmodified from its Go module
/// (`lab/vpc-cni`) by `scripts/build-k8s.sh` into the same directory as [`BINARIES`]:
/// ipamd, the CNI plugin (`cmd/routed-eni-cni-plugin`) and the egress plugin.
pub const PEER_BINARIES: &[&str] = &["aws-k8s-agent", "aws-cni", "egress-cni"];

/// The directory holding [`PEER_BINARIES`], found as [`locate`] finds the Kubernetes binaries
/// (`explicit`, else `$VPCNET_K8S_BIN_DIR`, else the newest complete build in the cache), but
/// requiring only the peer's binaries (a lab without Kubernetes can run the peer). Errors name
/// what is missing and how to build it.
pub fn locate_peer(explicit: Option<&Path>) -> Result<PathBuf> {
    find(
        explicit,
        PEER_BINARIES,
        &format!(
            "the VPC CNI binaries are not built: run scripts/build-k8s.sh (it builds them with \
             Kubernetes, from lab/vpc-cni/go.mod), or pass --k8s-bin-dir / set {BIN_DIR_ENV}"
        ),
        "run scripts/build-k8s.sh (a build from before lab/vpc-cni existed has no VPC CNI) and \
         use the directory it prints",
    )
}

/// Environment variable naming the directory of the CoreDNS binary (what
/// `scripts/build-coredns.sh` prints last).
pub const COREDNS_BIN_DIR_ENV: &str = "VPCNET_COREDNS_BIN_DIR";

/// The newest build of one of the `scripts/build-*.sh` caches: the `<key>/bin` directory under
/// `$VPCNET_CACHE/<tool>` (default `/var/cache/vpcnet/<tool>`) whose `marker` (a file in it) is
/// the most recent.
fn newest_build(tool: &str, marker: &str) -> Option<PathBuf> {
    let cache =
        PathBuf::from(std::env::var("VPCNET_CACHE").unwrap_or_else(|_| "/var/cache/vpcnet".into()))
            .join(tool);
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&cache)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let bin = e.path().join("bin");
            let t = std::fs::metadata(bin.join(marker)).ok()?.modified().ok()?;
            Some((t, bin))
        })
        .collect();
    builds.sort();
    builds.pop().map(|(_, p)| p)
}

/// The directory holding `coredns` (built from `lab/coredns/go.mod` by
/// `scripts/build-coredns.sh`): `explicit`, else `$VPCNET_COREDNS_BIN_DIR`, else the newest
/// build in `$VPCNET_CACHE/coredns` (default `/var/cache/vpcnet/coredns`). Errors say how to
/// build it.
pub fn locate_coredns(explicit: Option<&Path>) -> Result<PathBuf> {
    let Some(dir) = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(COREDNS_BIN_DIR_ENV).map(PathBuf::from))
        .or_else(|| newest_build("coredns", "coredns"))
    else {
        bail!(
            "CoreDNS is not built: run scripts/build-coredns.sh (builds it from lab/coredns/go.mod \
             into /var/cache/vpcnet/coredns, once per machine), or set {COREDNS_BIN_DIR_ENV} to \
             the directory it prints"
        );
    };
    if !dir.join("coredns").is_file() {
        bail!(
            "{} has no coredns: run scripts/build-coredns.sh and use the directory it prints \
             ({COREDNS_BIN_DIR_ENV})",
            dir.display()
        );
    }
    Ok(dir)
}

/// Environment variable naming the directory of Kubernetes' end-to-end suite (what
/// `scripts/build-e2e.sh` prints last).
pub const E2E_BIN_DIR_ENV: &str = "VPCNET_E2E_BIN_DIR";

/// What `scripts/build-e2e.sh` builds from `lab/e2e/go.mod`: the suite, the ginkgo CLI that runs
/// it in parallel, agnhost with the certificate and key its image carries, and the conntrack
/// test's image binary.
pub const E2E_FILES: &[&str] = &[
    "e2e.test",
    "ginkgo",
    "agnhost",
    "regression-issue-74839",
    "localhost.crt",
    "localhost.key",
];

/// The directory holding [`E2E_FILES`]: `explicit`, else `$VPCNET_E2E_BIN_DIR`, else the newest
/// complete build in `$VPCNET_CACHE/e2e`. Errors say how to build it and list what is missing.
pub fn locate_e2e(explicit: Option<&Path>) -> Result<PathBuf> {
    find_in(
        explicit,
        E2E_BIN_DIR_ENV,
        || newest_build("e2e", "e2e.test"),
        E2E_FILES,
        &format!(
            "Kubernetes' end-to-end suite is not built: run scripts/build-e2e.sh (builds e2e.test, \
             ginkgo and the test images' binaries from lab/e2e/go.mod into /var/cache/vpcnet/e2e, once per \
             machine), or set {E2E_BIN_DIR_ENV} to the directory it prints"
        ),
        &format!("run scripts/build-e2e.sh and use the directory it prints ({E2E_BIN_DIR_ENV})"),
    )
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
