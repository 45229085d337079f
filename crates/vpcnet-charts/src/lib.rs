//! vpcnet's Helm charts from Rust: the pinned helm binary (`scripts/build-helm.sh`, found through
//! `VPCNET_HELM_BIN_DIR`), `helm template` and `helm lint` of the charts in `charts/`, and the
//! plain manifests in `deploy/` rendered from them. Light on purpose (no AWS or Kubernetes
//! client crates), so the lab can install with it and its tests build fast.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

/// The variable naming the directory of the helm binary `scripts/build-helm.sh` built.
pub const HELM_BIN_DIR_ENV: &str = "VPCNET_HELM_BIN_DIR";

/// The namespace the `deploy/` manifests are rendered for (the VPC CNI's).
pub const DEPLOY_NAMESPACE: &str = "kube-system";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{HELM_BIN_DIR_ENV} is not set: build helm with scripts/build-helm.sh and export {HELM_BIN_DIR_ENV}=\"$(scripts/build-helm.sh | tail -n 1)\"")]
    HelmNotConfigured,
    #[error("{0} is not an executable helm: rebuild it with scripts/build-helm.sh and point {HELM_BIN_DIR_ENV} at its bin directory")]
    HelmMissing(PathBuf),
    #[error("running {0}: {1}")]
    Spawn(PathBuf, std::io::Error),
    /// helm ran and failed; `stderr` holds its message (a chart's `fail` or schema error).
    #[error("helm {args} failed: {stderr}")]
    Helm { args: String, stderr: String },
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("helm's output is not YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// The charts of the repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    /// `charts/vpcnet`: the node agent (the `aws-node` DaemonSet).
    Vpcnet,
    /// `charts/vpcnet-targets`: the target controller.
    Targets,
}

impl Chart {
    pub const ALL: [Chart; 2] = [Chart::Vpcnet, Chart::Targets];

    /// The chart's name, its directory under `charts/` and its release name in `deploy/`.
    pub fn name(self) -> &'static str {
        match self {
            Chart::Vpcnet => "vpcnet",
            Chart::Targets => "vpcnet-targets",
        }
    }

    pub fn dir(self) -> PathBuf {
        repo_root().join("charts").join(self.name())
    }

    /// Its plain manifest for `kubectl apply`: `deploy/<name>.yaml`.
    pub fn deploy_file(self) -> PathBuf {
        repo_root()
            .join("deploy")
            .join(format!("{}.yaml", self.name()))
    }
}

/// The repository's root (this crate is `crates/vpcnet-charts`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The helm binary: `$VPCNET_HELM_BIN_DIR/helm`.
///
/// Errors: the variable unset, or no executable there; both name the fix.
pub fn helm() -> Result<PathBuf, Error> {
    let dir = std::env::var_os(HELM_BIN_DIR_ENV)
        .filter(|d| !d.is_empty())
        .ok_or(Error::HelmNotConfigured)?;
    let helm = PathBuf::from(dir).join("helm");
    if helm.is_file() {
        Ok(helm)
    } else {
        Err(Error::HelmMissing(helm))
    }
}

/// Runs helm with `args`: its stdout, or [`Error::Helm`] with its stderr.
pub fn run_helm(args: &[String]) -> Result<String, Error> {
    let helm = helm()?;
    let out = Command::new(&helm)
        .args(args)
        .output()
        .map_err(|e| Error::Spawn(helm.clone(), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Helm {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// A `helm template` of one chart.
#[derive(Debug, Clone)]
pub struct Render {
    pub chart: Chart,
    pub release: String,
    pub namespace: String,
    /// `--set KEY=VALUE` entries.
    pub set: Vec<String>,
    /// `--set-json KEY=JSON` entries.
    pub set_json: Vec<String>,
    pub include_crds: bool,
}

impl Render {
    /// The chart with its default values, released under its own name in `kube-system`.
    pub fn new(chart: Chart) -> Render {
        Render {
            chart,
            release: chart.name().to_string(),
            namespace: DEPLOY_NAMESPACE.to_string(),
            set: Vec::new(),
            set_json: Vec::new(),
            include_crds: false,
        }
    }

    pub fn set(mut self, kv: &str) -> Render {
        self.set.push(kv.to_string());
        self
    }

    pub fn set_json(mut self, kv: &str) -> Render {
        self.set_json.push(kv.to_string());
        self
    }

    pub fn with_crds(mut self) -> Render {
        self.include_crds = true;
        self
    }

    /// helm's arguments.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "template".to_string(),
            self.release.clone(),
            self.chart.dir().display().to_string(),
            "--namespace".into(),
            self.namespace.clone(),
        ];
        if self.include_crds {
            a.push("--include-crds".into());
        }
        for s in &self.set {
            a.extend(["--set".into(), s.clone()]);
        }
        for s in &self.set_json {
            a.extend(["--set-json".into(), s.clone()]);
        }
        a
    }

    /// The rendered manifests.
    pub fn run(&self) -> Result<String, Error> {
        run_helm(&self.args())
    }

    /// The rendered manifests as YAML documents.
    pub fn documents(&self) -> Result<Vec<serde_yaml::Value>, Error> {
        Ok(documents(&self.run()?)?)
    }
}

/// `helm lint --strict` of a chart: its output, or [`Error::Helm`].
pub fn lint(chart: Chart) -> Result<String, Error> {
    run_helm(&[
        "lint".into(),
        "--strict".into(),
        chart.dir().display().to_string(),
    ])
}

/// The first line of every file in `deploy/` rendered from a chart.
pub const DEPLOY_HEADER: &str = "# Rendered from charts/";

/// The contents `deploy/<chart>.yaml` must have: a header naming the chart and how to
/// regenerate, then `helm template` of the chart with its default values and its CRDs.
pub fn deploy_manifest(chart: Chart) -> Result<String, Error> {
    let body = Render::new(chart).with_crds().run()?;
    Ok(format!(
        "{DEPLOY_HEADER}{name} with its default values (release {name}, namespace \
         {DEPLOY_NAMESPACE}), CRDs included; do not edit.\n# Regenerate: \
         UPDATE_GOLDEN=1 cargo test -p vpcnet-charts --test deploy (needs {HELM_BIN_DIR_ENV}, \
         scripts/build-helm.sh).\n{body}",
        name = chart.name()
    ))
}

/// The non-empty YAML documents of a multi-document text.
pub fn documents(text: &str) -> Result<Vec<serde_yaml::Value>, serde_yaml::Error> {
    let mut out = Vec::new();
    for d in serde_yaml::Deserializer::from_str(text) {
        let v = serde_yaml::Value::deserialize(d)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The document of `kind` named `name`.
pub fn find<'a>(
    docs: &'a [serde_yaml::Value],
    kind: &str,
    name: &str,
) -> Option<&'a serde_yaml::Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

/// Reads a repository file.
pub fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::Read(path.to_path_buf(), e))
}
