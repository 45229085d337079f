//! The lab's container images, built locally (no registry) as OCI image layout tarballs
//! (oci-layout, index.json, manifest, config and one uncompressed layer, all addressed by
//! SHA-256) that `ctr images import` accepts:
//! - busybox: Debian's static busybox (`/bin/busybox`) with one symlink per applet;
//! - pause: the pod sandbox image, the lab's own `lab/pause/pause.c` compiled statically.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The image reference the lab imports and runs.
pub const IMAGE_REF: &str = "localhost/vpcnet-lab/busybox:latest";
/// The pod sandbox image reference (containerd's `sandbox_image`).
pub const PAUSE_REF: &str = "localhost/vpcnet-lab/pause:3.10";
/// Source of the pause process (compiled with `gcc -static` when the lab is built).
pub const PAUSE_SOURCE: &str = include_str!("../../../lab/pause/pause.c");

/// Where Debian's busybox-static installs the binary.
pub const BUSYBOX: &str = "/bin/busybox";

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The OCI platform architecture name of this machine (`amd64`, `arm64`, ...).
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        other => other,
    }
}

fn header(path: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_path(path).expect("short ASCII path");
    h.set_cksum();
    h
}

/// The root filesystem layer as an uncompressed tar: `bin/busybox` (from `busybox`), a
/// symlink `bin/<applet>` → `busybox` per name in `applets`, empty `dev proc sys tmp etc root`
/// and a minimal `etc/passwd` / `etc/group`.
pub fn rootfs_layer(busybox: &[u8], applets: &[String]) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for d in ["bin/", "dev/", "etc/", "proc/", "root/", "sys/", "tmp/"] {
        let mode = if d == "tmp/" { 0o1777 } else { 0o755 };
        b.append(&header(d, tar::EntryType::Directory, mode, 0), &[][..])?;
    }
    b.append(
        &header(
            "bin/busybox",
            tar::EntryType::Regular,
            0o755,
            busybox.len() as u64,
        ),
        busybox,
    )?;
    for a in applets {
        if a == "busybox" || a.is_empty() || a.contains('/') {
            continue;
        }
        let mut h = header(&format!("bin/{a}"), tar::EntryType::Symlink, 0o777, 0);
        h.set_link_name("busybox")?;
        h.set_cksum();
        b.append(&h, &[][..])?;
    }
    for (name, text) in [
        ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("etc/group", "root:x:0:\n"),
    ] {
        b.append(
            &header(name, tar::EntryType::Regular, 0o644, text.len() as u64),
            text.as_bytes(),
        )?;
    }
    Ok(b.into_inner()?)
}

/// Packs an OCI image layout tarball around one uncompressed `layer`, named `reference`, for
/// `linux/<arch>`, running `entrypoint` (empty: none) with `cmd` by default.
pub fn oci_archive(
    layer: &[u8],
    arch: &str,
    reference: &str,
    entrypoint: &[&str],
    cmd: &[&str],
) -> Result<Vec<u8>> {
    let layer_digest = sha256_hex(layer);
    let config = serde_json::to_vec(&json!({
        "architecture": arch,
        "os": "linux",
        "config": { "Env": ["PATH=/bin"], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/" },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
    }))?;
    let config_digest = sha256_hex(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = sha256_hex(&manifest);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": { "architecture": arch, "os": "linux" },
            "annotations": {
                "io.containerd.image.name": reference,
                "org.opencontainers.image.ref.name": "latest",
            },
        }],
    }))?;
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec();

    let mut b = tar::Builder::new(Vec::new());
    for d in ["blobs/", "blobs/sha256/"] {
        b.append(&header(d, tar::EntryType::Directory, 0o755, 0), &[][..])?;
    }
    let files: Vec<(String, &[u8])> = vec![
        ("oci-layout".into(), &layout),
        ("index.json".into(), &index),
        (format!("blobs/sha256/{layer_digest}"), layer),
        (format!("blobs/sha256/{config_digest}"), &config),
        (format!("blobs/sha256/{manifest_digest}"), &manifest),
    ];
    for (name, data) in files {
        b.append(
            &header(&name, tar::EntryType::Regular, 0o644, data.len() as u64),
            data,
        )?;
    }
    Ok(b.into_inner()?)
}

