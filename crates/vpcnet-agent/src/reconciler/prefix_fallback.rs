//! Prefix delegation on a fragmented subnet: a prefix request (`AssignPrivateIpAddresses`
//! with `Ipv4PrefixCount`, or `CreateNetworkInterface` with prefixes) that EC2 refuses with
//! `InsufficientCidrBlocks` — free addresses, but no aligned /28 block of 16 — makes the pool
//! grow with secondary /32 addresses until it is time to try a prefix again
//! ([`vpcnet_ipam::Pool::fall_back_to_ips`]), unless a new ENI may still find whole blocks in
//! another subnet (decided in [`super::execute::fill`]). The fallback shows in
//! `vpcnet_prefix_fallback`, in `/v1/enis` and on the Node
//! ([`crate::kubernetes::prefix_fallback_report`]).

use vpcnet_ec2::Ec2Error;
use vpcnet_ipam::{Action, Pool};

/// What the log and the Node say to do about a fragmented subnet.
pub const FIX: &str = "reserve room for prefixes with a subnet CIDR reservation \
     (aws ec2 create-subnet-cidr-reservation --reservation-type prefix), or give the node's \
     ENIs a less fragmented subnet (ENIConfig, or a subnet tagged kubernetes.io/role/cni=1)";

/// Whether `action` failed because its subnet has no free aligned /28 block.
pub fn fragmented(action: &Action, e: &Ec2Error) -> bool {
    let asks_prefixes = matches!(
        action,
        Action::AssignPrefixes { .. } | Action::CreateEni { prefixes: 1.., .. }
    );
    asks_prefixes && matches!(e, Ec2Error::Api { code, .. } if code == "InsufficientCidrBlocks")
}

/// Records the refusal in the pool and says so in the log.
pub fn fall_back(pool: &mut Pool, e: &Ec2Error, now_ms: u64) {
    let first = pool.prefix_fallback().is_none();
    pool.fall_back_to_ips(now_ms);
    let Some(f) = pool.prefix_fallback() else {
        return;
    };
    let wait_s = f.retry_at_ms.saturating_sub(now_ms) / 1000;
    let error = crate::errors::chain(e);
    if first {
        tracing::warn!(
            "no /28 prefix is free in the subnet ({error}): pods get secondary IPs instead; prefixes are tried again in {wait_s} s. To keep prefixes, {FIX}"
        );
    } else {
        tracing::info!(
            failures = f.failures,
            "still no /28 prefix free in the subnet ({error}): pods keep getting secondary IPs; prefixes are tried again in {wait_s} s"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vpcnet_ec2::Action as Call;

    fn api(code: &str) -> Ec2Error {
        Ec2Error::api(Call::AssignPrivateIpAddresses, code, "", Some(400))
    }

    #[test]
    fn only_a_prefix_request_refused_for_want_of_a_block_falls_back() {
        let prefixes = Action::AssignPrefixes {
            eni_id: "eni-1".into(),
            count: 1,
        };
        let create = Action::CreateEni {
            ips: 0,
            prefixes: 2,
            network_card: 0,
        };
        let ips = Action::AssignIps {
            eni_id: "eni-1".into(),
            count: 1,
        };
        assert!(fragmented(&prefixes, &api("InsufficientCidrBlocks")));
        assert!(fragmented(&create, &api("InsufficientCidrBlocks")));
        assert!(!fragmented(&ips, &api("InsufficientCidrBlocks")));
        assert!(!fragmented(
            &prefixes,
            &api("InsufficientFreeAddressesInSubnet")
        ));
        assert!(!fragmented(&prefixes, &api("RequestLimitExceeded")));
    }
}
