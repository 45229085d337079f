//! `vpcnet lab conformance`: Kubernetes' own network end-to-end tests on a lab installed as on
//! EKS, per CNI, one table with a column per CNI (the `vpcnet-lab` crate's
//! `kube::conformance` does the work; this is the command line).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use vpcnet_lab::kube::bins;
use vpcnet_lab::kube::conformance::report::{side_by_side, RunReport};
use vpcnet_lab::kube::conformance::selection::{Scope, Selection};
use vpcnet_lab::kube::conformance::{self, RunOptions};
use vpcnet_lab::lab::{progress, Lab};
use vpcnet_lab::state::NodeCni;

#[derive(ClapArgs)]
pub struct Args {
    /// Lab name (a lab is brought up, used and torn down per CNI).
    #[arg(long, default_value = "conformance")]
    name: String,
    /// CNI of the lab's nodes: `vpcnet` (installed by its chart) or `vpc-cni` (AWS's VPC CNI,
    /// unmodified); repeat for one run per CNI and a column per CNI in the table.
    #[arg(long = "cni", value_name = "CNI", default_value = "vpcnet")]
    cni: Vec<NodeCni>,
    /// Run the tests matching this Go regular expression instead of the selection's focus
    /// (lab/e2e/selection.toml; its skips still apply); repeatable.
    #[arg(long, value_name = "REGEX", conflicts_with = "ci")]
    focus: Vec<String>,
    /// Run the CI subset of the selection (what `.ci/run` runs).
    #[arg(long)]
    ci: bool,
    /// Ginkgo processes running tests at once.
    #[arg(long, default_value_t = 2)]
    parallel: usize,
    /// Lab nodes (the inter-node tests need two, one Services test three).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// EC2 instance type of the nodes.
    #[arg(long, default_value = "m5.large")]
    instance_type: String,
    /// Directory for the reports: per CNI `<CNI>/report-parallel.json`,
    /// `report-disruptive.json`, the same as JUnit XML (`junit-*.xml`) and `ginkgo.log`; and
    /// the table (`table.txt`).
    #[arg(long, default_value = "conformance-results")]
    out: PathBuf,
    /// Limit of one run, in minutes.
    #[arg(long, default_value_t = 180)]
    timeout_minutes: u64,
    /// Run on the lab `--name` that is already up (`vpcnet lab up --name NAME --agent-install
    /// chart --kube-proxy daemonset --coredns --nodes 3`, as this command would build it) and
    /// leave it up; the CNI is the lab's.
    #[arg(long, conflicts_with = "cni")]
    existing: bool,
    /// Run nothing: print the table of the reports an earlier run left in `--out`, one
    /// column per `--cni` (each report knows what it ran; `table.txt` is not rewritten).
    #[arg(long, conflicts_with = "existing")]
    from_reports: bool,
    /// Directory of the suite (default: the newest build of scripts/build-e2e.sh).
    #[arg(long, env = bins::E2E_BIN_DIR_ENV, value_name = "DIR")]
    e2e_bin_dir: Option<PathBuf>,
    /// Directory of the Kubernetes binaries (default: the newest build of scripts/build-k8s.sh).
    #[arg(long, env = bins::BIN_DIR_ENV, value_name = "DIR")]
    k8s_bin_dir: Option<PathBuf>,
    /// Directory of CoreDNS (default: the newest build of scripts/build-coredns.sh).
    #[arg(long, env = bins::COREDNS_BIN_DIR_ENV, value_name = "DIR")]
    coredns_bin_dir: Option<PathBuf>,
}

pub fn run(a: &Args) -> Result<()> {
    let selection = Selection::checked_in()?;
    let scope = if a.ci {
        Scope::Ci
    } else if !a.focus.is_empty() {
        Scope::Focus(a.focus.clone())
    } else {
        Scope::All
    };
    let mut cnis: Vec<NodeCni> = Vec::new();
    for c in &a.cni {
        if !cnis.contains(c) {
            cnis.push(*c);
        }
    }
    let out = std::path::absolute(&a.out).context("--out")?;
    if a.from_reports {
        let runs = cnis
            .iter()
            .map(|c| {
                let r = conformance::read_reports(
                    &out.join(c.name()),
                    &selection.for_cni(c.name()),
                    &scope,
                )?;
                Ok((c.name().to_string(), r))
            })
            .collect::<Result<Vec<_>>>()?;
        return show(&runs, None);
    }
    let e2e = bins::locate_e2e(a.e2e_bin_dir.as_deref())?;
    let run_opts = |dir: &str| RunOptions {
        e2e_bin_dir: e2e.clone(),
        scope: scope.clone(),
        parallel: a.parallel,
        out_dir: out.join(dir),
        timeout: Duration::from_secs(a.timeout_minutes * 60),
    };
    let mut runs: Vec<(String, RunReport)> = Vec::new();
    if a.existing {
        let lab = Lab::open(&a.name)?;
        let cni = lab
            .state()?
            .nodes
            .first()
            .map(|n| n.cni)
            .context("the lab has no node")?;
        let coredns = bins::locate_coredns(a.coredns_bin_dir.as_deref())?;
        lab.conformance().import_images(&e2e, &coredns)?;
        runs.push((
            cni.name().to_string(),
            lab.conformance()
                .run(&run_opts(cni.name()), &selection.for_cni(cni.name()))?,
        ));
    } else {
        for cni in cnis {
            let mut up = conformance::up_options(&a.name, cni, a.nodes);
            up.instance_type = a.instance_type.clone();
            up.k8s_bin_dir = a.k8s_bin_dir.clone();
            up.coredns_bin_dir = a.coredns_bin_dir.clone();
            progress(&format!(
                "conformance with {} on {} node(s)",
                cni.name(),
                a.nodes
            ));
            let report = conformance::run_on_new_lab(
                &up,
                &run_opts(cni.name()),
                &selection.for_cni(cni.name()),
            )?;
            progress(&format!("{}: {}", cni.name(), report.summary()));
            runs.push((cni.name().to_string(), report));
        }
    }
    show(&runs, Some(&out))
}

/// Prints the table of `runs` (and writes it to `<out>/table.txt` when given); errors when a
/// test failed.
fn show(runs: &[(String, RunReport)], out: Option<&std::path::Path>) -> Result<()> {
    let columns: Vec<(&str, &RunReport)> = runs.iter().map(|(n, r)| (n.as_str(), r)).collect();
    let table = side_by_side(&columns);
    println!();
    print!("{table}");
    if let Some(out) = out {
        std::fs::write(out.join("table.txt"), &table)?;
        println!("(reports and this table in {})", out.display());
    }
    let failed: Vec<String> = runs
        .iter()
        .flat_map(|(n, r)| r.failures().into_iter().map(move |f| format!("{n}: {f}")))
        .collect();
    if !failed.is_empty() {
        bail!("{} failure(s):\n{}", failed.len(), failed.join("\n"));
    }
    Ok(())
}
