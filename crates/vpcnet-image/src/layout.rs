//! An image as an OCI image layout in one tar archive (`oci-layout`, `index.json`,
//! `blobs/sha256/<digest>`): the configuration, manifest and index built with `oci-spec`'s
//! types, each blob named by its SHA-256. The index names the image for containerd
//! (`io.containerd.image.name`, which `ctr images import` uses as the image's name) and the OCI
//! way (`org.opencontainers.image.ref.name`, the tag).

use std::collections::HashMap;
use std::io::Read;

use oci_spec::image::{
    Arch, Config, ConfigBuilder, Descriptor, DescriptorBuilder, Digest, ImageConfiguration,
    ImageConfigurationBuilder, ImageIndex, ImageIndexBuilder, ImageManifest, ImageManifestBuilder,
    MediaType, OciLayoutBuilder, Os, PlatformBuilder, RootFsBuilder,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// containerd's annotation naming the image on import.
pub const CONTAINERD_IMAGE_NAME: &str = "io.containerd.image.name";
/// The OCI annotation naming the reference (the tag) in an index.
pub const OCI_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Errors of writing or reading a layout.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("OCI document: {0}")]
    Spec(#[from] oci_spec::OciSpecError),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("archive: {0}")]
    Io(#[from] std::io::Error),
    #[error("image reference {0:?} has no tag (expected <name>:<tag>)")]
    NoTag(String),
    #[error("the archive is not a valid image layout: {0}")]
    Invalid(String),
}

/// What an image runs and how it is named: the parts of its configuration vpcnet sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// Full reference, `<repository>:<tag>`.
    pub reference: String,
    /// OCI architecture name (`amd64`, `arm64`).
    pub arch: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    /// `uid:gid` (numeric) or empty for root.
    pub user: String,
    pub working_dir: String,
    pub labels: Vec<(String, String)>,
}

/// A written image: the archive and the digests that name its parts.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub archive: Vec<u8>,
    /// `sha256:...` of the manifest: the image's digest (what `ctr images ls` shows).
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
    /// Bytes of the uncompressed layer tar.
    pub layer_size: u64,
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// JSON with every object's keys sorted, whatever map type produced it (oci-spec keeps
/// annotations and labels in `HashMap`s, whose order changes from run to run).
pub fn canonical_json<T: serde::Serialize>(doc: &T) -> Result<Vec<u8>, LayoutError> {
    fn sort(v: Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut pairs: Vec<(String, Value)> = m.into_iter().collect();
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(pairs.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            Value::Array(a) => Value::Array(a.into_iter().map(sort).collect()),
            v => v,
        }
    }
    Ok(serde_json::to_vec(&sort(serde_json::to_value(doc)?))?)
}

fn descriptor(media: MediaType, data: &[u8]) -> Result<Descriptor, LayoutError> {
    Ok(DescriptorBuilder::default()
        .media_type(media)
        .digest(sha256(data).parse::<Digest>()?)
        .size(data.len() as u64)
        .build()?)
}

/// The image configuration: no `created` time and no history, so it depends on the layer
/// and the spec only.
pub fn image_config(
    spec: &ImageSpec,
    layer_digest: &str,
) -> Result<ImageConfiguration, LayoutError> {
    let mut c = ConfigBuilder::default()
        .env(spec.env.clone())
        .working_dir(spec.working_dir.clone());
    if !spec.entrypoint.is_empty() {
        c = c.entrypoint(spec.entrypoint.clone());
    }
    if !spec.cmd.is_empty() {
        c = c.cmd(spec.cmd.clone());
    }
    if !spec.user.is_empty() {
        c = c.user(spec.user.clone());
    }
    if !spec.labels.is_empty() {
        c = c.labels(spec.labels.iter().cloned().collect::<HashMap<_, _>>());
    }
    let config: Config = c.build()?;
    Ok(ImageConfigurationBuilder::default()
        .architecture(Arch::from(spec.arch.as_str()))
        .os(Os::Linux)
        .config(config)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![layer_digest.to_string()])
                .build()?,
        )
        .build()?)
}

