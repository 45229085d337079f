//! Which of Kubernetes' end-to-end tests the lab runs: `lab/e2e/selection.toml`, the one
//! checked-in list of ginkgo focus and skip patterns, every skip with the reason the lab cannot
//! run it, and the subset CI runs. Parsed and checked once; turned into the ginkgo CLI's
//! `--focus` / `--skip` arguments (each pattern a Go regular expression over the test's full
//! text, e.g. `[sig-network] Services should serve a basic endpoint from pods [Conformance]`;
//! ginkgo runs a test that matches any focus and no skip).

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The checked-in selection (`lab/e2e/selection.toml`).
pub const SELECTION: &str = include_str!("../../../../../lab/e2e/selection.toml");

/// One focus pattern and what it selects.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Focus {
    /// Go regular expression over the test's full text.
    pub pattern: String,
    /// What the pattern selects, for the reader.
    pub covers: String,
}

/// One skip pattern and why the lab cannot run what it matches.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Skip {
    /// Go regular expression over the test's full text.
    pub pattern: String,
    /// Why: what the lab cannot provide (or the evidence that the test is wrong for the lab).
    pub reason: String,
    /// Only for runs with this CNI ([`crate::state::NodeCni::name`], e.g. `vpc-cni`); every
    /// run when absent.
    #[serde(default)]
    pub cni: Option<String>,
}

/// The subset `.ci/run` runs (within about ten minutes).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CiSubset {
    /// Focus patterns of the subset (the selection's skips still apply).
    pub focus: Vec<Focus>,
    /// How many tests the subset must run: fewer means a pattern stopped matching (a renamed
    /// test), which fails CI instead of passing with nothing run.
    pub tests: usize,
}

/// The selection file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// Run what matches any of these...
    pub focus: Vec<Focus>,
    /// ...and none of these.
    #[serde(default)]
    pub skip: Vec<Skip>,
    /// The CI subset.
    pub ci: CiSubset,
}

/// Which part of the selection to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every focus pattern of the selection.
    All,
    /// The CI subset's focus patterns.
    Ci,
    /// These patterns instead of the selection's focus (`--focus`); its skips still apply.
    Focus(Vec<String>),
}

fn check_pattern(p: &str, what: &str) -> Result<()> {
    if p.trim().is_empty() {
        bail!("{what}: the pattern is empty");
    }
    // Go's RE2 and Rust's regex share the syntax the selection uses; a pattern one of them
    // refuses is a typo to fix here, not a test that silently never runs.
    regex::Regex::new(p).with_context(|| format!("{what}: {p:?} is not a regular expression"))?;
    Ok(())
}

impl Selection {
    /// Parses and checks `text`: every pattern a regular expression, every skip with a reason,
    /// the CI subset non-empty.
    pub fn parse(text: &str) -> Result<Selection> {
        let s: Selection = toml::from_str(text).context("parsing the conformance selection")?;
        if s.focus.is_empty() {
            bail!("the selection has no [[focus]]: nothing would run");
        }
        for (i, f) in s.focus.iter().chain(&s.ci.focus).enumerate() {
            check_pattern(&f.pattern, &format!("focus #{}", i + 1))?;
            if f.covers.trim().is_empty() {
                bail!("focus {:?}: say what it covers", f.pattern);
            }
        }
        for k in &s.skip {
            check_pattern(&k.pattern, "skip")?;
            if let Some(c) = &k.cni {
                c.parse::<crate::state::NodeCni>()
                    .map_err(|e| anyhow::anyhow!("skip {:?}: cni = {c:?}: {e}", k.pattern))?;
            }
            if k.reason.trim().is_empty() {
                bail!(
                    "skip {:?} has no reason: every skip says what the lab cannot provide",
                    k.pattern
                );
            }
        }
        if s.ci.focus.is_empty() || s.ci.tests == 0 {
            bail!("the CI subset is empty: give [ci] focus patterns and the number of tests");
        }
        Ok(s)
    }

    /// The checked-in selection.
    pub fn checked_in() -> Result<Selection> {
        Selection::parse(SELECTION)
    }

    /// The selection for runs with the CNI named `cni`: the skips of every run and those of
    /// that CNI.
    pub fn for_cni(&self, cni: &str) -> Selection {
        let mut s = self.clone();
        s.skip.retain(|k| k.cni.as_deref().is_none_or(|c| c == cni));
        s
    }

