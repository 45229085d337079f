//! Kubernetes' own network end-to-end tests against the lab ([`Lab::conformance`]): the suite of
//! the pinned release (`e2e.test`, built unmodified by `scripts/build-e2e.sh`) run by the ginkgo
//! CLI from the control-plane host, with the admin kubeconfig, on a lab installed as EKS is
//! (vpcnet's chart, kube-proxy's DaemonSet, CoreDNS), the tests' images built by the lab
//! ([`images`]) and imported into every node's containerd under the names the suite asks for,
//! so no test pulls from a registry. What runs is `lab/e2e/selection.toml` ([`selection`]);
//! the results are ginkgo's JSON and JUnit reports ([`report`]).

pub mod images;
pub mod report;
pub mod selection;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::containerd;
use crate::kube::addons::KubeProxyMode;
use crate::lab::{progress, Lab, UpOptions};
use crate::spawn::Place;
use crate::state::{AgentInstall, NodeCni};
use report::RunReport;
use selection::{Scope, Selection};

/// How one run of the suite goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `scripts/build-e2e.sh`'s directory ([`crate::kube::bins::locate_e2e`]).
    pub e2e_bin_dir: PathBuf,
    /// What to run of the selection.
    pub scope: Scope,
    /// Ginkgo processes running tests at once (tests marked `[Serial]` run alone at the end).
    pub parallel: usize,
    /// Where the reports go: per [`Phase`] ginkgo's JSON and JUnit reports, and [`LOG`].
    pub out_dir: PathBuf,
    /// The whole run's limit (ginkgo's `--timeout`).
    pub timeout: Duration,
}

/// One of the two ginkgo runs a conformance run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every selected test but the disruptive ones, [`RunOptions::parallel`] at once (ginkgo
    /// runs the `[Serial]` ones alone at the end).
    Parallel,
    /// The selected tests labelled `Disruptive` (they delete kube-proxy's pods, ...), one at a
    /// time after the rest, as Kubernetes' own CI runs them apart.
    Disruptive,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Parallel => "parallel",
            Phase::Disruptive => "disruptive",
        }
    }

    /// ginkgo's label filter of the phase.
    fn label_filter(self) -> &'static str {
        match self {
            Phase::Parallel => "!Disruptive",
            Phase::Disruptive => "Disruptive",
        }
    }

    /// The phase's ginkgo JSON report in [`RunOptions::out_dir`].
    pub fn json_report(self) -> String {
        format!("report-{}.json", self.name())
    }

    /// The phase's JUnit XML report in [`RunOptions::out_dir`].
    pub fn junit_report(self) -> String {
        format!("junit-{}.xml", self.name())
    }
}

/// Ginkgo's own output of both phases, in [`RunOptions::out_dir`].
pub const LOG: &str = "ginkgo.log";

/// The lab's options for a conformance run with `cni` on every node: `nodes` nodes (the suite's
/// inter-node tests need two, one Services test three), installed [as on EKS](as_on_eks).
pub fn up_options(name: &str, cni: NodeCni, nodes: usize) -> UpOptions {
    let mut o = UpOptions::new(name);
    o.nodes = nodes;
    as_on_eks(&mut o, cni);
    o
}

/// Sets `o` to install the cluster as on EKS with `cni` on every node: vpcnet by its chart with
/// network policy enforced (the VPC CNI, until its chart runs in the lab, as its lab process),
/// kube-proxy's DaemonSet and CoreDNS.
pub fn as_on_eks(o: &mut UpOptions, cni: NodeCni) {
    o.cni = vec![("*".into(), cni)];
    o.agent_install = AgentInstall::Chart;
    o.kube_proxy_mode = KubeProxyMode::DaemonSet;
    o.coredns = true;
    if cni == NodeCni::Vpcnet {
        // The chart's enableNetworkPolicy=true: the Netpol tests judge its enforcement.
        o.agent_env
            .push(("VPCNET_ENABLE_NETWORK_POLICY".into(), "true".into()));
    }
}

/// The suite against a lab ([`Lab::conformance`]).
#[derive(Debug, Clone, Copy)]
pub struct Conformance<'a> {
    lab: &'a Lab,
}

impl Lab {
    /// Kubernetes' end-to-end suite against this lab.
    pub fn conformance(&self) -> Conformance<'_> {
        Conformance { lab: self }
    }
}

