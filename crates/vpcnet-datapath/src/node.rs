//! Node side of secondary ENIs: interface setup and one route table per ENI.
//!
//! For the ENI with device number N (attached as `ethN`), table N + 1 ([`eni_route_table`])
//! holds `<subnet> dev ethN scope link` and `default via <subnet gateway> dev ethN`, where the
//! gateway is the subnet's first address (the VPC router, e.g. 10.0.1.1 in 10.0.1.0/24). Pods
//! whose IP lives on that ENI reach it through the rule `from <pod ip> lookup N + 1` (priority
//! 1536, see [`crate::host`]). This mirrors the VPC CNI's `setupENINetwork`, numbering included,
//! so a node swapped between the two agents keeps every pod's rule pointing at its own ENI.
//! ENIs on network cards other than 0 (ENABLE_MULTI_NIC) get table 10000 + 100 × card +
//! device number, the VPC CNI's (and amazon-ec2-net-utils') numbering for them
//! ([`card_route_table`]).

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};

use crate::error::{errno, errnos, nl};
use crate::names::{format_mac, parse_mac};
use crate::nl::{addrs_v4, delete_route, links, routes_v4, rules_v4, Link, Route};
use crate::{Error, Result, MAIN_TABLE, PRIO_FROM_POD};

/// Highest ENI device number with a route table of its own: its table, 252, is the last one
/// below the kernel's reserved tables `default` (253), `main` (254) and `local` (255).
pub const MAX_ENI_DEVICE_NUMBER: u32 = 251;

/// The route table id of the secondary ENI at attachment device number `device_number`
/// (`ethN`): device number + 1 (eth1 → table 2, eth2 → table 3), the VPC CNI's numbering
/// (`networkutils`' `setupENINetwork` uses device number + 1), so pods either agent set up find
/// their ENI's routes after a swap. Defined for device numbers 1..=[`MAX_ENI_DEVICE_NUMBER`]
/// (tables 2..=252); the primary ENI (device 0) has no table of its own (it uses `main`), and
/// table 1 is never an ENI table (older vpcnet releases numbered tables by device number, see
/// [`setup_eni`] for the upgrade).
pub const fn eni_route_table(device_number: u32) -> u32 {
    device_number.saturating_add(1)
}

/// Highest device number on a network card other than 0 with a table of its own (tables of
/// card c are 10000 + 100 × c + 0..=99).
pub const MAX_CARD_DEVICE_NUMBER: u32 = 99;

/// The route table id of the ENI at `device_number` on network card `network_card`: on card 0
/// [`eni_route_table`] (device number + 1), on card c > 0 10000 + 100 × c + device number, as
/// the VPC CNI's `CalculateRouteTableId` numbers them. Defined for the device numbers
/// [`EniSpec`] accepts.
pub const fn card_route_table(network_card: u32, device_number: u32) -> u32 {
    if network_card == 0 {
        eni_route_table(device_number)
    } else {
        10_000u32
            .saturating_add(network_card.saturating_mul(100))
            .saturating_add(device_number)
    }
}

fn check_device(network_card: u32, device_number: u32) -> Result<()> {
    if network_card == 0 {
        return check_device_number(device_number);
    }
    if device_number > MAX_CARD_DEVICE_NUMBER || network_card > 1_000 {
        return Err(Error::Invalid(format!(
            "device number {device_number} on network card {network_card} has no ENI route table of its own: use card 1..=1000, device 0..={MAX_CARD_DEVICE_NUMBER}"
        )));
    }
    Ok(())
}

fn check_device_number(device_number: u32) -> Result<()> {
    if device_number == 0 || device_number > MAX_ENI_DEVICE_NUMBER {
        return Err(Error::Invalid(format!(
            "device number {device_number} has no ENI route table of its own: use 1..={MAX_ENI_DEVICE_NUMBER} (the primary ENI, 0, uses main)"
        )));
    }
    Ok(())
}