    /// The focus patterns of `scope`.
    pub fn focus(&self, scope: &Scope) -> Vec<String> {
        match scope {
            Scope::All => self.focus.iter().map(|f| f.pattern.clone()).collect(),
            Scope::Ci => self.ci.focus.iter().map(|f| f.pattern.clone()).collect(),
            Scope::Focus(p) => p.clone(),
        }
    }

    /// The ginkgo CLI's arguments for `scope`: one `--focus` per focus pattern, one `--skip`
    /// per skip.
    pub fn ginkgo_args(&self, scope: &Scope) -> Vec<String> {
        let mut args = Vec::new();
        for f in self.focus(scope) {
            args.push(format!("--focus={f}"));
        }
        for k in &self.skip {
            args.push(format!("--skip={}", k.pattern));
        }
        args
    }

    /// The reason of the first skip whose pattern matches `test` (its full text).
    pub fn skip_reason(&self, test: &str) -> Option<&str> {
        self.skip.iter().find_map(|k| {
            regex::Regex::new(&k.pattern)
                .ok()?
                .is_match(test)
                .then_some(k.reason.as_str())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
[[focus]]
pattern = '\[sig-network\].*\[Conformance\]'
covers = "conformance"

[[skip]]
pattern = 'LoadBalancer'
reason = "no cloud load balancer"

[ci]
tests = 2
[[ci.focus]]
pattern = 'HostPort'
covers = "host ports"
"#;

    #[test]
    fn the_checked_in_selection_parses_and_every_skip_has_a_reason() {
        let s = Selection::checked_in().unwrap();
        assert!(s.focus.iter().any(|f| f.pattern.contains("Conformance")));
        assert!(s.skip.iter().all(|k| !k.reason.trim().is_empty()));
        assert!(s.ci.tests > 0);
    }

    #[test]
    fn ginkgo_arguments_follow_the_scope() {
        let s = Selection::parse(SMALL).unwrap();
        assert_eq!(
            s.ginkgo_args(&Scope::All),
            [
                r"--focus=\[sig-network\].*\[Conformance\]",
                "--skip=LoadBalancer"
            ]
        );
        assert_eq!(
            s.ginkgo_args(&Scope::Ci),
            ["--focus=HostPort", "--skip=LoadBalancer"]
        );
        assert_eq!(
            s.ginkgo_args(&Scope::Focus(vec!["DNS".into()])),
            ["--focus=DNS", "--skip=LoadBalancer"]
        );
        assert_eq!(
            s.skip_reason("[sig-network] Services should be able to create LoadBalancer"),
            Some("no cloud load balancer")
        );
        assert_eq!(s.skip_reason("[sig-network] HostPort works"), None);
    }

    #[test]
    fn a_skip_for_one_cni_applies_to_that_cni_only() {
        let text = format!(
            "{SMALL}\n[[skip]]\npattern = 'Netpol'\ncni = \"vpc-cni\"\nreason = \"no node agent\"\n"
        );
        let s = Selection::parse(&text).unwrap();
        let netpol = "[sig-network] Netpol NetworkPolicy should deny";
        assert_eq!(
            s.for_cni("vpc-cni").skip_reason(netpol),
            Some("no node agent")
        );
        assert_eq!(s.for_cni("vpcnet").skip_reason(netpol), None);
        assert!(s
            .for_cni("vpcnet")
            .ginkgo_args(&Scope::All)
            .iter()
            .all(|a| a != "--skip=Netpol"));
        let bad = text.replace("vpc-cni", "calico");
        let e = Selection::parse(&bad).unwrap_err();
        assert!(format!("{e:#}").contains("calico"), "{e:#}");
    }

    #[test]
    fn a_skip_without_a_reason_or_a_bad_pattern_is_refused() {
        let e = Selection::parse(&SMALL.replace("no cloud load balancer", " "))
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no reason"), "{e}");
        let e = format!(
            "{:#}",
            Selection::parse(&SMALL.replace("'HostPort'", "'Host(Port'")).unwrap_err()
        );
        assert!(e.contains("not a regular expression"), "{e}");
        let e = format!(
            "{:#}",
            Selection::parse(&SMALL.replace("reason =", "why =")).unwrap_err()
        );
        assert!(e.contains("unknown field"), "{e}");
    }
}
