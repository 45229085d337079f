//! `vpcnet-image build --bin-dir <dir> --out <dir>`: writes the node image and the
//! `vpcnet-targets` image as OCI image-layout archives and prints, per image, the archive's
//! path, the image reference and its digest (tab-separated), then the sizes on stderr.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use vpcnet_image::images::{self, Inputs};

#[derive(Parser)]
#[command(
    name = "vpcnet-image",
    about = "Build vpcnet's container images (OCI archives) without a container engine"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build both images.
    Build {
        /// Directory holding vpcnet-agent, vpcnet-cni, vpcnet-init, vpcnet and vpcnet-targets.
        #[arg(long)]
        bin_dir: PathBuf,
        /// Output directory for the archives.
        #[arg(long)]
        out: PathBuf,
        /// Image repository prefix.
        #[arg(long, default_value = images::DEFAULT_REPOSITORY)]
        repository: String,
        /// Image tag.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        tag: String,
        /// mtime of every archive entry (reproducible builds' convention).
        #[arg(long, env = "SOURCE_DATE_EPOCH", default_value_t = 0)]
        source_date_epoch: u64,
        /// Root of the file system the libraries, nft, the reference plugins and the CA bundle
        /// come from.
        #[arg(long, default_value = "/")]
        host_root: PathBuf,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Build {
            bin_dir,
            out,
            repository,
            tag,
            source_date_epoch,
            host_root,
        } => {
            let inputs = Inputs {
                bin_dir,
                host_root,
                arch: images::host_arch().to_string(),
                repository,
                tag,
                mtime: source_date_epoch,
            };
            for (path, image, built) in images::build_all(&inputs, &out)? {
                println!(
                    "{}\t{}\t{}",
                    path.display(),
                    image.spec.reference,
                    built.manifest_digest
                );
                eprintln!(
                    "{}: archive {} bytes, layer {} bytes ({} bytes of files)",
                    image.spec.reference,
                    built.archive.len(),
                    built.layer_size,
                    image.layer.file_bytes()
                );
            }
            Ok(())
        }
    }
}
