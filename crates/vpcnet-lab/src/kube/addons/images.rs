//! The add-ons' images, written with `vpcnet-image`'s layer and layout API (no container
//! engine), reproducibly (entries sorted, owner 0:0, mtime 0, no timestamps in the
//! configuration), and imported into every node's containerd as the lab's busybox and pause:
//!
//! - **kube-proxy**: the lab's pinned `kube-proxy` (`scripts/build-k8s.sh`) and what it runs in
//!   iptables mode: Debian's `xtables-nft-multi` as `iptables`, `iptables-save`,
//!   `iptables-restore` and the `ip6tables` trio (kube-proxy runs all six; the nf_tables
//!   variant, the host's default and the one the lab's process-mode kube-proxy uses), the
//!   extension modules it `dlopen()`s from `/usr/lib/<triplet>/xtables/` (no `DT_NEEDED` names
//!   them, so they are listed here and their own libraries follow), and `nft` (kube-proxy in
//!   iptables mode deletes a leftover nftables-mode table at start with it). No `conntrack`:
//!   kube-proxy 1.34 clears conntrack entries over netlink.
//! - **coredns**: the static CoreDNS built from its Go module (`scripts/build-coredns.sh`) at
//!   `/coredns`, run as user 65532.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use vpcnet_image::elf;
use vpcnet_image::images::{add_files_with_libraries, Image, NONROOT_ID};
use vpcnet_image::layer::Layer;
use vpcnet_image::layout::{BuiltImage, ImageSpec};

/// The kube-proxy image (the tag is the pinned Kubernetes release, `lab/k8s/go.mod`).
pub const KUBE_PROXY_REF: &str = "localhost/vpcnet-lab/kube-proxy:v1.34.4";
/// The CoreDNS image (the tag is the pinned CoreDNS, `lab/coredns/go.mod`).
pub const COREDNS_REF: &str = "localhost/vpcnet-lab/coredns:v1.12.4";

/// Where kube-proxy sits in the image (as in EKS's kube-proxy image).
pub const KUBE_PROXY_PATH: &str = "/usr/local/bin/kube-proxy";
/// Where CoreDNS sits in the image (as in CoreDNS's own image): the entry point.
pub const COREDNS_PATH: &str = "/coredns";

/// Debian's iptables multi-call binary of the nf_tables variant.
pub const XTABLES_NFT: &str = "/usr/sbin/xtables-nft-multi";
/// The commands kube-proxy runs in iptables mode, each a link to [`XTABLES_NFT`].
pub const IPTABLES_COMMANDS: [&str; 6] = [
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
];
/// Debian's nft.
pub const NFT: &str = "/usr/sbin/nft";

const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the images' files come from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// The kube-proxy binary.
    pub kube_proxy: PathBuf,
    /// The CoreDNS binary.
    pub coredns: PathBuf,
    /// Root of the build machine's file system the rest comes from (`/`).
    pub host_root: PathBuf,
    /// OCI architecture (`amd64`, `arm64`).
    pub arch: String,
}

impl Sources {
    fn host(&self, p: &str) -> PathBuf {
        host_path(&self.host_root, p)
    }
}

/// `p`, an absolute path on the build machine, under `host_root` (normally `/`).
pub(crate) fn host_path(host_root: &Path, p: &str) -> PathBuf {
    host_root.join(p.trim_start_matches('/'))
}

/// iptables' extension directory for `arch`: `/usr/lib/<triplet>/xtables`.
pub fn xtables_dir(arch: &str) -> String {
    format!("/usr/lib/{}/xtables", elf::multiarch_triplet(arch))
}

/// The file at `p`; an error names it and `fix`, what to do when it is missing.
pub(crate) fn read(p: &Path, fix: &str) -> Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("reading {}: {fix}", p.display()))
}

/// The directories every image has (`/tmp` sticky) and its `/etc/passwd` and `/etc/group`.
pub(crate) fn base(layer: &mut Layer, passwd: &str, group: &str) -> Result<()> {
    layer.dir("tmp", 0o1777)?;
    for d in ["etc", "proc", "sys", "dev", "run", "var", "root"] {
        layer.dir(d, 0o755)?;
    }
    layer.file("etc/passwd", passwd.as_bytes().to_vec(), 0o644)?;
    layer.file("etc/group", group.as_bytes().to_vec(), 0o644)?;
    Ok(())
}

