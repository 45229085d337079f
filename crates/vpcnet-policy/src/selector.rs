//! Label selectors: [`LabelSelector::matches`] with the Kubernetes semantics. Every
//! `matchLabels` pair must be present and every `matchExpressions` requirement must hold; the
//! empty selector matches every object.

use crate::model::{LabelSelector, Labels, Requirement};

impl LabelSelector {
    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// The selector that matches every object (`{}`).
    pub fn everything() -> Self {
        Self::default()
    }
}

impl Requirement {
    /// Whether one `matchExpressions` entry holds. `NotIn` holds when the key is absent.
    pub fn matches(&self, labels: &Labels) -> bool {
        match self {
            Requirement::In { key, values } => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn { key, values } => {
                labels.get(key).is_none_or(|v| !values.contains(v))
            }
            Requirement::Exists { key } => labels.contains_key(key),
            Requirement::DoesNotExist { key } => !labels.contains_key(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn values(vs: &[&str]) -> BTreeSet<String> {
        vs.iter().map(|v| v.to_string()).collect()
    }

    fn with(exprs: Vec<Requirement>) -> LabelSelector {
        LabelSelector {
            match_labels: Labels::new(),
            match_expressions: exprs,
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::everything().matches(&Labels::new()));
        assert!(LabelSelector::everything().matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn match_labels_needs_every_pair() {
        let s = LabelSelector {
            match_labels: labels(&[("app", "web"), ("tier", "front")]),
            match_expressions: vec![],
        };
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(!s.matches(&Labels::new()));
    }

    #[test]
    fn in_needs_the_key_with_one_of_the_values() {
        let s = with(vec![Requirement::In {
            key: "env".into(),
            values: values(&["prod", "stage"]),
        }]);
        assert!(s.matches(&labels(&[("env", "prod")])));
        assert!(s.matches(&labels(&[("env", "stage")])));
        assert!(!s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&Labels::new()));
    }

    #[test]
    fn not_in_matches_an_absent_key() {
        let s = with(vec![Requirement::NotIn {
            key: "env".into(),
            values: values(&["prod"]),
        }]);
        assert!(s.matches(&Labels::new()));
        assert!(s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&labels(&[("env", "prod")])));
    }

    #[test]
    fn exists_and_does_not_exist_look_at_the_key_only() {
        let exists = with(vec![Requirement::Exists { key: "env".into() }]);
        let absent = with(vec![Requirement::DoesNotExist { key: "env".into() }]);
        let empty_value = labels(&[("env", "")]);
        assert!(exists.matches(&empty_value));
        assert!(!absent.matches(&empty_value));
        assert!(!exists.matches(&Labels::new()));
        assert!(absent.matches(&Labels::new()));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![
                Requirement::Exists { key: "tier".into() },
                Requirement::NotIn {
                    key: "env".into(),
                    values: values(&["prod"]),
                },
            ],
        };
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "a")])));
    }

    #[test]
    fn in_with_no_values_matches_nothing() {
        let s = with(vec![Requirement::In {
            key: "env".into(),
            values: BTreeSet::new(),
        }]);
        assert!(!s.matches(&labels(&[("env", "")])));
        assert!(!s.matches(&Labels::new()));
    }
}
