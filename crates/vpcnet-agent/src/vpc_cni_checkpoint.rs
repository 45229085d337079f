//! The in-place swap with the VPC CNI (docs/migration.md):
//!
//! - **Import** ([`import_at_start`]): an agent that starts without a checkpoint of its own
//!   and finds the VPC CNI's (`VPCNET_VPC_CNI_CHECKPOINT`, default
//!   `/var/run/aws-node/ipam.json`) adopts its allocations: each address onto the ENI that
//!   EC2 lists it on (the start-up describe), written as the agent's checkpoint before the
//!   pool is restored from it. Running pods keep their addresses; DEL of a pod the VPC CNI
//!   set up finds its assignment.
//! - **Export** ([`export_command`], `vpcnet-agent export-vpc-cni-checkpoint`): with the agent
//!   stopped, writes its checkpoint in the VPC CNI's format, so ipamd, started next, adopts
//!   the running pods (the rollback).
//!
//! With ENABLE_MULTI_NIC ipamd keeps one more file per further network card next to it
//! (`ipam-nic-<card>.json`, [`vpc_cni::card_file_name`]): both directions read and write those
//! too, so a multi-homed pod keeps every interface's address across the swap.
//!
//! The conversion itself is pure: [`vpcnet_ipam::vpc_cni`].

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use vpcnet_ec2::NetworkInterface;
use vpcnet_ipam::vpc_cni::{self, VpcCniCheckpoint, VPC_CNI_NETWORK_NAME};
use vpcnet_ipam::Checkpoint;

use crate::checkpoint_file::{self, CheckpointStore};

/// The ENI of `enis` holding `ip` as a secondary address or in a prefix.
fn eni_holding(enis: &[NetworkInterface], ip: Ipv4Addr) -> Option<String> {
    enis.iter()
        .find(|e| e.secondary_ips.contains(&ip) || e.prefixes.iter().any(|p| p.contains(&ip)))
        .map(|e| e.eni_id.clone())
}

/// For a start without a checkpoint of the agent's own (the caller read `store` and found
/// none): when the VPC CNI's checkpoint exists at `vpc_cni_path`, converts it (addresses onto
/// the ENIs of `enis`, EC2's view at start), writes it to `store` and returns it; `None` when
/// there is no VPC CNI checkpoint. Errors: the VPC CNI's file is unreadable or not of its format, or the write
/// failed: the agent then stops rather than start without the running pods' addresses (fix
/// or move the file; docs/migration.md).
pub fn import_at_start(
    store: &dyn CheckpointStore,
    vpc_cni_path: &Path,
    enis: &[NetworkInterface],
) -> Result<Option<Checkpoint>> {
    let text = match std::fs::read_to_string(vpc_cni_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "reading the VPC CNI's checkpoint {}",
                    vpc_cni_path.display()
                )
            })
        }
    };
    let parse = |path: &Path, text: &str| {
        VpcCniCheckpoint::from_json(text).with_context(|| {
            format!(
                "the VPC CNI's checkpoint {} cannot be imported; move it away to start without it (running pods' addresses are then held only while their routes exist)",
                path.display()
            )
        })
    };
    let mut files = vec![(0, parse(vpc_cni_path, &text)?)];
    for (card, path) in card_files(vpc_cni_path) {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the VPC CNI's checkpoint {}", path.display()))?;
        files.push((card, parse(&path, &text)?));
    }
    let cards: Vec<(u32, &VpcCniCheckpoint)> = files.iter().map(|(c, f)| (*c, f)).collect();
    let (ours, skipped) = vpc_cni::import_cards(&cards, |ip| eni_holding(enis, ip))
        .with_context(|| format!("importing {}", vpc_cni_path.display()))?;
    for s in &skipped {
        tracing::warn!(container = %s.container_id, address = %s.address, reason = s.reason, "VPC CNI allocation not imported");
    }
    store
        .write(&ours)
        .with_context(|| format!("writing the imported checkpoint to {}", store.location()))?;
    tracing::info!(
        from = %vpc_cni_path.display(),
        to = %store.location(),
        assignments = ours.assignments.len(),
        skipped = skipped.len(),
        "adopted the VPC CNI's checkpoint"
    );
    Ok(Some(ours))
}