/// The configuration of an image named `reference`: `entrypoint`, no command, the usual
/// `PATH`, `user` (empty: root), title and version labels from the reference.
pub(crate) fn spec(reference: &str, arch: &str, entrypoint: &[&str], user: String) -> ImageSpec {
    let title = reference
        .rsplit_once(':')
        .map(|(n, _)| n)
        .unwrap_or(reference)
        .rsplit('/')
        .next()
        .unwrap_or(reference);
    let tag = reference.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
    ImageSpec {
        reference: reference.into(),
        arch: arch.into(),
        entrypoint: entrypoint.iter().map(|s| s.to_string()).collect(),
        cmd: vec![],
        env: vec![PATH_ENV.into()],
        user,
        working_dir: "/".into(),
        labels: vec![
            ("org.opencontainers.image.title".into(), title.into()),
            ("org.opencontainers.image.version".into(), tag.into()),
        ],
    }
}

/// The kube-proxy image (see the module documentation). Runs as root (it programs the node's
/// firewall from the host network namespace, privileged); no entry point, the pod's command
/// names [`KUBE_PROXY_PATH`].
pub fn kube_proxy(src: &Sources) -> Result<Image> {
    let mut layer = Layer::new();
    base(
        &mut layer,
        "root:x:0:0:root:/root:/sbin/nologin\n",
        "root:x:0:\n",
    )?;
    let mut files = BTreeMap::new();
    files.insert(
        KUBE_PROXY_PATH.to_string(),
        (read(&src.kube_proxy, "run scripts/build-k8s.sh")?, 0o755),
    );
    let debian = "install Debian's iptables and nftables (scripts/install-deps.sh)";
    files.insert(
        XTABLES_NFT.to_string(),
        (read(&src.host(XTABLES_NFT), debian)?, 0o755),
    );
    files.insert(NFT.to_string(), (read(&src.host(NFT), debian)?, 0o755));
    for c in IPTABLES_COMMANDS {
        layer.symlink(&format!("usr/sbin/{c}"), "xtables-nft-multi")?;
    }
    // The extension modules, loaded with dlopen() by name: links stay links.
    let xt = xtables_dir(&src.arch);
    let host_xt = src.host(&xt);
    let mut names: Vec<_> = std::fs::read_dir(&host_xt)
        .with_context(|| format!("reading {}: {debian}", host_xt.display()))?
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        let image_path = format!("{xt}/{name}");
        if e.file_type()?.is_symlink() {
            let target = std::fs::read_link(e.path())?;
            layer.symlink(
                image_path.trim_start_matches('/'),
                &target.to_string_lossy(),
            )?;
        } else if name.ends_with(".so") {
            files.insert(image_path, (read(&e.path(), debian)?, 0o644));
        }
    }
    add_files_with_libraries(&mut layer, &src.host_root, &src.arch, files)?;
    Ok(Image {
        spec: spec(KUBE_PROXY_REF, &src.arch, &[], String::new()),
        layer,
    })
}

/// The CoreDNS image: [`COREDNS_PATH`] (static, so no library; any it needed would be added)
/// as the entry point, user `nonroot` (65532:65532). CoreDNS writes no file, so the pod can
/// set `readOnlyRootFilesystem`.
pub fn coredns(src: &Sources) -> Result<Image> {
    let mut layer = Layer::new();
    let id = NONROOT_ID;
    base(
        &mut layer,
        &format!(
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{id}:{id}:nonroot:/nonexistent:/sbin/nologin\n"
        ),
        &format!("root:x:0:\nnonroot:x:{id}:\n"),
    )?;
    let files = BTreeMap::from([(
        COREDNS_PATH.to_string(),
        (read(&src.coredns, "run scripts/build-coredns.sh")?, 0o755),
    )]);
    add_files_with_libraries(&mut layer, &src.host_root, &src.arch, files)?;
    Ok(Image {
        spec: spec(
            COREDNS_REF,
            &src.arch,
            &[COREDNS_PATH],
            format!("{id}:{id}"),
        ),
        layer,
    })
}

/// One written add-on image.
#[derive(Debug, Clone)]
pub struct Archive {
    /// The image reference.
    pub reference: String,
    /// The archive on disk.
    pub path: PathBuf,
    /// The manifest digest (what `ctr images ls` shows).
    pub digest: String,
    /// Bytes of the (uncompressed) layer.
    pub layer_size: u64,
}

