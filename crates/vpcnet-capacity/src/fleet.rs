//! The fleet: node groups placed into subnets node by node, each node settled by the IPAM
//! core ([`crate::node::settle`]), each new ENI placed as the agent places it (the
//! ENIConfig's subnet under custom networking; with subnet discovery the eligible subnet of
//! the node's zone with the most free addresses, trying the next when one is full; else the
//! node's subnet).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use vpcnet_ipam::subnet_role;
use vpcnet_limits::{max_pods, MaxPodsOptions};

use crate::calls::CallCount;
use crate::node::{settle, NodeFootprint};
use crate::rates::{floor, Floor};
use crate::settings::WarmSettings;
use crate::sim::SimNode;
use crate::subnets::{prefix_risk, PrefixRisk, SubnetSpec};
use crate::PlanError;

/// Nodes placed past the fleet to find where each subnet runs out, at most.
pub const RUN_OUT_HORIZON: u64 = 100_000;

/// The planner's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// The VPC's subnets the fleet may use.
    #[serde(default)]
    pub subnets: Vec<SubnetSpec>,
    /// The VPC CNI settings of the fleet (variable names).
    #[serde(default)]
    pub settings: WarmSettings,
    /// Custom networking: the ENIConfig subnet of each zone (zone → subnet ID).
    #[serde(default)]
    pub eni_configs: BTreeMap<String, String>,
    pub node_groups: Vec<NodeGroup>,
    /// Nodes to add to the fleet, spread over the groups as the fleet is.
    #[serde(default)]
    pub scale_out: Option<u32>,
}

/// Nodes of one instance type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    pub name: String,
    /// EC2 instance type, e.g. `m5.large`.
    pub instance_type: String,
    /// Nodes in the group.
    pub count: u32,
    /// Pods with a VPC address per node; unset: the node full (kubelet's max pods less the
    /// two host-network pods the formula counts, aws-node and kube-proxy).
    #[serde(default)]
    pub pods_per_node: Option<u32>,
    /// The nodes' subnets (their primary ENIs), used in turn as an Auto Scaling group
    /// spreads over zones.
    pub subnets: Vec<String>,
    /// kubelet's `maxPods` on these nodes, when not what vpcnet-bootstrap and the EKS AMI
    /// compute (the ENI formula, uncapped in secondary-IP mode, 110/250 with prefixes).
    #[serde(default)]
    pub max_pods: Option<u32>,
}

impl NodeGroup {
    /// The subnet of the group's node `k` (0-based): its subnets in turn.
    pub fn subnet_of(&self, k: u64) -> &str {
        &self.subnets[(k % self.subnets.len() as u64) as usize]
    }
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetPlan {
    pub groups: Vec<GroupPlan>,
    pub subnets: Vec<SubnetPlan>,
    /// Nodes that could not get every address they need, in fleet order.
    pub shortfalls: Vec<Shortfall>,
    pub scale_out: Option<ScaleOut>,
}

/// One node group's figures (per node with the primary ENI serving pods, else the
/// custom-networking or excluded-subnet variant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupPlan {
    pub name: String,
    pub instance_type: String,
    pub nodes: u32,
    pub max_pods: u32,
    pub pods_per_node: u32,
    pub per_node: NodeFootprint,
}

/// One subnet after the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubnetPlan {
    pub id: String,
    pub zone: String,
    pub cidr: String,
    /// Free before the fleet.
    pub available: u32,
    /// Addresses the fleet takes in it (ENI primaries, secondary addresses, 16 per prefix).
    pub fleet_addresses: u64,
    /// ENIs of the fleet in it.
    pub fleet_enis: u64,
    /// Free after the fleet.
    pub headroom: i64,
    /// Size of the fleet (nodes, in the same mix) at which a node first finds this subnet
    /// without room; `None` if it never receives addresses or lasts past
    /// [`RUN_OUT_HORIZON`] more nodes.
    pub runs_out_at_nodes: Option<u64>,
    /// Prefix mode only.
    pub prefix_risk: Option<PrefixRisk>,
}

/// A node that could not get an ENI's addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    pub group: String,
    /// 1-based position of the node in the fleet.
    pub node: u64,
    /// Addresses it could not get.
    pub addresses: u32,
    /// The subnets that had no room.
    pub subnets: Vec<String>,
}