/// Desired node state of one secondary ENI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniSpec {
    /// ENI MAC address as IMDS and EC2 report it, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Attachment device number (1 for eth1, ...); its route table is
    /// [`eni_route_table`] (device number + 1). Must be in 1..=[`MAX_ENI_DEVICE_NUMBER`] (the
    /// primary ENI, 0, uses the main table and is not managed here). On a network card other
    /// than 0: 0..=[`MAX_CARD_DEVICE_NUMBER`], table [`card_route_table`].
    pub device_number: u32,
    /// Attachment network card (0 unless ENABLE_MULTI_NIC).
    pub network_card: u32,
    /// The ENI's subnet CIDR, e.g. 10.0.1.0/24; the gateway is its first address.
    pub subnet: Ipv4Net,
    /// Interface MTU in bytes (`AWS_VPC_ENI_MTU`, default 9001).
    pub mtu: u32,
    /// The ENI's primary private IPv4, put on the interface with the subnet's prefix length when
    /// given (as the VPC CNI does); the kernel's subnet route it creates in main is removed, so
    /// only table N routes the subnet via this ENI. `None` leaves addresses alone.
    pub primary_ip: Option<Ipv4Addr>,
}

impl EniSpec {
    /// The subnet gateway: the subnet's first address (VPC router).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet.network()) + 1)
    }

    /// The ENI's route table ([`card_route_table`]).
    pub fn table(&self) -> u32 {
        card_route_table(self.network_card, self.device_number)
    }

    fn check(&self) -> Result<[u8; 6]> {
        check_device(self.network_card, self.device_number).map_err(|e| match e {
            Error::Invalid(m) => Error::Invalid(format!("ENI {}: {m}", self.mac)),
            e => e,
        })?;
        if self.subnet.prefix_len() > 28 {
            return Err(Error::Invalid(format!(
                "ENI {}: subnet {} is smaller than a VPC subnet may be (/28)",
                self.mac, self.subnet
            )));
        }
        if !(68..=65535).contains(&self.mtu) {
            return Err(Error::Invalid(format!(
                "ENI {}: MTU {} is out of range 68..=65535",
                self.mac, self.mtu
            )));
        }
        parse_mac(&self.mac)
    }
}

/// The interface found for an ENI and its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EniLink {
    /// Interface name, e.g. "eth1".
    pub name: String,
    pub index: u32,
    /// Route table id ([`eni_route_table`] of the device number).
    pub table: u32,
}

/// Finds the interface whose MAC is `mac` (`aa:bb:..`). `Ok(None)` when no interface has it
/// (the ENI is not attached yet, or udev has not created the device yet: retry later).
pub async fn find_link_by_mac(h: &Handle, mac: &str) -> Result<Option<Link>> {
    let want = parse_mac(mac)?;
    Ok(links(h).await?.into_iter().find(|l| l.mac == want))
}

/// Sets up a secondary ENI on the node: finds its interface by MAC, sets the MTU, brings it up,
/// optionally puts its primary IP on it, and (re)writes its table ([`eni_route_table`], device
/// number + 1) with the subnet route and the default route via the subnet gateway. Idempotent:
/// every write is a replace, and stale routes in its table (other than these two) are removed,
/// so calling it again reconciles.
///
/// Upgrade from the old numbering (table = device number): this ENI's own routes left in table
/// N = device number (those whose output device is this ENI's interface) are removed once no
/// pod rule of the ENI's subnet looks up table N any more. Other routes of table N are left
/// alone: under the current numbering table N belongs to device N − 1, whose own [`setup_eni`]
/// rewrites it.
///
/// Errors: [`Error::Invalid`] for a bad spec; [`Error::NotFound`] when no interface has the MAC;
/// [`Error::Netlink`] naming the failed step.
pub async fn setup_eni(h: &Handle, spec: &EniSpec) -> Result<EniLink> {
    spec.check()?;
    let link = find_link_by_mac(h, &spec.mac).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "no interface has MAC {} (ENI device {}): is the ENI attached?",
            spec.mac, spec.device_number
        ))
    })?;
    let table = spec.table();
    let what = |s: &str| format!("ENI {} ({}): {s}", spec.mac, link.name);

    nl(
        h.link()
            .set(
                LinkUnspec::new_with_index(link.index)
                    .mtu(spec.mtu)
                    .up()
                    .build(),
            )
            .execute()
            .await,
        || what("set MTU and up"),
    )?;

    if let Some(ip) = spec.primary_ip {
        let present = addrs_v4(h, link.index).await?;
        if !present.contains(&(ip, spec.subnet.prefix_len())) {
            let r = h
                .address()
                .add(link.index, ip.into(), spec.subnet.prefix_len())
                .execute()
                .await;
            match r {
                Err(e) if errno(&e) == Some(errnos::EEXIST) => {}
                r => nl(r, || what("add primary IP"))?,
            }
        }
        // The kernel adds "<subnet> dev ethN proto kernel" to main; only table N may route it.
        for r in routes_v4(h).await? {
            if r.table == MAIN_TABLE
                && r.oif == Some(link.index)
                && r.dst == spec.subnet.network()
                && r.dst_len == spec.subnet.prefix_len()
            {
                delete_route(h, &r).await?;
            }
        }
    }

    let subnet_route = RouteMessageBuilder::<Ipv4Addr>::new()
        .destination_prefix(spec.subnet.network(), spec.subnet.prefix_len())
        .output_interface(link.index)
        .scope(RouteScope::Link)
        .table_id(table)
        .build();
    nl(
        h.route().add(subnet_route).replace().execute().await,
        || what(&format!("replace {} in table {table}", spec.subnet)),
    )?;
    let default = RouteMessageBuilder::<Ipv4Addr>::new()
        .gateway(spec.gateway())
        .output_interface(link.index)
        .table_id(table)
        .build();
    nl(h.route().add(default).replace().execute().await, || {
        what(&format!(
            "replace default via {} in table {table}",
            spec.gateway()
        ))
    })?;

    for r in eni_table(h, table).await? {
        if !is_wanted(&r, spec, link.index) {
            delete_route(h, &r).await?;
        }
    }
    for r in legacy_routes(h, spec, link.index).await? {
        delete_route(h, &r).await?;
    }
    Ok(EniLink {
        name: link.name,
        index: link.index,
        table,
    })
}