/// ipamd's checkpoints of the network cards other than 0 next to its card-0 file `main`
/// (`<main without .json>-nic-<card>.json`), by card.
fn card_files(main: &Path) -> Vec<(u32, PathBuf)> {
    let (Some(dir), Some(name)) = (main.parent(), main.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{}-nic-", name.trim_end_matches(".json"));
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.to_string();
            let card: u32 = n
                .strip_prefix(&prefix)?
                .strip_suffix(".json")?
                .parse()
                .ok()?;
            (card > 0).then(|| (card, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// Writes vpcnet's checkpoint at `from` as the VPC CNI's checkpoint at `to` (atomically),
/// under the network name `network_name`, plus one file per further network card holding
/// assignments ([`vpc_cni::card_file_name`]). Returns the number of allocations written.
/// Errors: `from` is missing or invalid, or a file cannot be written.
pub fn export(from: &Path, to: &Path, network_name: &str) -> Result<usize> {
    let text = std::fs::read_to_string(from)
        .with_context(|| format!("reading vpcnet's checkpoint {}", from.display()))?;
    let ours = Checkpoint::from_json(&text)
        .with_context(|| format!("vpcnet's checkpoint {} is invalid", from.display()))?;
    let mut written = 0;
    for (card, theirs) in vpc_cni::export_cards(&ours, network_name) {
        let path = PathBuf::from(vpc_cni::card_file_name(&to.to_string_lossy(), card));
        checkpoint_file::write_atomic(&path, theirs.to_json().as_bytes())
            .with_context(|| format!("writing the VPC CNI's checkpoint {}", path.display()))?;
        written += theirs.allocations.len();
    }
    Ok(written)
}

/// `vpcnet-agent export-vpc-cni-checkpoint [--from PATH] [--to PATH] [--network-name NAME]`
/// (the binary parses the arguments): `from` defaults to `VPCNET_CHECKPOINT_PATH`, `to` to
/// `VPCNET_VPC_CNI_CHECKPOINT`, `network` to the VPC CNI's network name. Refuses while the
/// agent's socket answers (a running agent would keep changing its checkpoint after the
/// export). Returns the line to print.
pub fn export_command(
    from: Option<PathBuf>,
    to: Option<PathBuf>,
    network: Option<String>,
    config: &crate::config::Config,
) -> Result<String> {
    let from = from.unwrap_or_else(|| config.checkpoint_path.clone());
    let to = to.unwrap_or_else(|| config.vpc_cni_checkpoint.clone());
    let network = network.unwrap_or_else(|| VPC_CNI_NETWORK_NAME.to_string());
    if std::os::unix::net::UnixStream::connect(&config.agent_socket).is_ok() {
        bail!(
            "vpcnet-agent is running (its socket {} answers): stop it first, so the checkpoint no longer changes",
            config.agent_socket.display()
        );
    }
    let n = export(&from, &to, &network)?;
    Ok(format!(
        "wrote {n} allocation(s) from {} to {} (network {network})",
        from.display(),
        to.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint_file::Loaded;
    use vpcnet_ipam::CHECKPOINT_VERSION;

    fn eni(id: &str, ips: &[&str]) -> NetworkInterface {
        NetworkInterface {
            eni_id: id.into(),
            mac: String::new(),
            description: String::new(),
            subnet_id: String::new(),
            vpc_id: String::new(),
            availability_zone: String::new(),
            primary_ip: Ipv4Addr::new(10, 0, 1, 1),
            secondary_ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            prefixes: vec![],
            attachment: None,
            status: "in-use".into(),
            security_group_ids: vec![],
            interface_type: "interface".into(),
            requester_managed: false,
            tags: Default::default(),
        }
    }

    const IPAMD: &str = r#"{"version":"vpc-cni-ipam/1","allocations":[{"networkName":"aws-cni","containerID":"abc","ifName":"eth0","ipv4":"10.0.1.30","allocationTimestamp":1764586000000000000,"metadata":{"k8sPodNamespace":"default","k8sPodName":"p","interfacesCount":1}}]}"#;

    #[test]
    fn imports_only_without_a_checkpoint_of_its_own_and_exports_back() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("vpcnet/ipam.json");
        let theirs = dir.path().join("aws-node/ipam.json");
        let store = checkpoint_file::FileCheckpoint { path: ours.clone() };
        let enis = [eni("eni-1", &["10.0.1.10"]), eni("eni-2", &["10.0.1.30"])];
        // No VPC CNI checkpoint: nothing.
        assert_eq!(import_at_start(&store, &theirs, &enis).unwrap(), None);
        std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
        std::fs::write(&theirs, IPAMD).unwrap();
        let imported = import_at_start(&store, &theirs, &enis).unwrap().unwrap();
        assert_eq!(imported.assignments.len(), 1);
        let Loaded::Valid(cp) = store.load(1) else {
            panic!("no checkpoint written")
        };
        assert_eq!(cp, imported);
        assert_eq!(cp.version, CHECKPOINT_VERSION);
        assert_eq!(cp.assignments[0].eni_id, "eni-2");
        assert_eq!(cp.assignments[0].container_id, "abc");
        // Back: the VPC CNI's format, the same allocation.
        let back = dir.path().join("back/ipam.json");
        assert_eq!(export(&ours, &back, "aws-cni").unwrap(), 1);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&back).unwrap()).unwrap();
        assert_eq!(v["version"], "vpc-cni-ipam/1");
        assert_eq!(v["allocations"][0]["containerID"], "abc");
        assert_eq!(v["allocations"][0]["ipv4"], "10.0.1.30");
        assert_eq!(v["allocations"][0]["networkName"], "aws-cni");
    }

    #[test]
    fn a_multi_homed_pods_card_file_is_imported_and_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = checkpoint_file::FileCheckpoint {
            path: dir.path().join("vpcnet/ipam.json"),
        };
        let theirs = dir.path().join("ipam.json");
        let alloc = |ip: &str| {
            format!(
                r#"{{"version":"vpc-cni-ipam/1","allocations":[{{"networkName":"aws-cni","containerID":"m","ifName":"eth0","ipv4":"{ip}","allocationTimestamp":1,"metadata":{{"k8sPodNamespace":"default","k8sPodName":"m","interfacesCount":2}}}}]}}"#
            )
        };
        std::fs::write(&theirs, alloc("10.0.1.30")).unwrap();
        std::fs::write(dir.path().join("ipam-nic-1.json"), alloc("10.0.2.30")).unwrap();
        let enis = [eni("eni-0", &["10.0.1.30"]), eni("eni-c1", &["10.0.2.30"])];
        let cp = import_at_start(&store, &theirs, &enis).unwrap().unwrap();
        let mut keys: Vec<_> = cp
            .assignments
            .iter()
            .map(|a| (a.if_name.as_str(), a.eni_id.as_str()))
            .collect();
        keys.sort();
        assert_eq!(keys, vec![("eth0", "eni-0"), ("mNicIf1", "eni-c1")]);
        // Back: the card-1 file again, keyed by the pod's own interface.
        let back = dir.path().join("back/ipam.json");
        assert_eq!(export(&store.path, &back, "aws-cni").unwrap(), 2);
        let nic1: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("back/ipam-nic-1.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(nic1["allocations"][0]["ipv4"], "10.0.2.30");
        assert_eq!(nic1["allocations"][0]["ifName"], "eth0");
        assert_eq!(nic1["allocations"][0]["metadata"]["interfacesCount"], 2);
    }

    #[test]
    fn a_vpc_cni_checkpoint_of_another_format_stops_the_start_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = checkpoint_file::FileCheckpoint {
            path: dir.path().join("ours.json"),
        };
        let theirs = dir.path().join("theirs.json");
        std::fs::write(&theirs, r#"{"version":"vpc-cni-ipam/9","allocations":[]}"#).unwrap();
        let e = format!("{:#}", import_at_start(&store, &theirs, &[]).unwrap_err());
        assert!(
            e.contains("theirs.json") && e.contains("vpc-cni-ipam/9"),
            "{e}"
        );
        assert!(matches!(store.load(1), Loaded::Missing), "nothing written");
    }
}