/// Writes the image layout archive of one uncompressed `layer` tar. `mtime` is every archive
/// entry's modification time.
pub fn write(spec: &ImageSpec, layer: &[u8], mtime: u64) -> Result<BuiltImage, LayoutError> {
    let tag = spec
        .reference
        .rsplit_once(':')
        .filter(|(name, tag)| !tag.contains('/') && !name.is_empty())
        .map(|(_, tag)| tag.to_string())
        .ok_or_else(|| LayoutError::NoTag(spec.reference.clone()))?;
    let layer_digest = sha256(layer);
    let config = canonical_json(&image_config(spec, &layer_digest)?)?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(MediaType::ImageConfig, &config)?)
        .layers(vec![descriptor(MediaType::ImageLayer, layer)?])
        .build()?;
    let manifest = canonical_json(&manifest)?;
    let mut mdesc = descriptor(MediaType::ImageManifest, &manifest)?;
    mdesc.set_platform(Some(
        PlatformBuilder::default()
            .architecture(Arch::from(spec.arch.as_str()))
            .os(Os::Linux)
            .build()?,
    ));
    mdesc.set_annotations(Some(HashMap::from([
        (CONTAINERD_IMAGE_NAME.to_string(), spec.reference.clone()),
        (OCI_REF_NAME.to_string(), tag),
    ])));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![mdesc])
        .build()?;
    let index = canonical_json(&index)?;
    let oci_layout = canonical_json(
        &OciLayoutBuilder::default()
            .image_layout_version("1.0.0")
            .build()?,
    )?;

    let config_digest = sha256(&config);
    let manifest_digest = sha256(&manifest);
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let mut files: Vec<(String, &[u8])> = vec![
        ("oci-layout".into(), &oci_layout),
        ("index.json".into(), &index),
        (blob(&layer_digest), layer),
        (blob(&config_digest), &config),
        (blob(&manifest_digest), &manifest),
    ];
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut b = tar::Builder::new(Vec::new());
    for d in ["blobs/", "blobs/sha256/"] {
        let mut h = header(mtime, tar::EntryType::Directory, 0o755, 0);
        b.append_data(&mut h, d, &[][..])?;
    }
    for (name, data) in files {
        let mut h = header(mtime, tar::EntryType::Regular, 0o644, data.len() as u64);
        b.append_data(&mut h, name, data)?;
    }
    Ok(BuiltImage {
        archive: b.into_inner()?,
        manifest_digest,
        config_digest,
        layer_digest,
        layer_size: layer.len() as u64,
    })
}

fn header(mtime: u64, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(mtime);
    h
}

/// An image layout archive read back: its documents parsed with `oci-spec` after every blob's
/// digest and size were checked against the descriptors that name them.
#[derive(Debug, Clone)]
pub struct ReadImage {
    pub index: ImageIndex,
    pub manifest: ImageManifest,
    pub config: ImageConfiguration,
    /// The (single) layer tar.
    pub layer: Vec<u8>,
    /// Every file of the archive by path.
    pub files: std::collections::BTreeMap<String, Vec<u8>>,
}

