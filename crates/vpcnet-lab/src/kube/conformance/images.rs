//! The images Kubernetes' own end-to-end suite (`e2e.test` of k8s.io/kubernetes v1.34.4) runs
//! in its `[sig-network]` tests, built locally under the exact names the suite asks for
//! (`test/utils/image/manifest.go`: `registry.k8s.io/e2e-test-images/...` and
//! `registry.k8s.io/pause`), to be imported into every node's containerd so that no test ever
//! pulls from a registry. Written with `vpcnet-image`'s layer and layout API as the add-ons'
//! images are ([`crate::kube::addons::images`]), reproducibly.
//!
//! Every image but pause and busybox has Debian's static busybox with its applet links for
//! the usual utilities ([`crate::image::add_busybox`]; no link where the image carries the real
//! program), Debian's `dash` as `/bin/sh` ([`SHELL`]), `/etc/nsswitch.conf` (`hosts: files
//! dns`, which glibc's programs read), and every shared library its Debian programs need (their
//! ELF closure):
//!
//! - **agnhost** ([`AGNHOST_REF`]), modelled on `test/images/agnhost/Dockerfile`: `/agnhost`
//!   (the entry point, command `pause`) and `/agnhost-2` linked to it, porter's
//!   `/localhost.crt` and `/localhost.key`, `/uploads` (netexec), users `root` and
//!   `user-defined-in-image` (1000, also in `group-defined-in-image`, 50000), Debian's `bash`,
//!   `curl` (with the CA bundle), netcat-openbsd as `nc`, `dig`/`nslookup`/`host`, `getent`,
//!   and iproute2's `ip` and `ss`; the binary and porter's certificate and key come from
//!   `scripts/build-e2e.sh`'s bin directory.
//! - **pause** ([`PAUSE_REF`]): the lab's own pause ([`crate::image::compile_pause`]), user
//!   65535 as upstream's.
//! - **busybox** ([`BUSYBOX_REF`]): the lab's busybox layer, command `sh`.
//! - **jessie-dnsutils** ([`JESSIE_DNSUTILS_REF`]): what the DNS tests' probe loops run:
//!   `dig`, `nslookup`, `host`, `getent`, the shell and busybox's `seq`, `cat`, `sleep`.
//! - **nginx** ([`NGINX_REF`]): Debian's nginx serving Debian's "Welcome to nginx!" page on
//!   port 80 in the foreground (command `nginx -g "daemon off;"`), logs to the container's
//!   stdout and stderr, workers as user `nginx` (101), as the upstream image.
//! - **regression-issue-74839** ([`REGRESSION_ISSUE_74839_REF`]): its Go binary from the same
//!   module (`test/images/regression-issue-74839`, built by `scripts/build-e2e.sh`) as the
//!   entry point.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};
use vpcnet_image::images::{add_files_with_libraries, archive_name, Image, CA_BUNDLE};
use vpcnet_image::layer::Layer;

use crate::image;
use crate::kube::addons::images::{base, host_path, read, spec, write, Archive};

/// agnhost, the suite's do-everything test image (`imageutils.Agnhost`).
pub const AGNHOST_REF: &str = "registry.k8s.io/e2e-test-images/agnhost:2.56";
/// The pause image (`imageutils.Pause`).
pub const PAUSE_REF: &str = "registry.k8s.io/pause:3.10.1";
/// busybox (`imageutils.BusyBox`).
pub const BUSYBOX_REF: &str = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1";
/// The DNS tests' glibc prober (`imageutils.JessieDnsutils`).
pub const JESSIE_DNSUTILS_REF: &str = "registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7";
/// nginx (`imageutils.Nginx`), e.g. the EndpointSlice conformance test's pods.
pub const NGINX_REF: &str = "registry.k8s.io/e2e-test-images/nginx:1.14-4";
/// The conntrack test's "boom server" (`imageutils.RegressionIssue74839`).
pub const REGRESSION_ISSUE_74839_REF: &str =
    "registry.k8s.io/e2e-test-images/regression-issue-74839:1.2";

/// Every image's reference, in the order [`all`] builds them.
pub const REFERENCES: [&str; 6] = [
    AGNHOST_REF,
    PAUSE_REF,
    BUSYBOX_REF,
    JESSIE_DNSUTILS_REF,
    NGINX_REF,
    REGRESSION_ISSUE_74839_REF,
];

/// The files the images take from `scripts/build-e2e.sh`'s bin directory.
pub const AGNHOST_BIN: &str = "agnhost";
pub const PORTER_CERT: &str = "localhost.crt";
pub const PORTER_KEY: &str = "localhost.key";
pub const REGRESSION_ISSUE_74839_BIN: &str = "regression-issue-74839";

