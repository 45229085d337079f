//! vpcnet-bootstrap: kubelet configuration at node boot (max pods, cloud provider, cluster DNS, kube-reserved)
