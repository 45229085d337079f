//! Running the real `kubectl` against the lab's API server, from inside the control-plane
//! namespace (the only place besides the VPC that reaches it), with the admin kubeconfig.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

use crate::spawn::Place;

/// kubectl bound to one lab cluster.
#[derive(Debug, Clone)]
pub struct Kubectl {
    /// The kubectl binary.
    pub bin: PathBuf,
    /// Admin kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    /// Network namespace kubectl runs in (the control plane's).
    pub netns: String,
}

impl Kubectl {
    /// A `kubectl --kubeconfig <admin> args...` command placed in the control-plane namespace.
    pub fn command(&self, args: &[&str]) -> Result<Command> {
        let mut c = Command::new(&self.bin);
        c.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        Place::netns(&self.netns).apply(&mut c)?;
        Ok(c)
    }

    /// Runs kubectl with `stdin` (if any) and returns its whole output whatever the status.
    pub fn output(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        let mut c = self.command(args)?;
        c.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = c
            .spawn()
            .with_context(|| format!("running {}", self.bin.display()))?;
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(text.as_bytes())?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Runs kubectl and returns stdout; a non-zero exit is an error quoting the command and
    /// kubectl's stderr.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.run_with(args, None)
    }

    fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let out = self.output(args, stdin)?;
        if !out.status.success() {
            bail!(
                "`kubectl {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON, several documents allowed).
    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.run_with(&["apply", "-f", "-"], Some(manifest))?;
        Ok(())
    }

    /// `kubectl <args> -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut v = args.to_vec();
        v.extend(["-o", "json"]);
        let text = self.run(&v)?;
        serde_json::from_str(&text).with_context(|| format!("parsing `kubectl {}`", v.join(" ")))
    }
}