/// Where agnhost's image carries CoreDNS (as upstream's, which unpacks a CoreDNS release there):
/// the DNS tests start name servers with `command: [/coredns]` in agnhost pods.
pub const COREDNS_PATH: &str = "/coredns";
/// Where the agnhost and regression-issue-74839 binaries sit in their images: the entry points.
pub const AGNHOST_PATH: &str = "/agnhost";
pub const REGRESSION_ISSUE_74839_PATH: &str = "/regression-issue-74839";

/// nginx's configuration in its image (see [`NGINX_CONF`]).
pub const NGINX_CONF_PATH: &str = "/etc/nginx/nginx.conf";
/// The page nginx serves: Debian's (nginx-common), the "Welcome to nginx!" page.
pub const NGINX_INDEX: &str = "/usr/share/nginx/html/index.html";
/// Debian's MIME types for nginx (nginx-common).
pub const NGINX_MIME_TYPES: &str = "/etc/nginx/mime.types";
/// The nginx image's command, as the upstream image's: the master in the foreground.
pub const NGINX_CMD: [&str; 3] = ["nginx", "-g", "daemon off;"];
/// The nginx image's user for its workers, as upstream's (`nginx`, 101:101).
pub const NGINX_ID: u32 = 101;

/// The upstream pause image's user (`USER 65535:65535`).
pub const PAUSE_USER: &str = "65535:65535";

/// The user and group agnhost's image defines for the supplemental-groups tests.
pub const IMAGE_USER: (&str, u32) = ("user-defined-in-image", 1000);
pub const IMAGE_GROUP: (&str, u32) = ("group-defined-in-image", 50000);

/// nginx's configuration: the upstream image's (`nginx.conf` with `conf.d/default.conf`) in
/// one file, without `daemon off;` (the command sets it) and with Debian's paths.
pub const NGINX_CONF: &str = "\
user  nginx;
worker_processes  1;

error_log  /var/log/nginx/error.log warn;
pid        /run/nginx.pid;

events {
    worker_connections  1024;
}

http {
    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format  main  '$remote_addr - $remote_user [$time_local] \"$request\" '
                      '$status $body_bytes_sent \"$http_referer\" '
                      '\"$http_user_agent\" \"$http_x_forwarded_for\"';
    access_log  /var/log/nginx/access.log  main;

    sendfile        on;
    keepalive_timeout  65;

    server {
        listen       80;
        server_name  localhost;

        location / {
            root   /usr/share/nginx/html;
            index  index.html index.htm;
        }
    }
}
";

/// What glibc's programs read to look up users, groups and hosts: the files, then DNS.
pub const NSSWITCH_CONF: &str = "\
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
";

/// A program from a Debian package, at the same path on the build machine and in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    pub path: &'static str,
    /// The Debian package that ships it (named when it is missing).
    pub package: &'static str,
}

const fn program(path: &'static str, package: &'static str) -> Program {
    Program { path, package }
}

/// The DNS tools of agnhost and jessie-dnsutils: the probes run `dig` and `getent hosts`.
pub const DNS_TOOLS: [Program; 4] = [
    program("/usr/bin/dig", "bind9-dnsutils"),
    program("/usr/bin/nslookup", "bind9-dnsutils"),
    program("/usr/bin/host", "bind9-host"),
    program("/usr/bin/getent", "libc-bin"),
];

/// The other programs agnhost's image carries (Alpine's in upstream's image). `wget` is GNU
/// wget: the Services tests run `wget -q -O - -T 1 http://...`, and Debian's static busybox
/// crashes on `wget -T` (SIGSEGV, on the host too), where Alpine's busybox does not.
pub const AGNHOST_TOOLS: [Program; 6] = [
    program("/bin/bash", "bash"),
    program("/usr/bin/curl", "curl"),
    program("/usr/bin/wget", "wget"),
    program("/bin/nc.openbsd", "netcat-openbsd"),
    program("/bin/ip", "iproute2"),
    program("/bin/ss", "iproute2"),
];

/// Links of the agnhost image to its programs (path → target), as Debian's packages make them.
pub const AGNHOST_LINKS: [(&str, &str); 2] = [("/bin/nc", "nc.openbsd"), ("/sbin/ip", "/bin/ip")];

/// Debian's nginx.
pub const NGINX: Program = program("/usr/sbin/nginx", "nginx");

/// The shell of the images with Debian programs, linked as `/bin/sh`: Debian's `dash`, not
/// busybox's `sh`. Debian's static busybox is built to prefer its own applets
/// (`FEATURE_SH_STANDALONE`, `FEATURE_PREFER_APPLETS`): its shell would run busybox's `nc`,
/// `ip` and `nslookup` for those names whatever `PATH` finds, and the tests need the real ones
/// (`nc -z`, `nc -u`). dash, an ash like Alpine's shell, looks commands up in `PATH`.
pub const SHELL: Program = program("/bin/dash", "dash");

