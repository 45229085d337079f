//! Named network namespaces (`/run/netns/<name>`, as `ip netns` makes them) and finding the
//! processes that live in one.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::cmd;

/// Directory where iproute2 keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Path of a named namespace's bind mount, e.g. `/run/netns/vl3f2a1-n1`.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(NETNS_DIR).join(name)
}

/// Whether the named namespace exists.
pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Creates the named namespace and brings its loopback up. Errors if it already exists (names
/// are unique per lab run, so an existing one means a stale lab: run `vpcnet lab down`).
pub fn create(name: &str) -> Result<()> {
    cmd::run("ip", &["netns", "add", name])
        .with_context(|| format!("creating network namespace {name}"))?;
    cmd::ip_in(name, &["link", "set", "lo", "up"])?;
    Ok(())
}

/// Deletes the named namespace if it exists (idempotent). Processes still inside keep the
/// namespace alive: kill them first ([`pids_in`]).
pub fn delete(name: &str) -> Result<()> {
    if exists(name) {
        cmd::run("ip", &["netns", "delete", name])
            .with_context(|| format!("deleting network namespace {name}"))?;
    }
    Ok(())
}

/// Inode of the namespace (identifies it in `/proc/<pid>/ns/net`), if it exists.
pub fn inode(name: &str) -> Option<u64> {
    fs::metadata(path(name)).ok().map(|m| m.ino())
}

/// Pids of every process whose network namespace is the named one (scan of `/proc`).
pub fn pids_in(name: &str) -> Vec<i32> {
    let Some(ino) = inode(name) else {
        return Vec::new();
    };
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            fs::metadata(format!("/proc/{pid}/ns/net"))
                .map(|m| m.ino() == ino)
                .unwrap_or(false)
        })
        .collect()
}