impl Conformance<'_> {
    /// Builds the suite's images (from `scripts/build-e2e.sh`'s `e2e_bin_dir`, CoreDNS from
    /// `scripts/build-coredns.sh`'s `coredns_bin_dir`, Debian's programs) into the lab directory
    /// and imports them into every node's containerd (CRI namespace).
    pub fn import_images(&self, e2e_bin_dir: &Path, coredns_bin_dir: &Path) -> Result<()> {
        progress(
            "building the e2e test images (agnhost, pause, busybox, jessie-dnsutils, nginx, \
             regression-issue-74839)",
        );
        let src = images::Sources::host(e2e_bin_dir, &coredns_bin_dir.join("coredns"));
        let dir = self.lab.dir.join("e2e-images");
        std::fs::create_dir_all(&dir)?;
        let archives = images::write_all(&src, &dir)?;
        for node in self.lab.state()?.nodes {
            progress(&format!(
                "node {}: importing {} e2e test images",
                node.name,
                archives.len()
            ));
            for a in &archives {
                containerd::import(&node, containerd::CRI_NAMESPACE, &a.path)
                    .with_context(|| format!("importing {} on {}", a.reference, node.name))?;
            }
        }
        Ok(())
    }

    /// The ginkgo command of a run: the CLI with the selection's focus and skips, then, after
    /// `--`, the suite's own flags (the lab's admin kubeconfig and kubectl, no cloud provider).
    pub fn command(
        &self,
        opts: &RunOptions,
        selection: &Selection,
        phase: Phase,
    ) -> Result<Command> {
        let kubectl = self.lab.kube().kubectl()?;
        let e2e = &opts.e2e_bin_dir;
        let mut c = Command::new(e2e.join("ginkgo"));
        c.arg("run")
            .arg(format!(
                "--procs={}",
                match phase {
                    Phase::Parallel => opts.parallel.max(1),
                    Phase::Disruptive => 1,
                }
            ))
            .arg(format!("--label-filter={}", phase.label_filter()))
            .arg(format!("--timeout={}s", opts.timeout.as_secs()))
            .arg("--no-color")
            .arg("--silence-skips")
            .arg("--poll-progress-after=120s")
            .arg(format!("--output-dir={}", opts.out_dir.display()))
            .arg(format!("--json-report={}", phase.json_report()))
            .arg(format!("--junit-report={}", phase.junit_report()))
            .args(selection.ginkgo_args(&opts.scope))
            .arg(e2e.join("e2e.test"))
            .arg("--")
            .arg(format!("--kubeconfig={}", kubectl.kubeconfig.display()))
            .arg(format!("--kubectl-path={}", kubectl.bin.display()))
            // No cloud: tests that need one (load balancers, SSH to nodes) skip themselves.
            .arg("--provider=skeleton")
            .arg(format!("--e2e-output-dir={}", opts.out_dir.display()))
            // The suite's own count of nodes: tests that need two or three nodes skip
            // themselves unless it says so ("Requires at least 2 nodes (not -1)").
            .arg(format!("--num-nodes={}", self.lab.state()?.nodes.len()))
            .arg("--allowed-not-ready-nodes=0")
            .arg("--system-pods-startup-timeout=5m")
            .env("HOME", &opts.out_dir)
            .current_dir(&opts.out_dir);
        Place::netns(&kubectl.netns).apply(&mut c)?;
        Ok(c)
    }

    /// Runs the selection: the parallel phase, then the disruptive one ([`Phase`]); ginkgo's
    /// output goes to stderr and [`LOG`]. Returns both phases' reports as one. A run that failed
    /// tests is a report with failures, not an error; an error is a phase that wrote no report.
    pub fn run(&self, opts: &RunOptions, selection: &Selection) -> Result<RunReport> {
        std::fs::create_dir_all(&opts.out_dir)
            .with_context(|| format!("creating {}", opts.out_dir.display()))?;
        let mut log = std::fs::File::create(opts.out_dir.join(LOG))?;
        for phase in [Phase::Parallel, Phase::Disruptive] {
            self.run_phase(opts, selection, phase, &mut log)?;
        }
        read_reports(&opts.out_dir, selection, &opts.scope)
    }

    fn run_phase(
        &self,
        opts: &RunOptions,
        selection: &Selection,
        phase: Phase,
        log: &mut std::fs::File,
    ) -> Result<()> {
        let json = opts.out_dir.join(phase.json_report());
        let _ = std::fs::remove_file(&json);
        let mut c = self.command(opts, selection, phase)?;
        progress(&format!(
            "running Kubernetes' e2e suite, {} tests ({} process(es)); ginkgo's output also in {}",
            phase.name(),
            match phase {
                Phase::Parallel => opts.parallel.max(1),
                Phase::Disruptive => 1,
            },
            opts.out_dir.join(LOG).display()
        ));
        let mut child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", opts.e2e_bin_dir.join("ginkgo").display()))?;
        let stderr = child.stderr.take().expect("piped");
        let errors = std::thread::spawn(move || -> Vec<String> {
            BufReader::new(stderr)
                .lines()
                .map_while(std::result::Result::ok)
                .inspect(|l| eprintln!("{l}"))
                .collect()
        });
        for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
            let line = line?;
            eprintln!("{line}");
            writeln!(log, "{line}")?;
        }
        let status = child.wait()?;
        for line in errors.join().unwrap_or_default() {
            writeln!(log, "{line}")?;
        }
        if !json.is_file() {
            bail!(
                "the e2e suite wrote no report ({status}); its output is in {}",
                opts.out_dir.join(LOG).display()
            );
        }
        Ok(())
    }
}

/// Reads the reports a run left in `out_dir` (both phases, or those that ran) as one.
pub fn read_reports(out_dir: &Path, selection: &Selection, scope: &Scope) -> Result<RunReport> {
    let mut report: Option<RunReport> = None;
    for phase in [Phase::Parallel, Phase::Disruptive] {
        let json = out_dir.join(phase.json_report());
        if !json.is_file() {
            continue;
        }
        let r = RunReport::read(&json, selection, &selection.focus(scope))?;
        report = Some(match report {
            Some(all) => all.merge(r),
            None => r,
        });
    }
    report.with_context(|| format!("no ginkgo report in {}", out_dir.display()))
}

/// Brings a lab up with `up`, imports the test images, runs the suite and tears the lab down
/// (also on failure). Returns the run's report.
pub fn run_on_new_lab(
    up: &UpOptions,
    run: &RunOptions,
    selection: &Selection,
) -> Result<RunReport> {
    let coredns = crate::kube::bins::locate_coredns(up.coredns_bin_dir.as_deref())?;
    crate::lab::with_lab(up, |lab| {
        lab.conformance()
            .import_images(&run.e2e_bin_dir, &coredns)?;
        lab.conformance().run(run, selection)
    })
}