/// Adding nodes: the calls they cost and the time the account's buckets impose.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleOut {
    pub nodes: u64,
    /// Every new node settled with its pods.
    pub calls: CallCount,
    /// Every new node able to serve its first pod.
    pub calls_to_first_address: CallCount,
    /// The earliest the last new node can serve its first pod, and the slowest action.
    pub floor_first_address: Floor,
    /// The earliest every new node can be settled.
    pub floor_settled: Floor,
    /// New nodes that would not get every address they need.
    pub shortfalls: Vec<Shortfall>,
}

/// Plans the fleet.
pub fn plan(spec: &FleetSpec) -> Result<FleetPlan, PlanError> {
    let fleet = Fleet::new(spec)?;
    let total: u64 = spec.node_groups.iter().map(|g| u64::from(g.count)).sum();
    let mut ledger = Ledger::new(&spec.subnets);
    let mut order = Order::new(spec);
    let mut shortfalls = Vec::new();
    for n in 1..=total {
        let (g, k) = order.next();
        if let Some(s) = fleet.place(g, k, n, &mut ledger)? {
            shortfalls.push(s);
        }
    }
    let after_fleet = ledger.clone();

    let scale_out = match spec.scale_out {
        Some(extra) => Some(fleet.scale_out(&mut ledger, &mut order, total, extra)?),
        None => None,
    };

    // Where each subnet runs out: keep adding nodes in the same mix.
    let mut probe = after_fleet.clone();
    let mut probe_order = order_after(spec, total);
    let mut n = total;
    while n < total + RUN_OUT_HORIZON && probe.open_receivers() {
        n += 1;
        let (g, k) = probe_order.next();
        fleet.place(g, k, n, &mut probe)?;
    }

    let subnets = spec
        .subnets
        .iter()
        .map(|s| {
            let d = &after_fleet.draw[&s.id];
            SubnetPlan {
                id: s.id.clone(),
                zone: s.zone.clone(),
                cidr: s.cidr.to_string(),
                available: s.free(),
                fleet_addresses: d.addresses,
                fleet_enis: d.enis,
                headroom: i64::from(s.free()) - d.addresses as i64,
                runs_out_at_nodes: probe.draw[&s.id].ran_out_at,
                prefix_risk: spec.settings.enable_prefix_delegation.then(|| {
                    prefix_risk(
                        s,
                        d.prefixes.min(u64::from(u32::MAX)) as u32,
                        d.singles.min(u64::from(u32::MAX)) as u32,
                    )
                }),
            }
        })
        .collect();
    let groups = spec
        .node_groups
        .iter()
        .enumerate()
        .map(|(i, g)| GroupPlan {
            name: g.name.clone(),
            instance_type: g.instance_type.clone(),
            nodes: g.count,
            max_pods: fleet.groups[i].max_pods,
            pods_per_node: fleet.groups[i].pods,
            per_node: fleet.groups[i].typical().clone(),
        })
        .collect();
    Ok(FleetPlan {
        groups,
        subnets,
        shortfalls,
        scale_out,
    })
}

/// The settled footprints of each group, and where its nodes go.
struct Fleet<'a> {
    spec: &'a FleetSpec,
    groups: Vec<GroupModel>,
    by_id: BTreeMap<&'a str, &'a SubnetSpec>,
}

struct GroupModel {
    max_pods: u32,
    pods: u32,
    /// With the primary ENI serving pods (absent under custom networking).
    with_primary: Option<NodeFootprint>,
    /// Without (custom networking, or a node subnet tagged `kubernetes.io/role/cni=0`);
    /// absent when no node of the group needs it.
    without_primary: Option<NodeFootprint>,
}

impl GroupModel {
    fn typical(&self) -> &NodeFootprint {
        self.with_primary
            .as_ref()
            .or(self.without_primary.as_ref())
            .expect("a group has at least one footprint")
    }
}

