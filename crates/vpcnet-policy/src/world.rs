//! The cluster's current state as the compiler needs it: namespaces by name, pods and policies
//! by `(namespace, name)`, in ordered maps so everything read from it comes out in the same
//! order every time.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Namespace, Pod, Policy};

/// Namespaces, pods and policies, changed one object at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct World {
    namespaces: BTreeMap<String, Namespace>,
    pods: BTreeMap<(String, String), Pod>,
    policies: BTreeMap<(String, String), Policy>,
}

fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_owned(), name.to_owned())
}

/// Inserts or replaces; true if the map changed.
fn retain<K: Ord, V>(map: &mut BTreeMap<K, V>, seen: &BTreeSet<K>) -> bool {
    let before = map.len();
    map.retain(|k, _| seen.contains(k));
    map.len() != before
}

fn upsert<K: Ord, V: PartialEq>(map: &mut BTreeMap<K, V>, key: K, value: V) -> bool {
    match map.get(&key) {
        Some(old) if *old == value => false,
        _ => {
            map.insert(key, value);
            true
        }
    }
}

impl World {
    /// An empty world.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a namespace; true if that changed anything.
    pub fn upsert_namespace(&mut self, namespace: Namespace) -> bool {
        upsert(&mut self.namespaces, namespace.name.clone(), namespace)
    }

    /// Removes a namespace (not its pods or policies: they are deleted one by one); true if it
    /// was there.
    pub fn remove_namespace(&mut self, name: &str) -> bool {
        self.namespaces.remove(name).is_some()
    }

    /// Adds or replaces a pod; true if that changed anything.
    pub fn upsert_pod(&mut self, pod: Pod) -> bool {
        upsert(&mut self.pods, key(&pod.namespace, &pod.name), pod)
    }

    /// Removes a pod; true if it was there.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> bool {
        self.pods.remove(&key(namespace, name)).is_some()
    }

    /// Adds or replaces a policy; true if that changed anything.
    pub fn upsert_policy(&mut self, policy: Policy) -> bool {
        upsert(
            &mut self.policies,
            key(&policy.namespace, &policy.name),
            policy,
        )
    }

    /// Removes a policy; true if it was there.
    pub fn remove_policy(&mut self, namespace: &str, name: &str) -> bool {
        self.policies.remove(&key(namespace, name)).is_some()
    }

    /// Keeps only the namespaces named in `seen` (the end of a relist); true if any went.
    pub fn retain_namespaces(&mut self, seen: &BTreeSet<String>) -> bool {
        retain(&mut self.namespaces, seen)
    }

    /// Keeps only the pods whose (namespace, name) is in `seen`; true if any went.
    pub fn retain_pods(&mut self, seen: &BTreeSet<(String, String)>) -> bool {
        retain(&mut self.pods, seen)
    }

    /// Keeps only the policies whose (namespace, name) is in `seen`; true if any went.
    pub fn retain_policies(&mut self, seen: &BTreeSet<(String, String)>) -> bool {
        retain(&mut self.policies, seen)
    }

    /// A namespace by name.
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces.get(name)
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods.get(&key(namespace, name))
    }

    /// A policy by namespace and name.
    pub fn policy(&self, namespace: &str, name: &str) -> Option<&Policy> {
        self.policies.get(&key(namespace, name))
    }

    /// Every namespace, by name.
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> + '_ {
        self.namespaces.values()
    }

    /// Every pod, by namespace then name.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> + '_ {
        self.pods.values()
    }

    /// The pods of one namespace, by name.
    pub fn pods_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        in_namespace(&self.pods, namespace)
    }

    /// Every policy, by namespace then name.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> + '_ {
        self.policies.values()
    }

    /// The policies of one namespace, by name.
    pub fn policies_in<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Policy> + 'a {
        in_namespace(&self.policies, namespace)
    }

    /// How many `(namespaces, pods, policies)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.namespaces.len(), self.pods.len(), self.policies.len())
    }
}