/// Reads and verifies an archive [`write`] produced (one manifest, one layer).
pub fn read(archive: &[u8]) -> Result<ReadImage, LayoutError> {
    let mut files = std::collections::BTreeMap::new();
    let mut a = tar::Archive::new(archive);
    for e in a.entries()? {
        let mut e = e?;
        if e.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let p = e.path()?.to_string_lossy().into_owned();
        let mut v = Vec::new();
        e.read_to_end(&mut v)?;
        files.insert(p, v);
    }
    let bad = |m: String| LayoutError::Invalid(m);
    for (p, data) in &files {
        if let Some(d) = p.strip_prefix("blobs/sha256/") {
            if sha256(data) != format!("sha256:{d}") {
                return Err(bad(format!("blob {p} does not hash to its name")));
            }
        }
    }
    let blob = |d: &Descriptor| -> Result<Vec<u8>, LayoutError> {
        let p = format!("blobs/sha256/{}", d.digest().digest());
        let data = files
            .get(&p)
            .ok_or_else(|| bad(format!("blob {p} named by a descriptor is missing")))?;
        if data.len() as u64 != d.size() {
            return Err(bad(format!(
                "blob {p} has {} bytes, its descriptor says {}",
                data.len(),
                d.size()
            )));
        }
        Ok(data.clone())
    };
    let layout = files
        .get("oci-layout")
        .ok_or_else(|| bad("oci-layout missing".into()))?;
    oci_spec::image::OciLayout::from_reader(&layout[..])?;
    let index = ImageIndex::from_reader(
        &files
            .get("index.json")
            .ok_or_else(|| bad("index.json missing".into()))?[..],
    )?;
    let [m] = index.manifests().as_slice() else {
        return Err(bad("the index names more or fewer than one manifest".into()));
    };
    let manifest = ImageManifest::from_reader(&blob(m)?[..])?;
    let config = ImageConfiguration::from_reader(&blob(manifest.config())?[..])?;
    let [l] = manifest.layers().as_slice() else {
        return Err(bad("the manifest names more or fewer than one layer".into()));
    };
    let layer = blob(l)?;
    if config.rootfs().diff_ids() != &vec![l.digest().to_string()] {
        return Err(bad(
            "the configuration's diff_ids do not name the layer".into()
        ));
    }
    Ok(ReadImage {
        index,
        manifest,
        config,
        layer,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            reference: "localhost/vpcnet/test:1".into(),
            arch: "amd64".into(),
            entrypoint: vec!["/bin/x".into()],
            cmd: vec![],
            env: vec!["PATH=/bin".into()],
            user: "65532:65532".into(),
            working_dir: "/".into(),
            labels: vec![("b".into(), "2".into()), ("a".into(), "1".into())],
        }
    }

    #[test]
    fn written_layout_reads_back_with_matching_digests_and_names() {
        let built = write(&spec(), b"layer bytes", 0).unwrap();
        let r = read(&built.archive).unwrap();
        let m = &r.index.manifests()[0];
        assert_eq!(m.digest().to_string(), built.manifest_digest);
        let ann = m.annotations().as_ref().unwrap();
        assert_eq!(ann[CONTAINERD_IMAGE_NAME], "localhost/vpcnet/test:1");
        assert_eq!(ann[OCI_REF_NAME], "1");
        assert_eq!(
            r.manifest.config().digest().to_string(),
            built.config_digest
        );
        assert_eq!(r.layer, b"layer bytes");
        let c = r.config.config().as_ref().unwrap();
        assert_eq!(c.user().as_deref(), Some("65532:65532"));
        assert!(r.config.created().is_none());
    }

    #[test]
    fn same_inputs_same_bytes_and_a_changed_input_changes_the_digest() {
        let a = write(&spec(), b"layer", 0).unwrap();
        for _ in 0..5 {
            // HashMap order differs per map: several writes must still agree byte for byte.
            assert_eq!(write(&spec(), b"layer", 0).unwrap().archive, a.archive);
        }
        assert_ne!(
            write(&spec(), b"layer2", 0).unwrap().manifest_digest,
            a.manifest_digest
        );
        assert_ne!(write(&spec(), b"layer", 1).unwrap().archive, a.archive);
    }

    #[test]
    fn a_tampered_blob_is_refused() {
        let built = write(&spec(), b"layer", 0).unwrap();
        let mut arch = built.archive.clone();
        let pos = arch.windows(5).position(|w| w == b"layer").unwrap();
        arch[pos] = b'L';
        let err = read(&arch).unwrap_err().to_string();
        assert!(err.contains("does not hash to its name"), "{err}");
    }

    #[test]
    fn a_reference_without_tag_is_refused() {
        let mut s = spec();
        s.reference = "localhost:5000/vpcnet/test".into();
        assert!(matches!(write(&s, b"l", 0), Err(LayoutError::NoTag(_))));
    }
}