impl<'a> Fleet<'a> {
    fn new(spec: &'a FleetSpec) -> Result<Self, PlanError> {
        let by_id = validate(spec)?;
        let s = &spec.settings;
        let mut groups = Vec::new();
        for g in &spec.node_groups {
            let in_group = |e: PlanError| PlanError::Group {
                group: g.name.clone(),
                cause: Box::new(e),
            };
            let limits = vpcnet_limits::lookup(&g.instance_type)
                .ok_or_else(|| in_group(PlanError::UnknownInstanceType(g.instance_type.clone())))?;
            // What vpcnet-bootstrap and the EKS AMI give kubelet: the ENI formula uncapped in
            // secondary-IP mode (eni-max-pods.txt), the 110/250 ceiling with prefixes.
            let mp = g.max_pods.unwrap_or_else(|| {
                max_pods(
                    limits,
                    MaxPodsOptions {
                        custom_networking: s.custom_network,
                        prefix_delegation: s.enable_prefix_delegation,
                        max_eni: s.max_eni.filter(|n| *n > 0),
                        show_max_allowed: !s.enable_prefix_delegation,
                    },
                )
                .max_pods
            });
            let pods = g.pods_per_node.unwrap_or(mp.saturating_sub(2));
            if pods > mp {
                return Err(in_group(PlanError::Input(format!(
                    "pods_per_node {pods} is more than kubelet's max pods {mp} on {} with these settings (vpcnet-bootstrap's and the EKS AMI's value): lower pods_per_node, or set the group's max_pods to what your nodes use",
                    g.instance_type
                ))));
            }
            let primary = |id: &String| s.primary_for_pods(by_id[id.as_str()]);
            let needs_with = g.subnets.iter().any(primary);
            let needs_without = !g.subnets.iter().all(primary);
            let footprint = |primary: bool| -> Result<NodeFootprint, PlanError> {
                let cfg = s.warm_config(limits, primary).map_err(in_group)?;
                settle(&cfg, pods, s.subnet_discovery()).map_err(in_group)
            };
            groups.push(GroupModel {
                max_pods: mp,
                pods,
                with_primary: needs_with.then(|| footprint(true)).transpose()?,
                without_primary: needs_without.then(|| footprint(false)).transpose()?,
            });
        }
        Ok(Fleet {
            spec,
            groups,
            by_id,
        })
    }

    /// Places node `k` of group `g`, the fleet's `n`th node.
    fn place(
        &self,
        g: usize,
        k: u64,
        n: u64,
        ledger: &mut Ledger,
    ) -> Result<Option<Shortfall>, PlanError> {
        let group = &self.spec.node_groups[g];
        let s = &self.spec.settings;
        let node_subnet = self.by_id[group.subnet_of(k)];
        let model = &self.groups[g];
        let fp = if s.primary_for_pods(node_subnet) {
            model.with_primary.as_ref()
        } else {
            model.without_primary.as_ref()
        }
        .expect("footprint computed for every subnet of the group");
        let mut short = Shortfall {
            group: group.name.clone(),
            node: n,
            addresses: 0,
            subnets: Vec::new(),
        };
        for (i, eni) in fp.enis.iter().enumerate() {
            let candidates: Vec<&str> = if eni.primary {
                vec![node_subnet.id.as_str()]
            } else if s.custom_network {
                vec![self.spec.eni_configs[&node_subnet.zone].as_str()]
            } else if s.subnet_discovery() {
                let cluster = s.cluster_name.as_deref().unwrap_or("");
                let mut v: Vec<&SubnetSpec> = self
                    .spec
                    .subnets
                    .iter()
                    .filter(|c| {
                        c.zone == node_subnet.zone
                            && subnet_role::eligible(&c.tags, c.id == node_subnet.id, cluster)
                    })
                    .collect();
                v.sort_by_key(|c| std::cmp::Reverse(ledger.free(&c.id)));
                v.into_iter().map(|c| c.id.as_str()).collect()
            } else {
                vec![node_subnet.id.as_str()]
            };
            if !ledger.take(&candidates, eni, n) {
                if candidates.is_empty() {
                    short.subnets.push(format!(
                        "(no subnet of {} may get ENIs: tag one kubernetes.io/role/cni=1)",
                        node_subnet.zone
                    ));
                }
                short
                    .subnets
                    .extend(candidates.iter().map(|c| c.to_string()));
                if eni.primary {
                    // No room for the instance's own ENI: it does not launch at all.
                    short.addresses = fp.enis.iter().map(|e| e.addresses).sum();
                    break;
                }
                short.addresses += eni.addresses;
            }
            debug_assert!(i > 0 || eni.primary, "the primary ENI comes first");
        }
        short.subnets.sort();
        short.subnets.dedup();
        Ok((short.addresses > 0).then_some(short))
    }

