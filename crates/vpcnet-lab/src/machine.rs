//! A lab node's filesystem view: a persistent mount namespace in which the node's own
//! directories appear at the standard paths of an EKS worker node (`/etc/kubernetes`,
//! `/var/lib/kubelet`, `/etc/cni/net.d`, `/opt/cni/bin`, `/run/containerd`, `/var/run/aws-node`,
//! ...). Every process of the node (containerd and its shims, kubelet, kube-proxy, the agent,
//! the CNI plugins, vpcnet-bootstrap) joins it, so each uses its usual, hard-coded paths, and two
//! nodes on one machine never see each other's files. Mounts the node's processes make (pod
//! volumes, container root filesystems, pod network namespaces) stay inside it and vanish with
//! it.
//!
//! The namespace is kept alive by bind-mounting its `/proc/<pid>/ns/mnt` on a file in the lab's
//! `mnt/` directory (itself a private bind mount, so the namespace file never propagates), the way
//! `ip netns` keeps network namespaces. Bind-mount targets that do not exist on the host are
//! created there as empty directories (nothing is ever written into them on the host).
//!
//! Beside it each node has a UTS namespace of its own, kept alive the same way
//! ([`uts_file`]): its hostname is the node's name until the cloud has launched its instance,
//! then the instance's private DNS name ([`set_hostname`]), as cloud-init sets it on EC2. The
//! node's processes join it with the mount namespace, so host-network pods see the node's name.
//!
//! Kernel tunables kubelet insists on (`vm.overcommit_memory`, `kernel.panic`, ... in
//! kubelet's `setupKernelTunables`) are global, not per namespace: the node sees per-node files
//! holding kubelet's values bind-mounted over them, so kubelet finds what it wants and never
//! writes the host's.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;

/// Node paths backed by the same path under the node's root directory. `/var/run` is a symlink
/// to `/run` on Debian, so `/run/...` covers both spellings.
pub const NODE_DIRS: &[&str] = &[
    "/etc/kubernetes",
    "/etc/systemd/system",
    "/etc/containerd",
    "/etc/eks",
    "/etc/cni/net.d",
    "/opt/cni/bin",
    "/var/lib/kubelet",
    "/var/lib/kube-proxy",
    "/var/lib/containerd",
    "/var/lib/cni",
    "/var/log/pods",
    "/var/log/containers",
    "/var/log/aws-routed-eni",
    "/run/containerd",
    "/run/vpcnet",
    "/run/aws-node",
    "/run/netns",
    "/run/secrets",
];

/// The node's `/etc/hosts`: a file of the node's root bound over the host's.
pub const HOSTS: &str = "/etc/hosts";

