//! vpcnet-cni: the CNI plugin the container runtime executes per pod.
//!
//! The library holds everything but `main`: [`conflist::render`] (called by the agent to write
//! `/etc/cni/net.d/10-vpcnet.conflist`), the CNI protocol types ([`cni`]), the agent client and the
//! verbs.

pub mod conflist;