    fn scale_out(
        &self,
        ledger: &mut Ledger,
        order: &mut Order,
        total: u64,
        extra: u32,
    ) -> Result<ScaleOut, PlanError> {
        let mut calls = CallCount::default();
        let mut first = CallCount::default();
        let mut shortfalls = Vec::new();
        for i in 1..=u64::from(extra) {
            let (g, k) = order.next();
            let fp = self.groups[g].typical();
            calls.add_all(&fp.calls, 1);
            first.add_all(&fp.calls_to_first_address, 1);
            if let Some(s) = self.place(g, k, total + i, ledger)? {
                shortfalls.push(s);
            }
        }
        Ok(ScaleOut {
            nodes: u64::from(extra),
            floor_first_address: floor(&first),
            floor_settled: floor(&calls),
            calls,
            calls_to_first_address: first,
            shortfalls,
        })
    }
}

fn validate(spec: &FleetSpec) -> Result<BTreeMap<&str, &SubnetSpec>, PlanError> {
    let mut by_id = BTreeMap::new();
    for s in &spec.subnets {
        if by_id.insert(s.id.as_str(), s).is_some() {
            return Err(PlanError::Input(format!(
                "subnet {} is listed twice: list each subnet once",
                s.id
            )));
        }
        if s.cidr.trunc() != s.cidr {
            return Err(PlanError::Input(format!(
                "subnet {}: {} has host bits set: write the network, {}",
                s.id,
                s.cidr,
                s.cidr.trunc()
            )));
        }
        if s.cidr.prefix_len() > 28 || s.cidr.prefix_len() < 16 {
            return Err(PlanError::Input(format!(
                "subnet {}: {} is not a subnet size EC2 allows (/16 to /28)",
                s.id, s.cidr
            )));
        }
        if s.free() > s.usable() {
            return Err(PlanError::Input(format!(
                "subnet {}: available {} is more than the {} addresses a {} holds (its size less 5 reserved): use the subnet's AvailableIpAddressCount",
                s.id,
                s.free(),
                s.usable(),
                s.cidr
            )));
        }
    }
    if spec.subnets.is_empty() {
        return Err(PlanError::Input(
            "no subnets: list the subnets the fleet may use (id, cidr, zone, available, tags), or read them from EC2 with vpcnet plan --vpc-id".into(),
        ));
    }
    if spec.node_groups.is_empty() {
        return Err(PlanError::Input(
            "no node_groups: list at least one (name, instance_type, count, subnets)".into(),
        ));
    }
    for g in &spec.node_groups {
        if g.subnets.is_empty() {
            return Err(PlanError::Input(format!(
                "node group {}: no subnets: list the subnets its nodes launch in",
                g.name
            )));
        }
        for id in &g.subnets {
            let Some(s) = by_id.get(id.as_str()) else {
                return Err(PlanError::Input(format!(
                    "node group {}: subnet {id} is not among the subnets: add it to subnets",
                    g.name
                )));
            };
            if spec.settings.custom_network {
                match spec.eni_configs.get(&s.zone) {
                    None => {
                        return Err(PlanError::Input(format!(
                            "custom networking is on (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG) but eni_configs has no subnet for zone {} (of node group {}'s subnet {id}): add one",
                            s.zone, g.name
                        )))
                    }
                    Some(pod) if !by_id.contains_key(pod.as_str()) => {
                        return Err(PlanError::Input(format!(
                            "eni_configs: subnet {pod} for zone {} is not among the subnets: add it to subnets",
                            s.zone
                        )))
                    }
                    Some(pod) if by_id[pod.as_str()].zone != s.zone => {
                        return Err(PlanError::Input(format!(
                            "eni_configs: subnet {pod} for zone {} is in zone {} (an ENI attaches only to instances in its subnet's zone): give zone {} a subnet of that zone",
                            s.zone,
                            by_id[pod.as_str()].zone,
                            s.zone
                        )))
                    }
                    _ => {}
                }
            }
        }
    }
    if !spec.settings.custom_network && !spec.eni_configs.is_empty() {
        return Err(PlanError::Input(
            "eni_configs is set but custom networking is off: set AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG: true in settings, or remove eni_configs".into(),
        ));
    }
    Ok(by_id)
}

