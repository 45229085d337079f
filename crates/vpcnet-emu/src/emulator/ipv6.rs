//! IPv6 CIDR blocks of VPCs and subnets, set up in-process (the control API's `ipv6_cidr`
//! fields and the setup file's use these).

use ipnet::{Ipv4Net, Ipv6Net};

use super::{lock, Emulator, VpcInfo};
use crate::error::Ec2Error;

impl Emulator {
    /// Create a VPC as [`Emulator::create_vpc`] does, with `ipv6_cidr` (a /56) as its IPv6
    /// CIDR block when given; nothing is created when any check fails.
    /// Errors: `InvalidParameterValue` (sizes, overlaps).
    pub fn create_vpc_with_ipv6(
        &self,
        cidr: Ipv4Net,
        extra: &[Ipv4Net],
        ipv6_cidr: Option<Ipv6Net>,
    ) -> Result<VpcInfo, Ec2Error> {
        let mut cloud = lock(&self.inner.cloud);
        if let Some(c) = ipv6_cidr {
            cloud.check_vpc_ipv6(c)?;
        }
        let (vpc_id, sg) = cloud.create_vpc(cidr, extra)?;
        if let Some(c) = ipv6_cidr {
            cloud.associate_vpc_ipv6(&vpc_id, c)?;
        }
        Ok(VpcInfo {
            vpc_id,
            default_security_group_id: sg,
        })
    }

    /// Create a subnet as [`Emulator::create_subnet`] does, with `ipv6_cidr` (a /64 inside the
    /// VPC's /56) as its IPv6 CIDR block when given, and EC2's `AssignIpv6AddressOnCreation`;
    /// nothing is created when any check fails. Errors: those of `create_subnet`,
    /// `InvalidSubnet.Range`, `InvalidSubnet.Conflict`, and `InvalidParameterValue` for
    /// `assign_ipv6_on_creation` without an IPv6 CIDR block.
    pub fn create_subnet_with_ipv6(
        &self,
        vpc_id: &str,
        cidr: Ipv4Net,
        az: &str,
        ipv6_cidr: Option<Ipv6Net>,
        assign_ipv6_on_creation: bool,
    ) -> Result<String, Ec2Error> {
        let mut cloud = lock(&self.inner.cloud);
        match ipv6_cidr {
            Some(c) => {
                if cloud.vpc(vpc_id).is_none() {
                    return Err(Ec2Error::vpc_not_found(vpc_id));
                }
                cloud.check_subnet_ipv6(vpc_id, c)?;
            }
            None if assign_ipv6_on_creation => {
                return Err(Ec2Error::invalid_value(
                    "assign_ipv6_address_on_creation needs the subnet's ipv6_cidr (a /64 of the VPC's /56)",
                ))
            }
            None => {}
        }
        let id = cloud.create_subnet(vpc_id, cidr, az)?;
        if let Some(c) = ipv6_cidr {
            cloud.associate_subnet_ipv6(&id, c, assign_ipv6_on_creation)?;
        }
        Ok(id)
    }

    /// Associate the /56 `cidr` with an existing VPC. Returns the association ID.
    /// Errors: `InvalidVpcID.NotFound`, `InvalidParameterValue`.
    pub fn associate_vpc_ipv6_cidr(&self, vpc_id: &str, cidr: Ipv6Net) -> Result<String, Ec2Error> {
        lock(&self.inner.cloud).associate_vpc_ipv6(vpc_id, cidr)
    }

    /// Associate the /64 `cidr` with an existing subnet. Returns the association ID.
    /// Errors: `InvalidSubnetID.NotFound`, `InvalidSubnet.Range`, `InvalidSubnet.Conflict`,
    /// `InvalidParameterValue`.
    pub fn associate_subnet_ipv6_cidr(
        &self,
        subnet_id: &str,
        cidr: Ipv6Net,
        assign_on_creation: bool,
    ) -> Result<String, Ec2Error> {
        lock(&self.inner.cloud).associate_subnet_ipv6(subnet_id, cidr, assign_on_creation)
    }
}