/// Builds `image` (mtime 0) and writes its archive to `out`.
pub fn write(image: &Image, out: &Path) -> Result<Archive> {
    let built: BuiltImage = image.build(0)?;
    std::fs::write(out, &built.archive).with_context(|| format!("writing {}", out.display()))?;
    Ok(Archive {
        reference: image.spec.reference.clone(),
        path: out.to_path_buf(),
        digest: built.manifest_digest,
        layer_size: built.layer_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_image::images::{host_arch, layer_files};
    use vpcnet_image::layer::Entry;
    use vpcnet_image::layout;

    /// The pinned version of `module` in a go.mod's text.
    fn pinned(gomod: &str, module: &str) -> String {
        gomod
            .lines()
            .map(str::split_whitespace)
            .filter_map(|mut w| {
                let first = w.next()?;
                let (m, v) = if first == "require" {
                    (w.next()?, w.next()?)
                } else {
                    (first, w.next()?)
                };
                (m == module).then(|| v.to_string())
            })
            .next()
            .unwrap_or_else(|| panic!("{module} not pinned"))
    }

    #[test]
    fn tags_are_the_pinned_versions() {
        let k8s = include_str!("../../../../../lab/k8s/go.mod");
        let coredns = include_str!("../../../../../lab/coredns/go.mod");
        assert!(KUBE_PROXY_REF.ends_with(&format!(":{}", pinned(k8s, "k8s.io/kubernetes"))));
        assert!(COREDNS_REF.ends_with(&format!(
            ":{}",
            pinned(coredns, "github.com/coredns/coredns")
        )));
    }

    /// Stand-ins for the Go binaries: copies of this test executable (an ELF file with
    /// libraries to resolve), so the test needs no prior build.
    fn sources() -> Sources {
        let me = std::env::current_exe().unwrap();
        Sources {
            kube_proxy: me.clone(),
            coredns: me,
            host_root: "/".into(),
            arch: host_arch().into(),
        }
    }

    #[test]
    fn kube_proxy_image_carries_iptables_its_extensions_and_their_libraries() {
        let img = kube_proxy(&sources()).unwrap();
        let files = layer_files(&img.layer);
        assert!(files.contains_key(KUBE_PROXY_PATH));
        assert!(files.contains_key(NFT));
        for c in IPTABLES_COMMANDS {
            assert_eq!(
                img.layer.get(&format!("/usr/sbin/{c}")),
                Some(&Entry::Symlink {
                    target: "xtables-nft-multi".into()
                }),
                "{c}"
            );
        }
        let xt = xtables_dir(host_arch());
        // The targets kube-proxy's rules use, as modules or links to them.
        for m in [
            "libxt_comment",
            "libxt_conntrack",
            "libxt_mark",
            "libxt_statistic",
            "libxt_MARK",
            "libxt_DNAT",
            "libxt_MASQUERADE",
            "libxt_addrtype",
        ] {
            assert!(
                img.layer.get(&format!("{xt}/{m}.so")).is_some(),
                "{m} missing from the kube-proxy image"
            );
        }
        // Every ELF file resolves inside the image, extension modules included.
        let sys = elf::system_dirs(host_arch());
        assert_eq!(elf::unresolved(&files, &sys), Vec::<String>::new());
        assert!(
            files.keys().any(|p| p.contains("libxtables.so")),
            "libxtables"
        );
        assert_eq!(img.spec.user, "");
    }

    #[test]
    fn coredns_image_runs_coredns_as_nonroot() {
        let img = coredns(&sources()).unwrap();
        assert_eq!(img.spec.entrypoint, [COREDNS_PATH]);
        assert_eq!(img.spec.user, "65532:65532");
        let built = img.build(0).unwrap();
        let read = layout::read(&built.archive).unwrap();
        let m = &read.index.manifests()[0];
        let names = m.annotations().as_ref().unwrap();
        assert_eq!(names[layout::CONTAINERD_IMAGE_NAME], COREDNS_REF);
    }

    #[test]
    fn two_builds_give_the_same_digests() {
        for f in [kube_proxy, coredns] {
            let a = f(&sources()).unwrap().build(0).unwrap();
            let b = f(&sources()).unwrap().build(0).unwrap();
            assert_eq!(a.manifest_digest, b.manifest_digest);
            assert_eq!(a.archive, b.archive);
        }
    }
}
