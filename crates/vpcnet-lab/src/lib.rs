//! The local VPC lab: namespaces, VPC fabric, per-node containerd, driven by vpcnet-emu hooks
