//! Kubernetes' own network end-to-end tests (the pinned release's `e2e.test`, unmodified) on a
//! lab of two nodes installed as on EKS: the CI subset of `lab/e2e/selection.toml` (pod to pod
//! within and across nodes over HTTP and UDP, pod to a Service, host ports, NetworkPolicy with vpcnet enforcing). The whole selection,
//! and the VPC CNI beside vpcnet, run with scripts/conformance.sh (docs/conformance.md). Needs
//! root, the workspace binaries, the Kubernetes binaries, Helm, CoreDNS and the suite
//! (scripts/build-e2e.sh); a missing one fails the test naming the script that builds it.

use std::time::Duration;

use vpcnet_lab::kube::bins;
use vpcnet_lab::kube::conformance::report::{table, Outcome};
use vpcnet_lab::kube::conformance::selection::{Scope, Selection};
use vpcnet_lab::kube::conformance::{self, RunOptions};
use vpcnet_lab::state::NodeCni;

mod common;
use common::*;

/// Every test of the pinned suite, by its full text (`e2e.test --list-tests`).
fn suite_tests(e2e: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new(e2e.join("e2e.test"))
        .arg("--list-tests")
        .output()
        .unwrap();
    assert!(out.status.success(), "e2e.test --list-tests: {out:?}");
    // Lines are `    <file>:<line>: <full text>`.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().split_once(": ").map(|(_, t)| t.to_string()))
        .collect()
}

/// The selection against the pinned suite's own list: every focus and skip pattern matches a
/// test (a pattern that matches nothing is a typo or a renamed test), and the CI subset is the
/// number of tests the file says. Prints how many tests the selection runs and skips.
#[test]
fn every_pattern_of_the_selection_matches_tests_of_the_pinned_suite() {
    let e2e = bins::locate_e2e(None).unwrap_or_else(|e| panic!("{e:#}"));
    let s = Selection::checked_in().unwrap().for_cni("vpcnet");
    let tests = suite_tests(&e2e);
    assert!(tests.len() > 5000, "the suite lists {} tests", tests.len());
    let re = |p: &str| regex::Regex::new(p).unwrap();
    let matching = |p: &str| {
        let r = re(p);
        tests.iter().filter(|t| r.is_match(t)).count()
    };
    for p in s
        .focus
        .iter()
        .chain(&s.ci.focus)
        .map(|f| &f.pattern)
        .chain(s.skip.iter().map(|k| &k.pattern))
    {
        assert!(matching(p) > 0, "{p:?} matches no test of the pinned suite");
    }
    let focused = |focus: &[String]| -> Vec<&String> {
        let focus: Vec<regex::Regex> = focus.iter().map(|f| re(f)).collect();
        tests
            .iter()
            .filter(|t| focus.iter().any(|f| f.is_match(t)))
            .collect()
    };
    let selected = |focus: &[String]| -> Vec<&String> {
        focused(focus)
            .into_iter()
            .filter(|t| s.skip_reason(t).is_none())
            .collect()
    };
    let all = selected(&s.focus(&Scope::All));
    let ci = selected(&s.focus(&Scope::Ci));
    assert_eq!(ci.len(), s.ci.tests, "the CI subset: {ci:#?}");
    let focused = focused(&s.focus(&Scope::All)).len();
    eprintln!(
        "the selection focuses {focused} tests of {}: {} run, {} skipped by it; CI runs {}",
        tests.len(),
        all.len(),
        focused - all.len(),
        ci.len()
    );
}

#[test]
fn the_ci_subset_of_kubernetes_network_conformance_passes_with_vpcnet() {
    let e2e = bins::locate_e2e(None).unwrap_or_else(|e| panic!("{e:#}"));
    let selection = Selection::checked_in().unwrap().for_cni("vpcnet");
    let out = tempfile::tempdir().unwrap();
    with_kube_lab(
        "conformance",
        |o| {
            o.nodes = 2;
            conformance::as_on_eks(o, NodeCni::Vpcnet);
        },
        |lab| {
            // Each node has its instance's hostname (host-network pods answer it; the suite's
            // internalTrafficPolicy and DNS HostNetwork tests compare it with the Node's name).
            for n in lab.state().unwrap().nodes {
                let uts = vpcnet_lab::machine::uts_file(&n.mntns);
                let name = sh(
                    "nsenter",
                    &[&format!("--uts={}", uts.display()), "hostname"],
                );
                assert_eq!(name.trim(), n.k8s_name, "hostname of {}", n.name);
            }
            let coredns = bins::locate_coredns(None).unwrap_or_else(|e| panic!("{e:#}"));
            lab.conformance().import_images(&e2e, &coredns).unwrap();
            let opts = RunOptions {
                e2e_bin_dir: e2e.clone(),
                scope: Scope::Ci,
                parallel: 2,
                out_dir: out.path().to_path_buf(),
                timeout: Duration::from_secs(15 * 60),
            };
            let report = lab.conformance().run(&opts, &selection).unwrap();
            eprintln!("{}", table(&report));
            assert!(
                report.failures().is_empty(),
                "failures: {:#?}\n(ginkgo's output: {})",
                report.failures(),
                std::fs::read_to_string(out.path().join(conformance::LOG)).unwrap_or_default()
            );
            let passed = report
                .tests
                .iter()
                .filter(|t| t.outcome == Outcome::Passed)
                .count();
            assert_eq!(
                passed, selection.ci.tests,
                "the CI subset should run and pass {} tests (a pattern that stopped matching \
                 runs fewer): {:#?}",
                selection.ci.tests, report.tests
            );
        },
    );
}
