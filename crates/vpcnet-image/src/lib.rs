//! vpcnet's container images, built without a container engine or daemon: a root filesystem
//! assembled from files ([`layer`]), the ELF binaries' shared libraries resolved from the build
//! machine ([`elf`]), and an OCI image layout written as one tar archive ([`layout`]) that
//! `ctr -n k8s.io images import` accepts. Reproducible by construction: entries sorted, owner
//! 0:0, one fixed mtime (`SOURCE_DATE_EPOCH` or 0), no timestamp in the configuration, the layer
//! uncompressed, JSON with sorted keys; the same inputs give the same bytes and digests.
//!
//! [`images`] declares the two images: the node image (agent, plugin, install step, `nft`,
//! the operator CLI, the reference plugins the conflist chains) and the `vpcnet-targets` image
//! (the controller, as a non-root user).

pub mod elf;
pub mod images;
pub mod layer;
pub mod layout;