/// Kernel tunables kubelet sets unless they already hold these values (kubelet's
/// `setupKernelTunables`): path under `/proc/sys`, value.
pub const KUBELET_TUNABLES: &[(&str, &str)] = &[
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

pub use crate::state::host_path;

/// The directory of persistent mount namespace files of the lab in `lab_dir`.
pub fn ns_dir(lab_dir: &Path) -> PathBuf {
    lab_dir.join("mnt")
}

/// Makes `ns_dir(lab_dir)` a private bind mount of itself (once per lab), so namespace files
/// bound inside it never propagate to other mount namespaces. Idempotent.
fn ensure_ns_dir(lab_dir: &Path) -> Result<PathBuf> {
    let d = ns_dir(lab_dir);
    fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    let ds = d.display().to_string();
    let mounted = crate::teardown::mounts_under(&d).iter().any(|m| m == &d);
    if !mounted {
        cmd::run("mount", &["--bind", &ds, &ds])?;
    }
    cmd::run("mount", &["--make-private", &ds])?;
    Ok(d)
}

/// The shell script run in the new namespace: create the node directories, bind them and the
/// tunable files over the standard paths.
fn setup_script(root: &Path, tunables_dir: &Path) -> String {
    let mut s = String::from("set -e\n");
    for p in NODE_DIRS {
        let src = host_path(root, p);
        s.push_str(&format!("mount --bind '{}' '{p}'\n", src.display()));
    }
    s.push_str(&format!(
        "mount --bind '{}' /etc/hosts\n",
        host_path(root, HOSTS).display()
    ));
    for (p, _) in KUBELET_TUNABLES {
        s.push_str(&format!(
            "mount --bind '{}' '/proc/sys/{p}'\n",
            tunables_dir.join(p.replace('/', ".")).display()
        ));
    }
    s
}

/// Creates the node's mount namespace, kept at `<lab>/mnt/<node>`: every [`NODE_DIRS`] entry
/// bound from `root` (created if missing, both in `root` and, as an empty mount target, on the
/// host) and the [`KUBELET_TUNABLES`] files bound over `/proc/sys`. Returns the namespace file
/// for [`crate::spawn::Place::mount_ns`]. Errors name the mount that failed.
pub fn create(lab_dir: &Path, node: &str, root: &Path) -> Result<PathBuf> {
    for p in NODE_DIRS {
        fs::create_dir_all(host_path(root, p))?;
        let target = Path::new(p);
        if !target.exists() {
            fs::create_dir_all(target)
                .with_context(|| format!("creating the empty mount target {}", target.display()))?;
        }
    }
    // The node's own /etc/hosts (a copy of the host's at creation), so the lab can name its
    // services (the private registry under an ECR-shaped name) for the node alone.
    let hosts = host_path(root, HOSTS);
    if !hosts.exists() {
        fs::create_dir_all(hosts.parent().expect("under the root"))?;
        fs::write(&hosts, fs::read("/etc/hosts").unwrap_or_default())?;
    }
    let tunables = root.join(".tunables");
    fs::create_dir_all(&tunables)?;
    for (p, v) in KUBELET_TUNABLES {
        fs::write(tunables.join(p.replace('/', ".")), format!("{v}\n"))?;
    }
    let file = ensure_ns_dir(lab_dir)?.join(node);
    fs::write(&file, b"").with_context(|| format!("creating {}", file.display()))?;
    let uts = uts_file(&file);
    fs::write(&uts, b"").with_context(|| format!("creating {}", uts.display()))?;
    let out = Command::new("unshare")
        .arg(format!("--mount={}", file.display()))
        .arg(format!("--uts={}", uts.display()))
        .args(["--propagation", "slave", "--", "/bin/sh", "-c"])
        .arg(format!(
            "{}hostname '{node}'\n",
            setup_script(root, &tunables)
        ))
        .output()
        .context("cannot run `unshare` (util-linux)")?;
    if !out.status.success() {
        bail!(
            "creating the mount namespace of node {node}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(file)
}

/// The file that holds a node's UTS namespace (its own hostname, as an EC2 instance has), beside
/// its mount namespace's file `mntns`: host-network pods share it, so agnhost's `/hostname` in
/// such a pod answers the node's name, as on EKS.
pub fn uts_file(mntns: &Path) -> PathBuf {
    let mut name = mntns.as_os_str().to_owned();
    name.push(".uts");
    PathBuf::from(name)
}

/// Sets the hostname of the node whose mount namespace is `mntns` (its instance's private DNS
/// name once the cloud has launched it, as cloud-init sets it on EC2).
pub fn set_hostname(mntns: &Path, hostname: &str) -> Result<()> {
    let uts = uts_file(mntns);
    cmd::run(
        "nsenter",
        &[&format!("--uts={}", uts.display()), "hostname", hostname],
    )
    .with_context(|| format!("setting the hostname {hostname} in {}", uts.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_live_under_the_node_root() {
        let r = Path::new("/run/vpcnet-lab/x/n1/root");
        assert_eq!(
            host_path(r, "/etc/cni/net.d"),
            PathBuf::from("/run/vpcnet-lab/x/n1/root/etc/cni/net.d")
        );
    }

    #[test]
    fn script_binds_every_directory_and_tunable() {
        let s = setup_script(Path::new("/r"), Path::new("/t"));
        for p in NODE_DIRS {
            assert!(s.contains(&format!("mount --bind '/r{p}' '{p}'")), "{p}");
        }
        assert!(
            s.contains("mount --bind '/t/vm.overcommit_memory' '/proc/sys/vm/overcommit_memory'")
        );
        assert!(s.contains("mount --bind '/r/etc/hosts' /etc/hosts"));
        assert_eq!(
            s.lines().count(),
            2 + NODE_DIRS.len() + KUBELET_TUNABLES.len()
        );
    }
}