const BUILD_E2E: &str = "run scripts/build-e2e.sh (it builds agnhost and regression-issue-74839 and copies porter's certificate)";
const ROOT_PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n";
const ROOT_GROUP: &str = "root:x:0:\n";

/// Where the images' files come from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// `scripts/build-e2e.sh`'s bin directory: [`AGNHOST_BIN`], [`PORTER_CERT`],
    /// [`PORTER_KEY`], [`REGRESSION_ISSUE_74839_BIN`].
    pub e2e_bins: PathBuf,
    /// The CoreDNS binary agnhost's image carries at [`COREDNS_PATH`] (`scripts/build-coredns.sh`'s
    /// build: the DNS tests run their own name servers from the agnhost image with it).
    pub coredns: PathBuf,
    /// Root of the build machine's file system the rest comes from (`/`).
    pub host_root: PathBuf,
    /// OCI architecture (`amd64`, `arm64`).
    pub arch: String,
}

impl Sources {
    /// The sources on this machine: `e2e_bins`, the CoreDNS binary `coredns`, `/` and its
    /// architecture.
    pub fn host(e2e_bins: &Path, coredns: &Path) -> Self {
        Sources {
            e2e_bins: e2e_bins.to_path_buf(),
            coredns: coredns.to_path_buf(),
            host_root: "/".into(),
            arch: image::oci_arch().into(),
        }
    }

