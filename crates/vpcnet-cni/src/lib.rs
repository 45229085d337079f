//! vpcnet-cni: the CNI plugin binary the container runtime executes per pod