/// Builds the busybox image tarball from the host's [`BUSYBOX`] and writes it to `out`.
/// Errors: busybox-static is not installed (says how to install it).
pub fn build(out: &Path) -> Result<()> {
    let busybox = std::fs::read(BUSYBOX).with_context(|| {
        format!("{BUSYBOX} missing: install Debian's busybox-static (scripts/install-deps.sh)")
    })?;
    let list = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .with_context(|| format!("running {BUSYBOX} --list"))?;
    if !list.status.success() {
        bail!("{BUSYBOX} --list failed: is it the static busybox?");
    }
    let applets: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let layer = rootfs_layer(&busybox, &applets)?;
    write(
        out,
        &oci_archive(&layer, oci_arch(), IMAGE_REF, &[], &["sh"])?,
    )
}

fn write(out: &Path, data: &[u8]) -> Result<()> {
    let mut f =
        std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    f.write_all(data)?;
    Ok(())
}

/// Builds the pause image tarball at `out`: [`PAUSE_SOURCE`] compiled with `gcc -static` (in
/// `work`, a scratch directory) as `/pause`, the image's entrypoint. Errors: gcc or the static C
/// library is missing (says how to install them) or the compile failed (quotes gcc).
pub fn build_pause(out: &Path, work: &Path) -> Result<()> {
    std::fs::create_dir_all(work)?;
    let src = work.join("pause.c");
    let bin = work.join("pause");
    std::fs::write(&src, PAUSE_SOURCE)?;
    let o = Command::new("gcc")
        .args(["-static", "-O2", "-s", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .context("cannot run gcc: install gcc and libc6-dev (scripts/install-deps.sh)")?;
    if !o.status.success() {
        bail!(
            "compiling the pause process failed (gcc -static needs libc6-dev): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let pause = std::fs::read(&bin)?;
    let mut b = tar::Builder::new(Vec::new());
    b.append(
        &header("pause", tar::EntryType::Regular, 0o755, pause.len() as u64),
        &pause[..],
    )?;
    let layer = b.into_inner()?;
    write(
        out,
        &oci_archive(&layer, oci_arch(), PAUSE_REF, &["/pause"], &[])?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Read;

    fn entries(tarball: &[u8]) -> BTreeMap<String, Vec<u8>> {
        let mut a = tar::Archive::new(tarball);
        let mut m = BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().to_string_lossy().into_owned();
            let mut v = Vec::new();
            e.read_to_end(&mut v).unwrap();
            m.insert(p, v);
        }
        m
    }

    #[test]
    fn layout_blobs_match_their_digests_and_index_names_the_image() {
        let layer = rootfs_layer(b"\x7fELF-fake", &["sh".into(), "sleep".into()]).unwrap();
        let files = entries(&oci_archive(&layer, "amd64", IMAGE_REF, &[], &["sh"]).unwrap());
        for (p, data) in &files {
            if let Some(d) = p.strip_prefix("blobs/sha256/") {
                if !d.is_empty() {
                    assert_eq!(sha256_hex(data), d, "blob {p}");
                }
            }
        }
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let m = &index["manifests"][0];
        assert_eq!(m["annotations"]["io.containerd.image.name"], IMAGE_REF);
        let md = m["digest"]
            .as_str()
            .unwrap()
            .strip_prefix("sha256:")
            .unwrap();
        let manifest: serde_json::Value =
            serde_json::from_slice(&files[&format!("blobs/sha256/{md}")]).unwrap();
        let ld = manifest["layers"][0]["digest"].as_str().unwrap();
        assert_eq!(ld, format!("sha256:{}", sha256_hex(&layer)));
        assert_eq!(manifest["layers"][0]["size"], layer.len());
    }

    #[test]
    fn layer_has_busybox_and_applet_links() {
        let layer = rootfs_layer(b"BB", &["sh".into(), "busybox".into(), "ping".into()]).unwrap();
        let mut a = tar::Archive::new(&layer[..]);
        let mut links = Vec::new();
        let mut bin = None;
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().to_string_lossy().into_owned();
            if e.header().entry_type() == tar::EntryType::Symlink {
                links.push((
                    p,
                    e.link_name()
                        .unwrap()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                ));
            } else if p == "bin/busybox" {
                let mut v = Vec::new();
                e.read_to_end(&mut v).unwrap();
                bin = Some(v);
            }
        }
        assert_eq!(bin.as_deref(), Some(&b"BB"[..]));
        assert_eq!(
            links,
            vec![
                ("bin/sh".to_string(), "busybox".to_string()),
                ("bin/ping".to_string(), "busybox".to_string())
            ]
        );
    }
}