    fn e2e_bin(&self, name: &str) -> Result<Vec<u8>> {
        read(&self.e2e_bins.join(name), BUILD_E2E)
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A layer with the base directories, `passwd` and `group`, [`NSSWITCH_CONF`], [`SHELL`] as
/// `/bin/sh`, busybox and its applets (but none named like the shell or one of `programs` or
/// `links`), `programs` from the build machine, `links`, `files` (absolute path → contents,
/// mode), and every library they need.
fn layer_with_busybox(
    src: &Sources,
    (passwd, group): (&str, &str),
    programs: &[Program],
    links: &[(&str, &str)],
    mut files: BTreeMap<String, (Vec<u8>, u32)>,
) -> Result<Layer> {
    let mut layer = Layer::new();
    base(&mut layer, passwd, group)?;
    layer.file(
        "etc/nsswitch.conf",
        NSSWITCH_CONF.as_bytes().to_vec(),
        0o644,
    )?;
    let programs: Vec<Program> = programs.iter().copied().chain([SHELL]).collect();
    let links: Vec<(&str, &str)> = links.iter().copied().chain([("/bin/sh", "dash")]).collect();
    let own: Vec<&str> = programs
        .iter()
        .map(|p| file_name(p.path))
        .chain(links.iter().map(|(l, _)| file_name(l)))
        .collect();
    let (busybox, applets) = image::host_busybox(&host_path(&src.host_root, image::BUSYBOX))?;
    image::add_busybox(&mut layer, &busybox, &applets, &own)?;
    for p in &programs {
        let fix = format!("install Debian's {} (scripts/install-deps.sh)", p.package);
        let data = read(&host_path(&src.host_root, p.path), &fix)?;
        files.insert(p.path.to_string(), (data, 0o755));
    }
    for (link, target) in &links {
        layer.symlink(link.trim_start_matches('/'), target)?;
    }
    add_files_with_libraries(&mut layer, &src.host_root, &src.arch, files)?;
    Ok(layer)
}

/// The agnhost image (see the module documentation).
pub fn agnhost(src: &Sources) -> Result<Image> {
    let (user, uid) = IMAGE_USER;
    let (group, gid) = IMAGE_GROUP;
    let passwd = format!("{ROOT_PASSWD}{user}:x:{uid}:{uid}:Linux User,,,:/home/{user}:/bin/sh\n");
    let groups = format!("{ROOT_GROUP}{user}:x:{uid}:\n{group}:x:{gid}:{user}\n");
    let ca = read(
        &host_path(&src.host_root, CA_BUNDLE),
        "install Debian's ca-certificates (scripts/install-deps.sh)",
    )?;
    let files = BTreeMap::from([
        (AGNHOST_PATH.to_string(), (src.e2e_bin(AGNHOST_BIN)?, 0o755)),
        (
            format!("/{PORTER_CERT}"),
            (src.e2e_bin(PORTER_CERT)?, 0o644),
        ),
        (format!("/{PORTER_KEY}"), (src.e2e_bin(PORTER_KEY)?, 0o644)),
        (CA_BUNDLE.to_string(), (ca, 0o644)),
        (
            COREDNS_PATH.to_string(),
            (read(&src.coredns, "run scripts/build-coredns.sh")?, 0o755),
        ),
    ]);
    let programs: Vec<Program> = AGNHOST_TOOLS.iter().chain(&DNS_TOOLS).copied().collect();
    let mut layer = layer_with_busybox(src, (&passwd, &groups), &programs, &AGNHOST_LINKS, files)?;
    layer.symlink("agnhost-2", "agnhost")?;
    layer.dir("uploads", 0o755)?;
    let mut spec = spec(AGNHOST_REF, &src.arch, &[AGNHOST_PATH], String::new());
    spec.cmd = vec!["pause".into()];
    Ok(Image { spec, layer })
}

/// The pause image: the lab's pause process at `/pause`, the entry point (compiled in a
/// scratch directory of the system's temporary directory, removed afterwards).
pub fn pause(src: &Sources) -> Result<Image> {
    static SCRATCH: AtomicU32 = AtomicU32::new(0);
    let n = SCRATCH.fetch_add(1, Ordering::Relaxed);
    let work = std::env::temp_dir().join(format!("vpcnet-pause-{}-{n}", std::process::id()));
    let bin = image::compile_pause(&work);
    let _ = std::fs::remove_dir_all(&work);
    let layer = image::pause_layer(bin?)?;
    Ok(Image {
        spec: spec(PAUSE_REF, &src.arch, &["/pause"], PAUSE_USER.into()),
        layer,
    })
}

/// The busybox image: the lab's busybox layer, command `sh`.
pub fn busybox(src: &Sources) -> Result<Image> {
    let (bb, applets) = image::host_busybox(&host_path(&src.host_root, image::BUSYBOX))?;
    let mut spec = spec(BUSYBOX_REF, &src.arch, &[], String::new());
    spec.cmd = vec!["sh".into()];
    Ok(Image {
        spec,
        layer: image::busybox_layer(&bb, &applets)?,
    })
}

/// The jessie-dnsutils image: busybox and [`DNS_TOOLS`], command `sh`.
pub fn jessie_dnsutils(src: &Sources) -> Result<Image> {
    let layer = layer_with_busybox(
        src,
        (ROOT_PASSWD, ROOT_GROUP),
        &DNS_TOOLS,
        &[],
        BTreeMap::new(),
    )?;
    let mut spec = spec(JESSIE_DNSUTILS_REF, &src.arch, &[], String::new());
    spec.cmd = vec!["sh".into()];
    Ok(Image { spec, layer })
}

/// The nginx image: Debian's nginx with [`NGINX_CONF`], command [`NGINX_CMD`].
pub fn nginx(src: &Sources) -> Result<Image> {
    let id = NGINX_ID;
    let passwd = format!("{ROOT_PASSWD}nginx:x:{id}:{id}:nginx:/nonexistent:/bin/false\n");
    let group = format!("{ROOT_GROUP}nginx:x:{id}:\n");
    let debian = |p: &str| {
        read(
            &host_path(&src.host_root, p),
            "install Debian's nginx (scripts/install-deps.sh)",
        )
    };
    let files = BTreeMap::from([
        (
            NGINX_CONF_PATH.to_string(),
            (NGINX_CONF.as_bytes().to_vec(), 0o644),
        ),
        (
            NGINX_MIME_TYPES.to_string(),
            (debian(NGINX_MIME_TYPES)?, 0o644),
        ),
        (NGINX_INDEX.to_string(), (debian(NGINX_INDEX)?, 0o644)),
    ]);
    let links = [
        ("/var/log/nginx/access.log", "/dev/stdout"),
        ("/var/log/nginx/error.log", "/dev/stderr"),
    ];
    let mut layer = layer_with_busybox(src, (&passwd, &group), &[NGINX], &links, files)?;
    // Debian's nginx keeps request bodies and proxied responses under it (compiled in).
    layer.dir("var/lib/nginx", 0o755)?;
    let mut spec = spec(NGINX_REF, &src.arch, &[], String::new());
    spec.cmd = NGINX_CMD.iter().map(|s| s.to_string()).collect();
    Ok(Image { spec, layer })
}

/// The regression-issue-74839 image: its binary as the entry point, busybox beside it.
pub fn regression_issue_74839(src: &Sources) -> Result<Image> {
    let files = BTreeMap::from([(
        REGRESSION_ISSUE_74839_PATH.to_string(),
        (src.e2e_bin(REGRESSION_ISSUE_74839_BIN)?, 0o755),
    )]);
    let layer = layer_with_busybox(src, (ROOT_PASSWD, ROOT_GROUP), &[], &[], files)?;
    Ok(Image {
        spec: spec(
            REGRESSION_ISSUE_74839_REF,
            &src.arch,
            &[REGRESSION_ISSUE_74839_PATH],
            String::new(),
        ),
        layer,
    })
}

type Build = fn(&Sources) -> Result<Image>;

/// The images' builders, in the order of [`REFERENCES`].
const BUILDS: [Build; 6] = [
    agnhost,
    pause,
    busybox,
    jessie_dnsutils,
    nginx,
    regression_issue_74839,
];

/// Every image, in the order of [`REFERENCES`].
pub fn all(src: &Sources) -> Result<Vec<Image>> {
    BUILDS.iter().map(|b| b(src)).collect()
}

/// Builds every image and writes its archive into `dir` (created if missing; file name
/// [`archive_name`]: `agnhost.oci.tar`, ...), one image in memory at a time. Returns what was
/// written, in the order of [`REFERENCES`].
pub fn write_all(src: &Sources, dir: &Path) -> Result<Vec<Archive>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    BUILDS
        .iter()
        .map(|b| {
            let image = b(src)?;
            write(&image, &dir.join(archive_name(&image.spec.reference)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::net::{TcpListener, UdpSocket};
    use std::process::Command;
    use vpcnet_image::elf;
    use vpcnet_image::images::{host_arch, layer_files};
    use vpcnet_image::layer::Entry;

    /// The directory of the k8s.io/kubernetes module lab/e2e pins, in the Go module cache.
    fn kubernetes_module() -> PathBuf {
        let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/e2e");
        let fix = "run scripts/build-e2e.sh, which downloads the module";
        let out = Command::new("go")
            .args(["list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"])
            .current_dir(&e2e)
            .env("GOPROXY", "off")
            .output()
            .unwrap_or_else(|e| panic!("running go list in {}: {e}: {fix}", e2e.display()));
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && !dir.is_empty(),
            "k8s.io/kubernetes is not in the Go module cache ({}): {fix}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        PathBuf::from(dir)
    }

    /// The image references of `manifest.go` (test/utils/image) by image ID, from its
    /// registries (`initRegistry`) and `configs[ID] = Config{list.Registry, "name", "tag"}`.
    fn suite_references(manifest: &str) -> HashMap<String, String> {
        let unquote = |s: &str| s.trim().trim_end_matches(',').trim_matches('"').to_string();
        // `PromoterE2eRegistry:     "registry.k8s.io/e2e-test-images",`
        let registries: HashMap<String, String> = manifest
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .filter(|(k, v)| k.ends_with("Registry") && v.trim().starts_with('"'))
            .map(|(k, v)| (k.to_string(), unquote(v)))
            .collect();
        // `configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.56"}`
        manifest
            .lines()
            .filter_map(|l| {
                let rest = l.trim().strip_prefix("configs[")?;
                let (id, rest) = rest.split_once("] = Config{list.")?;
                let fields: Vec<String> = rest.strip_suffix('}')?.split(',').map(unquote).collect();
                let [registry, name, tag] = &fields[..] else {
                    return None;
                };
                let registry = registries.get(registry)?;
                Some((id.to_string(), format!("{registry}/{name}:{tag}")))
            })
            .collect()
    }

    #[test]
    fn references_are_the_pinned_suites() {
        let manifest = kubernetes_module().join("test/utils/image/manifest.go");
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("reading {}: {e}", manifest.display()));
        let suite = suite_references(&text);
        for (id, reference) in [
            ("Agnhost", AGNHOST_REF),
            ("Pause", PAUSE_REF),
            ("BusyBox", BUSYBOX_REF),
            ("JessieDnsutils", JESSIE_DNSUTILS_REF),
            ("Nginx", NGINX_REF),
            ("RegressionIssue74839", REGRESSION_ISSUE_74839_REF),
        ] {
            assert_eq!(suite.get(id).map(String::as_str), Some(reference), "{id}");
        }
    }

    /// Stand-ins for the e2e build's files: the static busybox as the Go binaries (a static
    /// ELF file that runs), text as porter's certificate and key; so no Go build is needed.
    struct Stand {
        dir: tempfile::TempDir,
        src: Sources,
    }

    fn sources() -> Stand {
        let dir = tempfile::tempdir().unwrap();
        let bins = dir.path().join("bin");
        std::fs::create_dir(&bins).unwrap();
        for b in [AGNHOST_BIN, REGRESSION_ISSUE_74839_BIN] {
            std::fs::copy(image::BUSYBOX, bins.join(b)).unwrap();
        }
        std::fs::write(bins.join(PORTER_CERT), "certificate").unwrap();
        std::fs::write(bins.join(PORTER_KEY), "key").unwrap();
        let coredns = dir.path().join("coredns");
        std::fs::copy(image::BUSYBOX, &coredns).unwrap();
        let src = Sources::host(&bins, &coredns);
        Stand { dir, src }
    }

    fn link(img: &Image, path: &str) -> Option<String> {
        match img.layer.get(path)? {
            Entry::Symlink { target } => Some(target.clone()),
            _ => None,
        }
    }

    fn text(img: &Image, path: &str) -> String {
        String::from_utf8(layer_files(&img.layer)[path].clone()).unwrap()
    }

    /// Every ELF file of the image finds its loader and libraries inside it.
    fn self_contained(img: &Image) {
        let files = layer_files(&img.layer);
        let sys = elf::system_dirs(host_arch());
        assert_eq!(elf::unresolved(&files, &sys), Vec::<String>::new());
    }

    #[test]
    fn agnhost_image_has_the_tools_their_libraries_and_upstreams_layout() {
        let s = sources();
        let img = agnhost(&s.src).unwrap();
        assert_eq!(img.spec.reference, AGNHOST_REF);
        assert_eq!(img.spec.entrypoint, [AGNHOST_PATH]);
        assert_eq!(img.spec.cmd, ["pause"]);
        assert_eq!(img.spec.user, "");
        let files = layer_files(&img.layer);
        for p in AGNHOST_TOOLS.iter().chain(&DNS_TOOLS) {
            assert!(files.contains_key(p.path), "{} missing", p.path);
        }
        for f in [
            AGNHOST_PATH,
            "/localhost.crt",
            "/localhost.key",
            COREDNS_PATH,
            CA_BUNDLE,
            "/bin/busybox",
        ] {
            assert!(files.contains_key(f), "{f} missing");
        }
        assert_eq!(link(&img, "/agnhost-2").as_deref(), Some("agnhost"));
        assert_eq!(link(&img, "/bin/nc").as_deref(), Some("nc.openbsd"));
        assert_eq!(link(&img, "/bin/sh").as_deref(), Some("dash"));
        assert_eq!(link(&img, "/bin/seq").as_deref(), Some("busybox"));
        // Busybox's own nc, ip and nslookup give way to the real ones.
        assert_eq!(link(&img, "/bin/ip"), None);
        assert!(img.layer.get("/bin/nslookup").is_none());
        assert_eq!(img.layer.get("/uploads"), Some(&Entry::Dir { mode: 0o755 }));
        assert_eq!(img.layer.get("/tmp"), Some(&Entry::Dir { mode: 0o1777 }));
        assert!(files.keys().any(|p| p.contains("libcurl.so")), "libcurl");
        assert!(files.keys().any(|p| p.contains("libdns-")), "bind's libdns");
        self_contained(&img);
        assert!(text(&img, "/etc/passwd").contains("user-defined-in-image:x:1000:1000:"));
        assert!(text(&img, "/etc/group")
            .contains("group-defined-in-image:x:50000:user-defined-in-image\n"));
        assert!(text(&img, "/etc/nsswitch.conf").contains("hosts:          files dns"));
        drop(s.dir);
    }

    #[test]
    fn the_other_images_have_what_the_suite_runs() {
        let s = sources();
        let jessie = jessie_dnsutils(&s.src).unwrap();
        for p in DNS_TOOLS {
            assert!(
                layer_files(&jessie.layer).contains_key(p.path),
                "{}",
                p.path
            );
        }
        self_contained(&jessie);

        let nginx = nginx(&s.src).unwrap();
        assert_eq!(nginx.spec.cmd, NGINX_CMD);
        assert!(nginx.spec.entrypoint.is_empty());
        assert_eq!(text(&nginx, NGINX_CONF_PATH), NGINX_CONF);
        assert!(text(&nginx, NGINX_INDEX).contains("Welcome to nginx!"));
        assert!(text(&nginx, "/etc/passwd").contains("nginx:x:101:101:"));
        assert_eq!(
            link(&nginx, "/var/log/nginx/error.log").as_deref(),
            Some("/dev/stderr")
        );
        self_contained(&nginx);

        let pause = pause(&s.src).unwrap();
        assert_eq!(pause.spec.entrypoint, ["/pause"]);
        assert_eq!(pause.spec.user, PAUSE_USER);
        assert_eq!(layer_files(&pause.layer).len(), 1);

        let bb = busybox(&s.src).unwrap();
        assert_eq!(bb.spec.cmd, ["sh"]);
        assert_eq!(link(&bb, "/bin/sh").as_deref(), Some("busybox"));

        let r = regression_issue_74839(&s.src).unwrap();
        assert_eq!(r.spec.entrypoint, [REGRESSION_ISSUE_74839_PATH]);
        assert!(layer_files(&r.layer).contains_key(REGRESSION_ISSUE_74839_PATH));
    }

    #[test]
    fn write_all_writes_one_archive_per_reference() {
        let s = sources();
        let out = s.dir.path().join("out");
        let written = write_all(&s.src, &out).unwrap();
        let refs: Vec<&str> = written.iter().map(|a| a.reference.as_str()).collect();
        assert_eq!(refs, REFERENCES);
        for a in &written {
            assert_eq!(a.path, out.join(archive_name(&a.reference)));
            // The index names the image as containerd imports it (the blobs' digests are
            // vpcnet-image's to check).
            let archive = std::fs::read(&a.path).unwrap();
            let mut tar = tar::Archive::new(&archive[..]);
            let mut index = tar
                .entries()
                .unwrap()
                .map(Result::unwrap)
                .find(|e| e.path().unwrap().to_str() == Some("index.json"))
                .expect("index.json");
            let mut json = String::new();
            index.read_to_string(&mut json).unwrap();
            let index: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(
                index["manifests"][0]["annotations"][vpcnet_image::layout::CONTAINERD_IMAGE_NAME],
                a.reference.as_str()
            );
        }
    }

    /// Answers DNS queries over UDP on 127.0.0.1 (the returned port) until the test process
    /// ends: a question for an A record with `addr`, any other with no record.
    fn dns_responder(addr: [u8; 4]) -> u16 {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = sock.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while let Ok((n, peer)) = sock.recv_from(&mut buf) {
                if let Some(reply) = dns_reply(&buf[..n], addr) {
                    let _ = sock.send_to(&reply, peer);
                }
            }
        });
        port
    }

    fn dns_reply(q: &[u8], addr: [u8; 4]) -> Option<Vec<u8>> {
        let mut i = 12;
        while *q.get(i)? != 0 {
            i += 1 + q[i] as usize;
        }
        let end = i + 5; // the root label, type and class
        let qtype = u16::from_be_bytes([*q.get(i + 1)?, *q.get(i + 2)?]);
        let a = qtype == 1;
        let mut r = q.get(..2)?.to_vec();
        // Response, recursion desired and available, no error; one question, 0 or 1 answer.
        r.extend_from_slice(&[0x81, 0x80, 0, 1, 0, a as u8, 0, 0, 0, 0]);
        r.extend_from_slice(q.get(12..end)?);
        if a {
            // The question's name (pointer to offset 12), A, IN, TTL 60, 4 bytes.
            r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
            r.extend_from_slice(&addr);
        }
        Some(r)
    }

    /// Answers every TCP connection on 127.0.0.1 (the returned port) with an HTTP response
    /// whose body is `body`, until the test process ends.
    fn http_server(body: &'static str) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let mut buf = [0u8; 2048];
                let _ = c.read(&mut buf);
                let _ = write!(
                    c,
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        port
    }

    const DONE: &str = "vpcnet-script-done";

    /// Runs `script` with the image's `/bin/sh` in `img`'s root filesystem, as a container
    /// would: its layer extracted into a temporary directory, `chroot` there in a new mount
    /// namespace with `/proc` and a `/dev` of its own, in a PID namespace (and with `own_net` a
    /// network namespace of its own, `lo` up), kubelet's `/etc/hosts` and `/etc/resolv.conf` written in. Panics
    /// with the output unless every line of the script succeeds (`set -e`). Root only.
    fn run_in(img: &Image, script: &str, own_net: bool) {
        vpcnet_cni_harness::netns::require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        tar::Archive::new(&img.layer.to_tar(0).unwrap()[..])
            .unpack(&root)
            .unwrap();
        std::fs::write(
            root.join("etc/hosts"),
            "127.0.0.1 localhost\n192.0.2.8 test-host\n",
        )
        .unwrap();
        std::fs::write(root.join("etc/resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
        // Every line must succeed (`set -e`), and the last one proves the script ran to its end.
        let script = format!("set -ex\n{script}\necho {DONE}\n");
        std::fs::write(root.join("test.sh"), &script).unwrap();
        let setup = r#"set -e; r=$1
if [ "$2" = own-net ]; then ip link set lo up; fi
mount -t proc proc "$r/proc"
mount -t tmpfs -o mode=755 tmpfs "$r/dev"
for d in null:3 zero:5 random:8 urandom:9; do mknod -m 666 "$r/dev/${d%:*}" c 1 "${d#*:}"; done
ln -s /proc/self/fd "$r/dev/fd"
for f in stdin:0 stdout:1 stderr:2; do ln -s "/proc/self/fd/${f#*:}" "$r/dev/${f%:*}"; done
exec chroot "$r" /bin/sh /test.sh"#;
        let mut cmd = Command::new("unshare");
        // The script's shell is PID 1 of a PID namespace: what it leaves running dies with it.
        cmd.args(["--mount", "--pid", "--fork"]);
        if own_net {
            cmd.arg("--net");
        }
        let out = cmd
            .args(["--", "/bin/sh", "-c", setup, "sh"])
            .arg(&root)
            .arg(if own_net { "own-net" } else { "host-net" })
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .output()
            .unwrap();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(&*root.to_string_lossy()),
            "a mount under {} outlived its namespace: not removing it",
            root.display()
        );
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && log.lines().any(|l| l == DONE),
            "{script}\nfailed:\n{log}"
        );
    }

    /// Lines asking `dig`, `nslookup` and `host` the responder on `port` for an A record, each
    /// checking the answer is `addr`.
    fn dns_lookups(port: u16, addr: &str) -> String {
        format!(
            "dig @127.0.0.1 -p {port} +time=2 +tries=1 +short svc.example. | grep -x {addr}
nslookup -port={port} -timeout=2 svc.example. 127.0.0.1 | grep {addr}
host -p {port} -W 2 -t A svc.example. 127.0.0.1 | grep 'has address {addr}'
"
        )
    }

    #[test]
    fn agnhost_tools_run_in_its_root() {
        let s = sources();
        let img = agnhost(&s.src).unwrap();
        let dns = dns_responder([192, 0, 2, 7]);
        let http = http_server("hello from the test");
        let lookups = dns_lookups(dns, "192.0.2.7");
        run_in(
            &img,
            &format!(
                r#"test "$(command -v nc)" = /bin/nc && test "$(command -v nslookup)" = /usr/bin/nslookup
bash -c 'echo "bash $BASH_VERSION"'
nc -h 2>&1 | grep 'OpenBSD netcat'
curl --version | grep OpenSSL
curl -sS --max-time 5 http://127.0.0.1:{http}/ | grep 'hello from the test'
printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 127.0.0.1 {http} | grep 'hello from the test'
nc -z -w 2 127.0.0.1 {http}
ss -ltn | grep '127.0.0.1:{http}'
ip -V | grep iproute2
ip -o link show lo
{lookups}getent hosts test-host | grep 192.0.2.8
getent group group-defined-in-image | grep user-defined-in-image
id user-defined-in-image | grep '50000(group-defined-in-image)'
test "$(command -v wget)" = /usr/bin/wget
wget -q -O - -T 1 http://127.0.0.1:{http}/ | grep 'hello from the test'
timeout 5 sleep 0
test -x /agnhost && test -L /agnhost-2 && test -d /uploads && test -f /localhost.crt
"#
            ),
            false,
        );
    }

    #[test]
    fn jessie_dnsutils_runs_the_dns_probe_loop() {
        let s = sources();
        let img = jessie_dnsutils(&s.src).unwrap();
        let dns = dns_responder([192, 0, 2, 9]);
        let lookups = dns_lookups(dns, "192.0.2.9");
        // The shape of the probes dns_common.go writes (createProbeCommand), against the
        // responder's port.
        run_in(
            &img,
            &format!(
                r#"mkdir /results
for i in `seq 1 2`; do check="$(dig +notcp +noall +answer +search @127.0.0.1 -p {dns} svc.example.)" && test -n "$check" && echo OK > /results/udp; test -n "$(getent hosts test-host)" && echo OK > /results/hosts; sleep 0; done
test "$(cat /results/udp)" = OK && test "$(cat /results/hosts)" = OK
{lookups}"#
            ),
            false,
        );
    }

    #[test]
    fn nginx_serves_the_welcome_page_on_port_80() {
        let s = sources();
        let img = nginx(&s.src).unwrap();
        // In a network namespace of its own: port 80 of the test machine is left alone.
        let script = r#"nginx -g 'daemon off;' &
for i in `seq 1 50`; do wget -q -O /tmp/index http://127.0.0.1/ && break; sleep 0.1; done
grep 'Welcome to nginx!' /tmp/index
kill $!
wait $! || true
"#;
        run_in(&img, script, true);
    }

    #[test]
    fn pause_busybox_and_regression_images_run() {
        let s = sources();
        let bb = busybox(&s.src).unwrap();
        run_in(&bb, "echo busybox runs", false);
        let r = regression_issue_74839(&s.src).unwrap();
        run_in(&r, &format!("test -x {REGRESSION_ISSUE_74839_PATH}"), false);
        // pause, static, stops on SIGTERM with status 0 (no shell in its image).
        vpcnet_cni_harness::netns::require_root();
        let p = pause(&s.src).unwrap();
        let dir = tempfile::tempdir().unwrap();
        tar::Archive::new(&p.layer.to_tar(0).unwrap()[..])
            .unpack(dir.path())
            .unwrap();
        let mut child = Command::new("chroot")
            .arg(dir.path())
            .arg("/pause")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        assert!(child.wait().unwrap().success());
    }

    /// The same sources give the same image (vpcnet-image writes the same image as the same
    /// bytes).
    #[test]
    fn two_builds_give_the_same_images() {
        let s = sources();
        for f in BUILDS {
            let (a, b) = (f(&s.src).unwrap(), f(&s.src).unwrap());
            assert_eq!(a.spec, b.spec);
            assert!(a.layer == b.layer, "{}", a.spec.reference);
        }
    }
}