fn is_wanted(r: &Route, spec: &EniSpec, index: u32) -> bool {
    let subnet = r.dst == spec.subnet.network()
        && r.dst_len == spec.subnet.prefix_len()
        && r.gateway.is_none()
        && r.oif == Some(index);
    let default = r.dst_len == 0 && r.gateway == Some(spec.gateway()) && r.oif == Some(index);
    subnet || default
}

/// Routes the old numbering (table = device number) left for the ENI of `spec`: those of table
/// N = device number whose output device is the ENI's interface `index`. Empty while a pod rule
/// (`from <ip> lookup N` at 1536, `ip` in the ENI's subnet) still looks up table N: such a pod
/// was set up under the old numbering and keeps its routes until the datapath audit re-points
/// its rule (it checks pods before ENIs, so the same pass then removes these routes).
async fn legacy_routes(h: &Handle, spec: &EniSpec, index: u32) -> Result<Vec<Route>> {
    let n = spec.device_number;
    if spec.network_card != 0 {
        // Never numbered otherwise.
        return Ok(vec![]);
    }
    let in_use = rules_v4(h).await?.iter().any(|r| {
        r.priority == PRIO_FROM_POD
            && r.table == n
            && r.src.is_some_and(|(ip, _)| spec.subnet.contains(&ip))
    });
    if in_use {
        return Ok(vec![]);
    }
    Ok(eni_table(h, n)
        .await?
        .into_iter()
        .filter(|r| r.oif == Some(index))
        .collect())
}

/// Routes of table `table` (IPv4).
pub async fn eni_table(h: &Handle, table: u32) -> Result<Vec<Route>> {
    Ok(routes_v4(h)
        .await?
        .into_iter()
        .filter(|r| r.table == table)
        .collect())
}

/// Removes the node state of the ENI at `device_number` on `network_card`: flushes its table
/// ([`card_route_table`]). The interface itself is left alone (it disappears when EC2
/// detaches the ENI). Idempotent.
///
/// Errors: [`Error::Invalid`] for a device without a table of its own (the primary ENI);
/// [`Error::Netlink`].
pub async fn teardown_eni(h: &Handle, network_card: u32, device_number: u32) -> Result<()> {
    check_device(network_card, device_number)?;
    for r in eni_table(h, card_route_table(network_card, device_number)).await? {
        delete_route(h, &r).await?;
    }
    Ok(())
}

