//! The lab's container images, built locally (no registry) as OCI image layout tarballs
//! (oci-layout, index.json, manifest, config and one uncompressed layer, all addressed by
//! SHA-256) that `ctr images import` accepts:
//! - busybox: Debian's static busybox (`/bin/busybox`) with one symlink per applet;
//! - pause: the pod sandbox image, the lab's own `lab/pause/pause.c` compiled statically.
//!
//! Both are written by `vpcnet-image` (the layer model and the OCI layout on `oci-spec`), as
//! vpcnet's own images are. Their parts ([`host_busybox`], [`add_busybox`], [`busybox_layer`],
//! [`compile_pause`], [`pause_layer`]) also make the Kubernetes e2e suite's images
//! (`kube::conformance::images`).

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use vpcnet_image::layer::Layer;
use vpcnet_image::layout::{self, ImageSpec};

/// The image reference the lab imports and runs.
pub const IMAGE_REF: &str = "localhost/vpcnet-lab/busybox:latest";
/// The pod sandbox image reference (containerd's `sandbox_image`).
pub const PAUSE_REF: &str = "localhost/vpcnet-lab/pause:3.10";
/// Source of the pause process (compiled with `gcc -static` when the lab is built).
pub const PAUSE_SOURCE: &str = include_str!("../../../lab/pause/pause.c");

/// Where Debian's busybox-static installs the binary.
pub const BUSYBOX: &str = "/bin/busybox";

/// The OCI platform architecture name of this machine (`amd64`, `arm64`, ...).
pub fn oci_arch() -> &'static str {
    vpcnet_image::images::host_arch()
}

/// The root filesystem layer as an uncompressed tar: [`busybox_layer`].
pub fn rootfs_layer(busybox: &[u8], applets: &[String]) -> Result<Vec<u8>> {
    Ok(busybox_layer(busybox, applets)?.to_tar(0)?)
}

/// The busybox root filesystem: `bin/busybox` (from `busybox`) and its applets' links
/// ([`add_busybox`]), empty `dev proc sys tmp etc root` and a minimal `etc/passwd` /
/// `etc/group`.
pub fn busybox_layer(busybox: &[u8], applets: &[String]) -> Result<Layer> {
    let mut l = Layer::new();
    for d in ["bin", "dev", "etc", "proc", "root", "sys"] {
        l.dir(d, 0o755)?;
    }
    l.dir("tmp", 0o1777)?;
    add_busybox(&mut l, busybox, applets, &[])?;
    l.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
        0o644,
    )?;
    l.file("etc/group", b"root:x:0:\n".to_vec(), 0o644)?;
    Ok(l)
}

/// Adds `bin/busybox` (from `busybox`) and a symlink `bin/<applet>` → `busybox` per name in
/// `applets`, except the names in `except` (commands the image carries as real programs).
pub fn add_busybox(
    l: &mut Layer,
    busybox: &[u8],
    applets: &[String],
    except: &[&str],
) -> Result<()> {
    l.file("bin/busybox", busybox.to_vec(), 0o755)?;
    for a in applets {
        if a == "busybox" || a.is_empty() || a.contains('/') || except.contains(&a.as_str()) {
            continue;
        }
        l.symlink(&format!("bin/{a}"), "busybox")?;
    }
    Ok(())
}

/// Reads the static busybox at `path` (normally [`BUSYBOX`]) and lists its applets
/// (`busybox --list`). Errors: busybox-static is not installed (says how to install it).
pub fn host_busybox(path: &Path) -> Result<(Vec<u8>, Vec<String>)> {
    let busybox = std::fs::read(path).with_context(|| {
        format!(
            "{} missing: install Debian's busybox-static (scripts/install-deps.sh)",
            path.display()
        )
    })?;
    let list = Command::new(path)
        .arg("--list")
        .output()
        .with_context(|| format!("running {} --list", path.display()))?;
    if !list.status.success() {
        bail!(
            "{} --list failed: is it the static busybox?",
            path.display()
        );
    }
    let applets = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    Ok((busybox, applets))
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
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let spec = ImageSpec {
        reference: reference.to_string(),
        arch: arch.to_string(),
        entrypoint: strings(entrypoint),
        cmd: strings(cmd),
        env: vec!["PATH=/bin".into()],
        user: String::new(),
        working_dir: "/".into(),
        labels: vec![],
    };
    Ok(layout::write(&spec, layer, 0)?.archive)
}

/// Builds the busybox image tarball from the host's [`BUSYBOX`] and writes it to `out`.
/// Errors: busybox-static is not installed (says how to install it).
pub fn build(out: &Path) -> Result<()> {
    let (busybox, applets) = host_busybox(Path::new(BUSYBOX))?;
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

/// Builds the pause image tarball at `out`: [`compile_pause`] (in `work`) as `/pause`, the
/// image's entrypoint.
pub fn build_pause(out: &Path, work: &Path) -> Result<()> {
    let layer = pause_layer(compile_pause(work)?)?.to_tar(0)?;
    write(
        out,
        &oci_archive(&layer, oci_arch(), PAUSE_REF, &["/pause"], &[])?,
    )
}

/// The pause layer: `pause`, the binary [`compile_pause`] made, and nothing else.
pub fn pause_layer(pause: Vec<u8>) -> Result<Layer> {
    let mut l = Layer::new();
    l.file("pause", pause, 0o755)?;
    Ok(l)
}

/// [`PAUSE_SOURCE`] compiled with `gcc -static` in `work` (a scratch directory): the binary.
/// Errors: gcc or the static C library is missing (says how to install them) or the compile
/// failed (quotes gcc).
pub fn compile_pause(work: &Path) -> Result<Vec<u8>> {
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
    Ok(std::fs::read(&bin)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_blobs_match_their_digests_and_index_names_the_image() {
        let layer = rootfs_layer(b"\x7fELF-fake", &["sh".into(), "sleep".into()]).unwrap();
        let archive = oci_archive(&layer, "amd64", IMAGE_REF, &[], &["sh"]).unwrap();
        // read() checks every blob against its name and every descriptor's size.
        let image = layout::read(&archive).unwrap();
        let m = &image.index.manifests()[0];
        let names = m.annotations().as_ref().unwrap();
        assert_eq!(names[layout::CONTAINERD_IMAGE_NAME], IMAGE_REF);
        assert_eq!(image.layer, layer);
        let config = image.config.config().as_ref().unwrap();
        assert_eq!(config.cmd().as_deref(), Some(&["sh".to_string()][..]));
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
                std::io::Read::read_to_end(&mut e, &mut v).unwrap();
                bin = Some(v);
            }
        }
        assert_eq!(bin.as_deref(), Some(&b"BB"[..]));
        // Entries in path order (the layer is written sorted).
        assert_eq!(
            links,
            vec![
                ("bin/ping".to_string(), "busybox".to_string()),
                ("bin/sh".to_string(), "busybox".to_string())
            ]
        );
    }
}
