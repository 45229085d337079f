//! The results of one run of the suite, read from ginkgo's JSON report (`--json-report`; the
//! JUnit XML beside it is for CI systems), and the tables `vpcnet lab conformance` prints: one
//! run (test, result, duration) or several CNIs side by side.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use super::selection::Selection;

/// What happened to one test.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Ran and passed.
    Passed,
    /// Ran and failed (also panicked, timed out, interrupted, aborted): the first line of the
    /// failure.
    Failed(String),
    /// Skipped by the test itself at run time (what the cluster lacks, in the framework's words).
    SkippedByTest(String),
    /// Matched a skip of the selection: its reason.
    SkippedBySelection(String),
}

impl Outcome {
    /// `passed`, `FAILED`, `skipped`.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed(_) => "FAILED",
            Outcome::SkippedByTest(_) | Outcome::SkippedBySelection(_) => "skipped",
        }
    }
}

/// One test of the selection and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestResult {
    /// The test's full text, as focus and skip patterns see it.
    pub name: String,
    /// Its outcome.
    pub outcome: Outcome,
    /// How long it ran.
    pub duration: Duration,
}

/// One run: the selected tests in order of name, and whether the suite itself (its set-up and
/// tear-down nodes) failed.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// Every test the selection names (run, skipped by the test, or skipped by the selection).
    pub tests: Vec<TestResult>,
    /// Failures outside tests: the suite's `BeforeSuite` / `AfterSuite` nodes (then no test
    /// ran).
    pub suite_failures: Vec<String>,
    /// Wall time of the whole run.
    pub duration: Duration,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SuiteJson {
    #[serde(default)]
    run_time: u64,
    #[serde(default)]
    suite_config: Option<SuiteConfigJson>,
    #[serde(default)]
    spec_reports: Vec<SpecJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SuiteConfigJson {
    // What the run was given with `--focus`.
    #[serde(default)]
    focus_strings: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SpecJson {
    // `null` for the suite's own nodes.
    #[serde(default)]
    container_hierarchy_texts: Option<Vec<String>>,
    #[serde(default)]
    leaf_node_type: String,
    #[serde(default)]
    leaf_node_text: String,
    state: String,
    #[serde(default)]
    run_time: u64,
    #[serde(default)]
    failure: Option<FailureJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct FailureJson {
    #[serde(default)]
    message: String,
}

/// The failure of a selected test ginkgo did not run (filtered out of this run, or stopped
/// before it).
pub const DID_NOT_RUN: &str = "did not run";

fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

impl RunReport {
    /// Reads ginkgo's JSON report `text`. Tests that neither ran nor were skipped by the test are
    /// kept only when a focus pattern of the run matches them: those are the selection's skips
    /// (with their reason); the rest are the suite's other thousands of tests. The run's focus
    /// patterns are the ones the report records (ginkgo's `SuiteConfig.FocusStrings`), else
    /// `focus`.
    pub fn parse(text: &str, selection: &Selection, focus: &[String]) -> Result<RunReport> {
        let suites: Vec<SuiteJson> =
            serde_json::from_str(text).context("parsing ginkgo's JSON report")?;
        let mut r = RunReport::default();
        for suite in suites {
            let recorded = suite
                .suite_config
                .as_ref()
                .and_then(|c| c.focus_strings.clone())
                .filter(|f| !f.is_empty());
            let focus: Vec<regex::Regex> = recorded
                .as_deref()
                .unwrap_or(focus)
                .iter()
                .map(|f| regex::Regex::new(f))
                .collect::<std::result::Result<_, _>>()?;
            r.duration += Duration::from_nanos(suite.run_time);
            for spec in suite.spec_reports {
                let message = spec
                    .failure
                    .as_ref()
                    .map(|f| first_line(&f.message))
                    .unwrap_or_default();
                if spec.leaf_node_type != "It" {
                    if !matches!(spec.state.as_str(), "passed" | "skipped" | "pending") {
                        r.suite_failures
                            .push(format!("{} {}: {message}", spec.leaf_node_type, spec.state));
                    }
                    continue;
                }
                let mut parts = spec.container_hierarchy_texts.clone().unwrap_or_default();
                parts.push(spec.leaf_node_text.clone());
                let name = parts
                    .iter()
                    .map(|p| p.trim())
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                let outcome = match spec.state.as_str() {
                    "passed" => Outcome::Passed,
                    "skipped" | "pending" if !message.is_empty() => Outcome::SkippedByTest(message),
                    "skipped" | "pending" => {
                        if !focus.iter().any(|f| f.is_match(&name)) {
                            continue;
                        }
                        match selection.skip_reason(&name) {
                            Some(why) => Outcome::SkippedBySelection(why.to_string()),
                            // Focused, not skipped, not run: ginkgo stopped before it (an earlier
                            // failure with --fail-fast, or an interrupt).
                            None => Outcome::Failed(DID_NOT_RUN.into()),
                        }
                    }
                    other => Outcome::Failed(format!("{other}: {message}")),
                };
                r.tests.push(TestResult {
                    name,
                    outcome,
                    duration: Duration::from_nanos(spec.run_time),
                });
            }
        }
        r.tests.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(r)
    }

    /// Reads the report file at `path`.
    pub fn read(path: &Path, selection: &Selection, focus: &[String]) -> Result<RunReport> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading ginkgo's report {}", path.display()))?;
        RunReport::parse(&text, selection, focus)
    }

    /// One report of two runs of the same selection that each ran part of it (ginkgo's label
    /// filter splits the parallel tests from the disruptive ones): a test the one run left out
    /// ("did not run") takes the other run's outcome.
    pub fn merge(mut self, other: RunReport) -> RunReport {
        let left_out = |t: &TestResult| t.outcome == Outcome::Failed(DID_NOT_RUN.into());
        for t in other.tests {
            match self.tests.iter_mut().find(|m| m.name == t.name) {
                Some(m) if left_out(m) => *m = t,
                Some(_) => {}
                None => self.tests.push(t),
            }
        }
        self.tests.sort_by(|a, b| a.name.cmp(&b.name));
        self.suite_failures.extend(other.suite_failures);
        self.duration += other.duration;
        self
    }

    /// Number of tests with each result word.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut c = BTreeMap::from([("passed", 0), ("FAILED", 0), ("skipped", 0)]);
        for t in &self.tests {
            *c.entry(t.outcome.word()).or_default() += 1;
        }
        c
    }

    /// Tests that failed, and the suite's own failures.
    pub fn failures(&self) -> Vec<String> {
        let mut f = self.suite_failures.clone();
        f.extend(self.tests.iter().filter_map(|t| match &t.outcome {
            Outcome::Failed(m) => Some(format!("{}: {m}", t.name)),
            _ => None,
        }));
        f
    }

    /// `passed 41, FAILED 0, skipped 3 in 612 s`.
    pub fn summary(&self) -> String {
        let c = self.counts();
        format!(
            "passed {}, FAILED {}, skipped {} in {} s",
            c["passed"],
            c["FAILED"],
            c["skipped"],
            self.duration.as_secs()
        )
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The table of one run: test, result, duration; then each skip's reason.
pub fn table(report: &RunReport) -> String {
    side_by_side(&[("result", report)])
}

/// One table for several runs of the same selection (`(column title, run)`, e.g. per CNI):
/// a row per test with each run's result and duration, a totals row, then the reasons of
/// skips and failures under footnote numbers.
pub fn side_by_side(runs: &[(&str, &RunReport)]) -> String {
    let mut names: Vec<&str> = runs
        .iter()
        .flat_map(|(_, r)| r.tests.iter().map(|t| t.name.as_str()))
        .collect();
    names.sort();
    names.dedup();
    let mut notes: Vec<String> = Vec::new();
    let mut note = |text: String| -> usize {
        match notes.iter().position(|n| *n == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text);
                notes.len()
            }
        }
    };
    let mut rows = vec![{
        let mut h = vec!["TEST".to_string()];
        for (title, _) in runs {
            h.push(title.to_string());
            h.push("TIME".into());
        }
        h
    }];
    for name in &names {
        let mut row = vec![name.to_string()];
        for (_, r) in runs {
            match r.tests.iter().find(|t| t.name == *name) {
                Some(t) => {
                    let word = t.outcome.word();
                    let cell = match &t.outcome {
                        Outcome::Passed => word.to_string(),
                        Outcome::Failed(m) => format!("{word} [{}]", note(m.clone())),
                        Outcome::SkippedByTest(m) => {
                            format!("{word} [{}]", note(format!("skipped by the test: {m}")))
                        }
                        Outcome::SkippedBySelection(m) => {
                            format!(
                                "{word} [{}]",
                                note(format!("skipped by the selection: {m}"))
                            )
                        }
                    };
                    row.push(cell);
                    row.push(seconds(t.duration));
                }
                None => {
                    row.push("-".into());
                    row.push("-".into());
                }
            }
        }
        rows.push(row);
    }
    let mut total = vec![format!("{} tests", names.len())];
    for (_, r) in runs {
        let c = r.counts();
        total.push(format!(
            "{} passed, {} failed, {} skipped",
            c["passed"], c["FAILED"], c["skipped"]
        ));
        total.push(format!("{} s", r.duration.as_secs()));
    }
    rows.push(total);
    let mut out = vpcnet_introspection::text::table(&rows);
    for (i, n) in notes.iter().enumerate() {
        out.push_str(&format!("[{}] {n}\n", i + 1));
    }
    for (title, r) in runs {
        for f in &r.suite_failures {
            out.push_str(&format!("{title}: suite failure: {f}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection() -> Selection {
        Selection::parse(
            r#"
[[focus]]
pattern = 'sig-network'
covers = "network"
[[skip]]
pattern = 'LoadBalancer'
reason = "no cloud load balancer"
[ci]
tests = 1
[[ci.focus]]
pattern = 'HostPort'
covers = "host ports"
"#,
        )
        .unwrap()
    }

    /// The shape of ginkgo v2's JSON report (one suite, its set-up node and four tests).
    const REPORT: &str = r#"[{"SuitePath":"/e2e","RunTime":5000000000,"SpecReports":[
      {"ContainerHierarchyTexts":null,"LeafNodeType":"SynchronizedBeforeSuite","State":"passed","RunTime":1},
      {"ContainerHierarchyTexts":["[sig-network] HostPort"],"LeafNodeType":"It",
       "LeafNodeText":"validates hostPort [Conformance]","State":"passed","RunTime":2500000000},
      {"ContainerHierarchyTexts":["[sig-network] Services"],"LeafNodeType":"It",
       "LeafNodeText":"should be able to create LoadBalancer","State":"skipped"},
      {"ContainerHierarchyTexts":["[sig-network] DNS"],"LeafNodeType":"It",
       "LeafNodeText":"should work","State":"failed","RunTime":1000000000,
       "Failure":{"Message":"\n  timed out waiting\nmore"}},
      {"ContainerHierarchyTexts":["[sig-network] Networking"],"LeafNodeType":"It",
       "LeafNodeText":"needs ssh","State":"skipped","Failure":{"Message":"No SSH Key"}},
      {"ContainerHierarchyTexts":["[sig-storage] Volumes"],"LeafNodeType":"It",
       "LeafNodeText":"not selected","State":"skipped"}
    ]}]"#;

    #[test]
    fn a_report_gives_each_selected_test_its_outcome() {
        let r = RunReport::parse(REPORT, &selection(), &["sig-network".into()]).unwrap();
        let by_name: BTreeMap<_, _> = r
            .tests
            .iter()
            .map(|t| (t.name.as_str(), &t.outcome))
            .collect();
        assert_eq!(by_name.len(), 4, "{by_name:?}");
        assert_eq!(
            by_name["[sig-network] HostPort validates hostPort [Conformance]"],
            &Outcome::Passed
        );
        assert_eq!(
            by_name["[sig-network] Services should be able to create LoadBalancer"],
            &Outcome::SkippedBySelection("no cloud load balancer".into())
        );
        assert_eq!(
            by_name["[sig-network] DNS should work"],
            &Outcome::Failed("failed: timed out waiting".into())
        );
        assert_eq!(
            by_name["[sig-network] Networking needs ssh"],
            &Outcome::SkippedByTest("No SSH Key".into())
        );
        assert_eq!(r.summary(), "passed 1, FAILED 1, skipped 2 in 5 s");
        assert_eq!(r.failures().len(), 1);
    }

    #[test]
    fn the_focus_a_report_records_wins_over_the_one_given() {
        let text = r#"[{"RunTime":1,"SuiteConfig":{"FocusStrings":["HostPort"]},"SpecReports":[
          {"ContainerHierarchyTexts":["[sig-network] HostPort"],"LeafNodeType":"It","LeafNodeText":"x","State":"passed"},
          {"ContainerHierarchyTexts":["[sig-network] DNS"],"LeafNodeType":"It","LeafNodeText":"y","State":"skipped"}]}]"#;
        // Given the whole selection's focus, the DNS test would count as "did not run".
        let r = RunReport::parse(text, &selection(), &["sig-network".into()]).unwrap();
        assert_eq!(r.tests.len(), 1, "{:?}", r.tests);
        assert!(r.failures().is_empty());
    }

    #[test]
    fn a_failed_suite_set_up_is_a_failure_even_with_no_failed_test() {
        let text = r#"[{"RunTime":1,"SpecReports":[
          {"LeafNodeType":"SynchronizedBeforeSuite","State":"failed","Failure":{"Message":"nodes not ready"}},
          {"ContainerHierarchyTexts":["[sig-network] HostPort"],"LeafNodeType":"It","LeafNodeText":"x","State":"skipped"}]}]"#;
        let r = RunReport::parse(text, &selection(), &["HostPort".into()]).unwrap();
        assert_eq!(
            r.failures(),
            [
                "SynchronizedBeforeSuite failed: nodes not ready",
                "[sig-network] HostPort x: did not run"
            ]
        );
    }

    /// A report of the two tests `[sig-network] A x` and `[sig-network] B y [Disruptive]` in
    /// the states `a` and `b`, run in `seconds`.
    fn two_tests(a: &str, b: &str, seconds: u64) -> RunReport {
        let text = format!(
            r#"[{{"RunTime":{},"SpecReports":[
          {{"ContainerHierarchyTexts":["[sig-network] A"],"LeafNodeType":"It","LeafNodeText":"x","State":"{a}"}},
          {{"ContainerHierarchyTexts":["[sig-network] B"],"LeafNodeType":"It","LeafNodeText":"y [Disruptive]","State":"{b}"}}]}}]"#,
            seconds * 1_000_000_000
        );
        RunReport::parse(&text, &selection(), &["sig-network".to_string()]).unwrap()
    }

    #[test]
    fn merging_takes_a_left_out_test_from_the_run_that_ran_it() {
        let parallel = two_tests("passed", "skipped", 2);
        let disruptive = two_tests("skipped", "passed", 1);
        assert_eq!(
            parallel.failures().len(),
            1,
            "alone, the left-out test counts as failed"
        );
        let both = parallel.merge(disruptive);
        assert!(both.failures().is_empty(), "{:?}", both.failures());
        assert_eq!(both.summary(), "passed 2, FAILED 0, skipped 0 in 3 s");
    }

    #[test]
    fn side_by_side_has_a_column_per_run_and_numbered_reasons() {
        let r = RunReport::parse(REPORT, &selection(), &["sig-network".into()]).unwrap();
        let t = side_by_side(&[("vpcnet", &r), ("vpc-cni", &r)]);
        assert!(t.contains("vpcnet"), "{t}");
        assert!(t.contains("vpc-cni"), "{t}");
        assert!(
            t.contains("[3] skipped by the selection: no cloud load balancer"),
            "{t}"
        );
        assert!(t.contains("1 passed, 1 failed, 2 skipped"), "{t}");
        assert_eq!(
            t.matches("timed out waiting").count(),
            1,
            "one note per reason: {t}"
        );
    }
}