/// Compares the node state of one ENI with `spec`. Returns the differences as sentences
/// (empty = in sync), e.g. "eth1: MTU 1500, want 9001" or "table 2: missing default via
/// 10.0.1.1 dev eth1" (eth1's table is 2, [`eni_route_table`]); routes of this ENI left in table
/// N = device number by the old numbering are drift too. Call [`setup_eni`] to repair.
///
/// Errors: [`Error::Invalid`] for a bad spec, [`Error::Netlink`].
pub async fn verify_eni(h: &Handle, spec: &EniSpec) -> Result<Vec<String>> {
    let want_mac = spec.check()?;
    let mut drift = Vec::new();
    let Some(link) = find_link_by_mac(h, &spec.mac).await? else {
        drift.push(format!("no interface has MAC {}", format_mac(&want_mac)));
        return Ok(drift);
    };
    let n = &link.name;
    if link.mtu != spec.mtu {
        drift.push(format!("{n}: MTU {}, want {}", link.mtu, spec.mtu));
    }
    if !link.up {
        drift.push(format!("{n}: interface is down"));
    }
    if let Some(ip) = spec.primary_ip {
        if !addrs_v4(h, link.index)
            .await?
            .contains(&(ip, spec.subnet.prefix_len()))
        {
            drift.push(format!(
                "{n}: missing address {ip}/{}",
                spec.subnet.prefix_len()
            ));
        }
    }
    let t = spec.table();
    let table = eni_table(h, t).await?;
    if !table
        .iter()
        .any(|r| r.dst_len != 0 && is_wanted(r, spec, link.index))
    {
        drift.push(format!(
            "table {t}: missing {} dev {n} scope link",
            spec.subnet
        ));
    }
    if !table
        .iter()
        .any(|r| r.dst_len == 0 && is_wanted(r, spec, link.index))
    {
        drift.push(format!(
            "table {t}: missing default via {} dev {n}",
            spec.gateway()
        ));
    }
    for r in table.iter().filter(|r| !is_wanted(r, spec, link.index)) {
        drift.push(format!(
            "table {t}: unexpected route {}/{} via {:?} oif {:?}",
            r.dst, r.dst_len, r.gateway, r.oif
        ));
    }
    for r in legacy_routes(h, spec, link.index).await? {
        drift.push(format!(
            "table {}: stale route {}/{} dev {n} of the old numbering (table = device number), want it in table {t} only",
            spec.device_number, r.dst, r.dst_len
        ));
    }
    Ok(drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EniSpec {
        EniSpec {
            mac: "02:00:00:00:00:01".into(),
            device_number: 1,
            network_card: 0,
            subnet: "10.0.1.0/24".parse().unwrap(),
            mtu: 9001,
            primary_ip: None,
        }
    }

    #[test]
    fn tables_of_further_cards_follow_the_vpc_cnis_numbering() {
        assert_eq!(card_route_table(0, 1), 2);
        assert_eq!(card_route_table(1, 0), 10_100);
        assert_eq!(card_route_table(2, 3), 10_203);
        let card1 = EniSpec {
            network_card: 1,
            device_number: 0,
            ..spec()
        };
        assert!(card1.check().is_ok());
        assert_eq!(card1.table(), 10_100);
        let too_far = EniSpec {
            device_number: 100,
            ..card1.clone()
        };
        assert!(too_far.check().is_err());
    }

    #[test]
    fn gateway_is_first_subnet_address() {
        assert_eq!(spec().gateway(), Ipv4Addr::new(10, 0, 1, 1));
        let s = EniSpec {
            subnet: "10.0.64.0/18".parse().unwrap(),
            ..spec()
        };
        assert_eq!(s.gateway(), Ipv4Addr::new(10, 0, 64, 1));
    }

    #[test]
    fn eni_tables_follow_the_vpc_cnis_numbering() {
        assert_eq!(eni_route_table(1), 2);
        assert_eq!(eni_route_table(2), 3);
        assert_eq!(eni_route_table(MAX_ENI_DEVICE_NUMBER), 252);
        let last = EniSpec {
            device_number: MAX_ENI_DEVICE_NUMBER,
            ..spec()
        };
        assert!(last.check().is_ok());
    }

    #[test]
    fn bad_specs_are_rejected() {
        assert!(spec().check().is_ok());
        for s in [
            EniSpec {
                device_number: 0,
                ..spec()
            },
            EniSpec {
                device_number: 252,
                ..spec()
            },
            EniSpec {
                mac: "nope".into(),
                ..spec()
            },
            EniSpec { mtu: 10, ..spec() },
            EniSpec {
                subnet: "10.0.1.0/30".parse().unwrap(),
                ..spec()
            },
        ] {
            assert!(s.check().is_err(), "{s:?} accepted");
        }
    }
}