/// What the fleet draws from each subnet.
#[derive(Debug, Clone)]
struct Ledger {
    draw: BTreeMap<String, Draw>,
}

#[derive(Debug, Clone, Default)]
struct Draw {
    free: u64,
    addresses: u64,
    singles: u64,
    prefixes: u64,
    enis: u64,
    ran_out_at: Option<u64>,
}

impl Ledger {
    fn new(subnets: &[SubnetSpec]) -> Self {
        Ledger {
            draw: subnets
                .iter()
                .map(|s| {
                    let d = Draw {
                        free: u64::from(s.free()),
                        ..Draw::default()
                    };
                    (s.id.clone(), d)
                })
                .collect(),
        }
    }

    fn free(&self, id: &str) -> u64 {
        self.draw[id].free
    }

    /// Takes the ENI's addresses from the first candidate with room; marks every candidate
    /// tried before (or all, when none had room) as run out at node `n`.
    fn take(&mut self, candidates: &[&str], eni: &crate::node::EniFootprint, n: u64) -> bool {
        let need = u64::from(eni.addresses);
        for id in candidates {
            let d = self.draw.get_mut(*id).expect("validated subnet");
            if d.free >= need {
                d.free -= need;
                d.addresses += need;
                d.prefixes += u64::from(eni.prefixes);
                d.singles +=
                    need - u64::from(eni.prefixes) * u64::from(vpcnet_ipam::IPS_PER_PREFIX);
                d.enis += 1;
                return true;
            }
            d.ran_out_at.get_or_insert(n);
        }
        false
    }

    /// Whether some subnet that has received addresses has not run out yet.
    fn open_receivers(&self) -> bool {
        self.draw
            .values()
            .any(|d| d.enis > 0 && d.ran_out_at.is_none())
    }
}

/// The order nodes join: the groups interleaved in proportion to their counts.
struct Order {
    counts: Vec<u64>,
    placed: Vec<u64>,
}

impl Order {
    fn new(spec: &FleetSpec) -> Self {
        // A group of 0 nodes takes no share; an empty fleet scales out evenly.
        let mut counts: Vec<u64> = spec
            .node_groups
            .iter()
            .map(|g| u64::from(g.count))
            .collect();
        if counts.iter().all(|c| *c == 0) {
            counts.iter_mut().for_each(|c| *c = 1);
        }
        Order {
            placed: vec![0; counts.len()],
            counts,
        }
    }

    /// The next node: its group and its index in the group.
    fn next(&mut self) -> (usize, u64) {
        // The group furthest behind its share (placed / count smallest), first on ties.
        let g = (0..self.counts.len())
            .filter(|&g| self.counts[g] > 0)
            .min_by(|&a, &b| {
                (self.placed[a] * self.counts[b]).cmp(&(self.placed[b] * self.counts[a]))
            })
            .expect("at least one group");
        let k = self.placed[g];
        self.placed[g] += 1;
        (g, k)
    }
}

fn order_after(spec: &FleetSpec, n: u64) -> Order {
    let mut o = Order::new(spec);
    for _ in 0..n {
        o.next();
    }
    o
}

/// The scale-out's new nodes (`extra` of them, after the fleet, in the same mix) as the
/// simulator's nodes ([`crate::sim::simulate`]).
pub fn scale_out_nodes(spec: &FleetSpec, extra: u32) -> Result<Vec<SimNode>, PlanError> {
    let by_id = validate(spec)?;
    let s = &spec.settings;
    let total: u64 = spec.node_groups.iter().map(|g| u64::from(g.count)).sum();
    let mut order = order_after(spec, total);
    let mut out = Vec::with_capacity(extra as usize);
    for _ in 0..extra {
        let (g, k) = order.next();
        let group = &spec.node_groups[g];
        let limits = vpcnet_limits::lookup(&group.instance_type)
            .ok_or_else(|| PlanError::UnknownInstanceType(group.instance_type.clone()))?;
        let cfg = s
            .warm_config(limits, s.primary_for_pods(by_id[group.subnet_of(k)]))
            .map_err(|e| PlanError::Group {
                group: group.name.clone(),
                cause: Box::new(e),
            })?;
        out.push(SimNode {
            cfg,
            subnet_discovery: s.subnet_discovery(),
        });
    }
    Ok(out)
}