/// The values keyed `(namespace, _)`: one contiguous range of the map.
fn in_namespace<'a, V>(
    map: &'a BTreeMap<(String, String), V>,
    namespace: &'a str,
) -> impl Iterator<Item = &'a V> + 'a {
    map.range((namespace.to_owned(), String::new())..)
        .take_while(move |((ns, _), _)| ns == namespace)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LabelSelector, Labels};

    fn pod(ns: &str, name: &str) -> Pod {
        Pod {
            namespace: ns.into(),
            name: name.into(),
            labels: Labels::new(),
            ips: vec![],
            host_network: false,
            ports: vec![],
        }
    }

    fn policy(ns: &str, name: &str) -> Policy {
        Policy {
            namespace: ns.into(),
            name: name.into(),
            pod_selector: LabelSelector::default(),
            ingress: Some(vec![]),
            egress: None,
        }
    }

    #[test]
    fn retain_keeps_what_a_relist_saw_and_says_whether_anything_went() {
        let mut w = World::default();
        w.upsert_pod(pod("a", "p1"));
        w.upsert_pod(pod("a", "p2"));
        let seen = BTreeSet::from([key("a", "p1")]);
        assert!(w.retain_pods(&seen));
        assert_eq!(
            w.pods().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["p1"]
        );
        assert!(!w.retain_pods(&seen));
    }

    #[test]
    fn upsert_reports_changes_only() {
        let mut w = World::new();
        let ns = Namespace {
            name: "a".into(),
            labels: Labels::new(),
        };
        assert!(w.upsert_namespace(ns.clone()));
        assert!(!w.upsert_namespace(ns.clone()));
        let mut relabelled = ns.clone();
        relabelled.labels.insert("team".into(), "x".into());
        assert!(w.upsert_namespace(relabelled.clone()));
        assert_eq!(w.namespace("a"), Some(&relabelled));

        assert!(w.upsert_pod(pod("a", "p")));
        assert!(!w.upsert_pod(pod("a", "p")));
        let mut moved = pod("a", "p");
        moved.ips.push("10.0.0.1".parse().unwrap());
        assert!(w.upsert_pod(moved));

        assert!(w.upsert_policy(policy("a", "deny")));
        assert!(!w.upsert_policy(policy("a", "deny")));
        assert_eq!(w.counts(), (1, 1, 1));
    }

    #[test]
    fn remove_reports_presence() {
        let mut w = World::new();
        w.upsert_pod(pod("a", "p"));
        w.upsert_policy(policy("a", "deny"));
        w.upsert_namespace(Namespace {
            name: "a".into(),
            labels: Labels::new(),
        });
        assert!(w.remove_pod("a", "p"));
        assert!(!w.remove_pod("a", "p"));
        assert!(w.remove_policy("a", "deny"));
        assert!(!w.remove_policy("a", "deny"));
        assert!(w.remove_namespace("a"));
        assert!(!w.remove_namespace("a"));
        assert_eq!(w.counts(), (0, 0, 0));
    }

    #[test]
    fn per_namespace_iteration_stays_in_its_namespace() {
        let mut w = World::new();
        for (ns, name) in [("a", "x"), ("ab", "y"), ("b", "z"), ("a", "w"), ("", "v")] {
            w.upsert_pod(pod(ns, name));
            w.upsert_policy(policy(ns, name));
        }
        let names: Vec<_> = w.pods_in("a").map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["w", "x"]);
        let names: Vec<_> = w.policies_in("ab").map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["y"]);
        assert_eq!(w.pods_in("c").count(), 0);
        assert_eq!(w.pods_in("").count(), 1);
        let all: Vec<_> = w
            .pods()
            .map(|p| (p.namespace.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(
            all,
            [("", "v"), ("a", "w"), ("a", "x"), ("ab", "y"), ("b", "z")]
        );
        assert!(w.pod("a", "x").is_some());
        assert!(w.pod("a", "y").is_none());
        assert!(w.policy("b", "z").is_some());
    }
}
