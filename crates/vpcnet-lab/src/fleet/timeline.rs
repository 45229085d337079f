//! What a fleet's nodes went through, as the observer saw it (pure: the observer passes in the
//! time and what it saw): for each node, when its agent first served the plugin, when it first
//! had a pod address (a secondary IP or prefix on an attached ENI), and when its ENIs or
//! addresses last changed (its warm pool full, once nothing changes any more).

use std::collections::BTreeMap;

/// One node's view in the cloud at one moment: attached ENIs and pod addresses on them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holdings {
    pub enis: usize,
    /// Secondary IPs plus 16 per /28 prefix, on attached ENIs.
    pub addresses: usize,
}

/// One node's timeline (milliseconds since the fleet started).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeTimeline {
    /// When the agent first served the plugin (vpcnet: its conflist written; the VPC CNI:
    /// ipamd answering).
    pub serving_ms: Option<u64>,
    /// When the node first had a pod address.
    pub first_address_ms: Option<u64>,
    /// When its holdings last changed (`None`: never changed from nothing).
    pub last_change_ms: Option<u64>,
    /// Its holdings at the last observation.
    pub holdings: Holdings,
}

impl NodeTimeline {
    /// When the node could first serve a pod: its agent serves and it has an address.
    pub fn first_pod_ms(&self) -> Option<u64> {
        Some(self.serving_ms?.max(self.first_address_ms?))
    }
}

/// Every node's timeline, by node name.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    pub nodes: BTreeMap<String, NodeTimeline>,
}

impl Timeline {
    /// A timeline of `names`, none serving, nothing held.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Timeline {
            nodes: names
                .into_iter()
                .map(|n| (n.to_string(), NodeTimeline::default()))
                .collect(),
        }
    }

    /// What the cloud held for each node at `at_ms` (nodes missing hold nothing).
    pub fn observe_cloud(&mut self, at_ms: u64, held: &BTreeMap<String, Holdings>) {
        for (name, t) in &mut self.nodes {
            let h = held.get(name).copied().unwrap_or_default();
            if h != t.holdings {
                t.holdings = h;
                t.last_change_ms = Some(at_ms);
            }
            if h.addresses > 0 && t.first_address_ms.is_none() {
                t.first_address_ms = Some(at_ms);
            }
        }
    }

    /// Node `name`'s agent serves at `at_ms` (the first call counts).
    pub fn observe_serving(&mut self, name: &str, at_ms: u64) {
        if let Some(t) = self.nodes.get_mut(name) {
            t.serving_ms.get_or_insert(at_ms);
        }
    }

    /// Nodes whose agent does not serve yet.
    pub fn not_serving(&self) -> impl Iterator<Item = &str> {
        self.nodes
            .iter()
            .filter(|(_, t)| t.serving_ms.is_none())
            .map(|(n, _)| n.as_str())
    }

    /// Nodes that cannot serve a pod yet (not serving, or no address).
    pub fn waiting(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(_, t)| t.first_pod_ms().is_none())
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// Whether the fleet has settled at `now_ms`: every node can serve a pod and no node's
    /// holdings changed for `quiet_ms`.
    pub fn settled(&self, now_ms: u64, quiet_ms: u64) -> bool {
        self.waiting().is_empty()
            && self
                .nodes
                .values()
                .all(|t| now_ms.saturating_sub(t.last_change_ms.unwrap_or(0)) >= quiet_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(v: &[(&str, usize, usize)]) -> BTreeMap<String, Holdings> {
        v.iter()
            .map(|(n, e, a)| {
                (
                    n.to_string(),
                    Holdings {
                        enis: *e,
                        addresses: *a,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn first_pod_needs_both_an_address_and_a_serving_agent() {
        let mut t = Timeline::new(["n1", "n2"]);
        t.observe_cloud(100, &held(&[("n1", 1, 9)]));
        assert_eq!(t.nodes["n1"].first_address_ms, Some(100));
        assert_eq!(t.nodes["n1"].first_pod_ms(), None, "agent not serving yet");
        t.observe_serving("n1", 250);
        t.observe_serving("n1", 900);
        assert_eq!(t.nodes["n1"].first_pod_ms(), Some(250));
        // Serving before any address: the address decides.
        t.observe_serving("n2", 50);
        t.observe_cloud(400, &held(&[("n1", 1, 9), ("n2", 1, 9)]));
        assert_eq!(t.nodes["n2"].first_pod_ms(), Some(400));
        assert!(t.waiting().is_empty());
    }

    #[test]
    fn settles_only_after_a_quiet_window_with_every_node_served() {
        let mut t = Timeline::new(["n1", "n2"]);
        t.observe_serving("n1", 0);
        t.observe_serving("n2", 0);
        t.observe_cloud(100, &held(&[("n1", 1, 9)]));
        assert!(!t.settled(60_000, 10_000), "n2 has no address");
        t.observe_cloud(1_000, &held(&[("n1", 2, 18), ("n2", 1, 9)]));
        assert!(!t.settled(10_999, 10_000));
        assert!(t.settled(11_000, 10_000));
        // A change restarts the window; the last change is the warm pool's fill time.
        t.observe_cloud(12_000, &held(&[("n1", 2, 18), ("n2", 2, 18)]));
        assert!(!t.settled(21_999, 10_000));
        assert_eq!(t.nodes["n2"].last_change_ms, Some(12_000));
        assert_eq!(t.nodes["n1"].last_change_ms, Some(1_000));
        // A node losing everything is a change too (and keeps its first address time).
        t.observe_cloud(13_000, &held(&[("n1", 2, 18)]));
        assert_eq!(t.nodes["n2"].holdings, Holdings::default());
        assert_eq!(t.nodes["n2"].first_address_ms, Some(1_000));
    }
}
