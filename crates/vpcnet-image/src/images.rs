//! The two images vpcnet ships, as file sets: which binaries go where, what else the image
//! carries, and what it runs.
//!
//! - **node** (`vpcnet-node`, the role of the VPC CNI's `amazon-k8s-cni` and its init image in
//!   one): `vpcnet-agent` (the default command), `vpcnet-init` (the init container's command),
//!   `vpcnet` (the operator CLI: `vpcnet inspect`, and `vpcnet inspect health` as the kubelet
//!   exec probe), `nft`, and in [`NODE_CNI_DIR`] the plugins the install step copies to the host:
//!   `vpcnet-cni` and the reference `portmap`, `bandwidth` and `tuning`.
//! - **targets** (`vpcnet-targets`): the controller as user 65532, with a read-only root
//!   filesystem in mind (it writes no file).
//!
//! Both carry every shared library their ELF files need (resolved by [`crate::elf`]) and the
//! CA bundle the AWS SDK's HTTPS client reads (the system store; kube-rs uses the cluster's CA
//! from the service account instead).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::elf;
use crate::layer::Layer;
use crate::layout::{self, BuiltImage, ImageSpec};

/// Where the node image keeps the CNI plugins its install step copies to the host.
pub const NODE_CNI_DIR: &str = "/opt/vpcnet/cni/bin";
/// The reference plugins the conflist may chain (`vpcnet-cni-config`): portmap always,
/// bandwidth with `ENABLE_BANDWIDTH_PLUGIN`, tuning with `DISABLE_POD_V6`.
pub const REFERENCE_PLUGINS: [&str; 3] = ["portmap", "bandwidth", "tuning"];
/// Where Debian's containernetworking-plugins installs them.
pub const HOST_REFERENCE_PLUGIN_DIR: &str = "/usr/lib/cni";
/// Debian's nft.
pub const HOST_NFT: &str = "/usr/sbin/nft";
/// Debian's CA bundle (ca-certificates), also the path rustls-native-certs reads first.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The non-root user and group of the targets image (the distroless "nonroot" convention).
pub const NONROOT_ID: u32 = 65532;
/// The binaries the images take from the build's binary directory.
pub const NODE_BINARIES: [&str; 4] = ["vpcnet-agent", "vpcnet-cni", "vpcnet-init", "vpcnet"];
pub const TARGETS_BINARIES: [&str; 1] = ["vpcnet-targets"];

/// Default image repository prefix (no registry: images are imported into containerd).
pub const DEFAULT_REPOSITORY: &str = "localhost/vpcnet";

const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the inputs come from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Directory of vpcnet's binaries (`target/release` or `target/debug`).
    pub bin_dir: PathBuf,
    /// Root of the build machine's file system the rest comes from (`/`).
    pub host_root: PathBuf,
    /// OCI architecture (`amd64`, `arm64`).
    pub arch: String,
    /// Image repository prefix, e.g. `localhost/vpcnet`.
    pub repository: String,
    /// Image tag.
    pub tag: String,
    /// mtime of every entry (`SOURCE_DATE_EPOCH`, or 0).
    pub mtime: u64,
}

impl Inputs {
    fn host(&self, p: &str) -> PathBuf {
        self.host_root.join(p.trim_start_matches('/'))
    }

    fn read_host(&self, p: &str, fix: &str) -> Result<Vec<u8>> {
        let hp = self.host(p);
        std::fs::read(&hp).with_context(|| format!("reading {}: {fix}", hp.display()))
    }

    fn read_bin(&self, name: &str) -> Result<Vec<u8>> {
        let p = self.bin_dir.join(name);
        std::fs::read(&p).with_context(|| {
            format!(
                "reading {}: build it first (scripts/build-images.sh builds every binary the images need)",
                p.display()
            )
        })
    }
}

/// The OCI architecture of this machine.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// An image ready to write: its spec and file set.
#[derive(Debug, Clone)]
pub struct Image {
    pub spec: ImageSpec,
    pub layer: Layer,
}

impl Image {
    /// Writes the archive (see [`layout::write`]).
    pub fn build(&self, mtime: u64) -> Result<BuiltImage> {
        let tar = self.layer.to_tar(mtime)?;
        Ok(layout::write(&self.spec, &tar, mtime)?)
    }
}

/// Adds `files` (absolute image path → bytes, mode) and everything their ELF files need.
fn add_with_libraries(
    layer: &mut Layer,
    inputs: &Inputs,
    files: BTreeMap<String, (Vec<u8>, u32)>,
) -> Result<()> {
    add_files_with_libraries(layer, &inputs.host_root, &inputs.arch, files)
}

/// Adds `files` (absolute image path → bytes, mode) to `layer`, and every shared library and
/// loader their ELF files need ([`elf::closure`]), read from the build machine under
/// `host_root` (`/` normally) for the OCI architecture `arch`. Files another program loads
/// with `dlopen()` (plugins, extension modules) are no ELF file's `DT_NEEDED`: list them in
/// `files` themselves, and their own needs are added. Errors name a library that is missing.
pub fn add_files_with_libraries(
    layer: &mut Layer,
    host_root: &Path,
    arch: &str,
    files: BTreeMap<String, (Vec<u8>, u32)>,
) -> Result<()> {
    let bytes: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(p, (d, _))| (p.clone(), d.clone()))
        .collect();
    let needed = elf::closure(host_root, &bytes, &elf::system_dirs(arch))?;
    for (p, (data, mode)) in files {
        layer.file(p.trim_start_matches('/'), data, mode)?;
    }
    for n in needed {
        let data = std::fs::read(&n.host_path)
            .with_context(|| format!("reading {}", n.host_path.display()))?;
        layer.file(n.image_path.trim_start_matches('/'), data, 0o755)?;
    }
    Ok(())
}

