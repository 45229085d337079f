//! CHECK: compares the datapath with prevResult and names every difference.

use vpcnet_datapath::{netns, pod};

use super::{datapath_error, host_veth, netns_path, Invocation};
use crate::cni::error::{code, CniError};
use crate::cni::result::read_prev;

pub async fn check(inv: &Invocation) -> Result<(), CniError> {
    let env = &inv.env;
    let prev = inv.conf.prev_result.as_ref().ok_or_else(|| {
        CniError::new(
            code::INVALID_CONFIG,
            "CHECK without prevResult",
            "the runtime must pass the ADD result as prevResult",
        )
    })?;
    let p = read_prev(prev, &env.ifname);
    let Some(ip) = p.ip.filter(|_| p.has_pod_interface) else {
        return Err(CniError::new(
            code::UNKNOWN_CONTAINER,
            format!("prevResult has no IPv4 on interface {}", env.ifname),
            "this container was not set up by vpcnet-cni: run ADD first",
        ));
    };
    let node = netns::connect().map_err(|e| datapath_error("open netlink", e))?;
    let veth = host_veth(inv);
    let pod_handle = match netns::open(netns_path(inv)) {
        Ok(fd) => Some(
            netns::connect_in(&fd, netns_path(inv))
                .map_err(|e| datapath_error("open pod netlink", e))?,
        ),
        Err(_) => None,
    };
    let exp = pod::Expected {
        ip,
        host_veth: veth.clone(),
        container_ifname: env.ifname.clone(),
        mtu: inv.conf.mtu,
    };
    let problems = pod::check(&node, pod_handle.as_ref(), &exp)
        .await
        .map_err(|e| datapath_error("reading the pod network", e))?;
    if problems.is_empty() {
        return Ok(());
    }
    let unknown = pod_handle.is_none()
        || (problems
            .iter()
            .any(|p| p.starts_with("host veth") && p.ends_with("is missing"))
            && problems
                .iter()
                .any(|p| p.starts_with("pod interface") && p.ends_with("is missing")));
    if unknown {
        return Err(CniError::new(
            code::UNKNOWN_CONTAINER,
            format!(
                "container {} is unknown: no host veth {veth} and no pod interface {}",
                env.container_id, env.ifname
            ),
            problems.join("; "),
        ));
    }
    Err(CniError::new(
        code::CHECK_FAILED,
        format!(
            "pod network of {} differs from its ADD result",
            env.container_id
        ),
        problems.join("; "),
    ))
}