fn base(layer: &mut Layer, inputs: &Inputs, passwd: &str, group: &str) -> Result<()> {
    layer.dir("tmp", 0o1777)?;
    for d in ["etc", "proc", "sys", "dev", "run", "var", "root"] {
        layer.dir(d, 0o755)?;
    }
    layer.file("etc/passwd", passwd.as_bytes().to_vec(), 0o644)?;
    layer.file("etc/group", group.as_bytes().to_vec(), 0o644)?;
    let ca = inputs.read_host(CA_BUNDLE, "install Debian's ca-certificates")?;
    layer.file(CA_BUNDLE.trim_start_matches('/'), ca, 0o644)?;
    Ok(())
}

fn labels(title: &str, tag: &str) -> Vec<(String, String)> {
    vec![
        ("org.opencontainers.image.title".into(), title.into()),
        ("org.opencontainers.image.version".into(), tag.into()),
        (
            "org.opencontainers.image.licenses".into(),
            "Apache-2.0".into(),
        ),
    ]
}

/// The node image.
pub fn node(inputs: &Inputs) -> Result<Image> {
    let mut layer = Layer::new();
    base(
        &mut layer,
        inputs,
        "root:x:0:0:root:/root:/sbin/nologin\n",
        "root:x:0:\n",
    )?;
    // Mount points of the aws-node DaemonSet's host paths.
    for d in [
        "var/log/aws-routed-eni",
        "var/run/aws-node",
        "etc/cni/net.d",
        "host/opt/cni/bin",
    ] {
        layer.dir(d, 0o755)?;
    }
    let mut files = BTreeMap::new();
    for b in ["vpcnet-agent", "vpcnet-init", "vpcnet"] {
        files.insert(format!("/usr/bin/{b}"), (inputs.read_bin(b)?, 0o755));
    }
    files.insert(
        format!("{NODE_CNI_DIR}/vpcnet-cni"),
        (inputs.read_bin("vpcnet-cni")?, 0o755),
    );
    for p in REFERENCE_PLUGINS {
        let data = inputs.read_host(
            &format!("{HOST_REFERENCE_PLUGIN_DIR}/{p}"),
            "install Debian's containernetworking-plugins",
        )?;
        files.insert(format!("{NODE_CNI_DIR}/{p}"), (data, 0o755));
    }
    files.insert(
        HOST_NFT.into(),
        (
            inputs.read_host(HOST_NFT, "install Debian's nftables")?,
            0o755,
        ),
    );
    add_with_libraries(&mut layer, inputs, files)?;
    Ok(Image {
        spec: ImageSpec {
            reference: format!("{}/vpcnet-node:{}", inputs.repository, inputs.tag),
            arch: inputs.arch.clone(),
            entrypoint: vec![],
            cmd: vec!["/usr/bin/vpcnet-agent".into()],
            env: vec![PATH_ENV.into()],
            user: String::new(),
            working_dir: "/".into(),
            labels: labels("vpcnet-node", &inputs.tag),
        },
        layer,
    })
}

/// The `vpcnet-targets` image.
pub fn targets(inputs: &Inputs) -> Result<Image> {
    let mut layer = Layer::new();
    let id = NONROOT_ID;
    base(
        &mut layer,
        inputs,
        &format!("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{id}:{id}:nonroot:/nonexistent:/sbin/nologin\n"),
        &format!("root:x:0:\nnonroot:x:{id}:\n"),
    )?;
    let mut files = BTreeMap::new();
    files.insert(
        "/usr/bin/vpcnet-targets".to_string(),
        (inputs.read_bin("vpcnet-targets")?, 0o755),
    );
    add_with_libraries(&mut layer, inputs, files)?;
    Ok(Image {
        spec: ImageSpec {
            reference: format!("{}/vpcnet-targets:{}", inputs.repository, inputs.tag),
            arch: inputs.arch.clone(),
            entrypoint: vec!["/usr/bin/vpcnet-targets".into()],
            cmd: vec![],
            env: vec![PATH_ENV.into()],
            user: format!("{id}:{id}"),
            working_dir: "/".into(),
            labels: labels("vpcnet-targets", &inputs.tag),
        },
        layer,
    })
}

/// Every regular file of a layer by absolute image path, for checks on its contents.
pub fn layer_files(layer: &Layer) -> BTreeMap<String, Vec<u8>> {
    layer
        .entries()
        .filter_map(|(p, e)| match e {
            crate::layer::Entry::File { data, .. } => Some((format!("/{p}"), data.clone())),
            _ => None,
        })
        .collect()
}

/// The archive's file name for an image reference: `vpcnet-node.oci.tar`.
pub fn archive_name(reference: &str) -> String {
    let name = reference
        .rsplit_once(':')
        .map(|(n, _)| n)
        .unwrap_or(reference);
    let last = name.rsplit('/').next().unwrap_or(name);
    format!("{last}.oci.tar")
}

/// Builds both images into `out`, returning (archive path, image) per image.
pub fn build_all(inputs: &Inputs, out: &Path) -> Result<Vec<(PathBuf, Image, BuiltImage)>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut done = Vec::new();
    for image in [node(inputs)?, targets(inputs)?] {
        let built = image.build(inputs.mtime)?;
        let path = out.join(archive_name(&image.spec.reference));
        std::fs::write(&path, &built.archive)
            .with_context(|| format!("writing {}", path.display()))?;
        done.push((path, image, built));
    }
    Ok(done)
}
