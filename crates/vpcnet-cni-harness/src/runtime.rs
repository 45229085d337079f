//! A small CNI runtime that executes a conflist the way libcni does:
//!
//! - ADD runs the plugins in order; each after the first gets `prevResult` = the previous
//!   plugin's result; the last result is cached per (container ID, ifname);
//! - CHECK runs them in order and DEL in reverse order, each with `prevResult` = the cached ADD
//!   result (omitted for DEL when there is none); DEL drops the cache entry;
//! - STATUS and GC (list `cniVersion` 1.1.0 only, else no-ops) run in order; GC passes
//!   `cni.dev/valid-attachments`; a plugin whose VERSION does not list the list's version is
//!   skipped for these two, as it cannot speak them;
//! - every plugin gets the list's `name` and `cniVersion`, and `runtimeConfig` for the
//!   capabilities it declares;
//! - plugins run inside `netns` (the "node") when given, entered between fork and exec, or
//!   through a launcher command (e.g. `nsenter` into a lab node's namespaces) when given.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// One attachment (a container's interface on this network).
#[derive(Debug, Clone, Default)]
pub struct Attachment {
    pub container_id: String,
    /// CNI_NETNS (may be empty for DEL).
    pub netns: String,
    pub ifname: String,
    /// CNI_ARGS pairs, e.g. K8S_POD_NAMESPACE / K8S_POD_NAME.
    pub args: Vec<(String, String)>,
    /// Capability arguments, e.g. `{"portMappings": [...]}`.
    pub capability_args: Value,
}

/// A plugin run.
#[derive(Debug, Clone)]
pub struct Exec {
    pub plugin: String,
    pub command: String,
    pub stdin: Value,
    pub stdout: String,
    pub stderr: String,
    pub status: i32,
    pub elapsed: Duration,
}

impl Exec {
    /// The stdout as JSON (null when empty or not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or(Value::Null)
    }
}

/// A failed plugin run: the spec error JSON it printed.
#[derive(Debug, Clone)]
pub struct PluginError {
    pub exec: Box<Exec>,
}

impl PluginError {
    /// The `code` of the error JSON (0 when there was none).
    pub fn code(&self) -> u64 {
        self.exec.json()["code"].as_u64().unwrap_or(0)
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} exited {}: {} {}",
            self.exec.plugin,
            self.exec.command,
            self.exec.status,
            self.exec.stdout,
            self.exec.stderr
        )
    }
}

impl std::error::Error for PluginError {}

/// The runtime.
pub struct Runtime {
    list: Value,
    cni_path: Vec<PathBuf>,
    netns: Option<PathBuf>,
    cache: Mutex<HashMap<(String, String), Value>>,
    /// Program and arguments that run each plugin (the plugin's path is appended).
    launcher: Vec<std::ffi::OsString>,
    /// Every plugin run, in order (for assertions on what each plugin received).
    pub trace: Mutex<Vec<Exec>>,
}

impl Runtime {
    /// A runtime for `conflist` (JSON text), finding plugins in `cni_path`, running them inside
    /// the namespace file `netns` when given.
    pub fn new(
        conflist: &str,
        cni_path: Vec<PathBuf>,
        netns: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let list: Value = serde_json::from_str(conflist)?;
        anyhow::ensure!(list["plugins"].is_array(), "conflist has no plugins");
        Ok(Runtime {
            list,
            cni_path,
            netns,
            cache: Mutex::new(HashMap::new()),
            launcher: Vec::new(),
            trace: Mutex::new(Vec::new()),
        })
    }

    /// Runs every plugin through `launcher` (program and arguments; the plugin's path is
    /// appended, the CNI environment kept), e.g. `nsenter --mount=… --net=… --`, so plugins
    /// run in namespaces a plain fork cannot enter (a mount namespace, from a threaded
    /// process).
    pub fn with_launcher(mut self, launcher: Vec<std::ffi::OsString>) -> Self {
        self.launcher = launcher;
        self
    }

    fn version(&self) -> &str {
        self.list["cniVersion"].as_str().unwrap_or("")
    }

    fn plugins(&self) -> Vec<Value> {
        self.list["plugins"].as_array().cloned().unwrap_or_default()
    }

    fn find(&self, kind: &str) -> anyhow::Result<PathBuf> {
        self.cni_path
            .iter()
            .map(|d| d.join(kind))
            .find(|p| p.exists())
            .ok_or_else(|| anyhow::anyhow!("plugin {kind} not found in {:?}", self.cni_path))
    }

    /// The stdin for one plugin: its entry with the list's name/version and runtimeConfig.
    fn plugin_conf(&self, entry: &Value, att: Option<&Attachment>) -> Value {
        let mut conf = entry.clone();
        conf["name"] = self.list["name"].clone();
        conf["cniVersion"] = self.list["cniVersion"].clone();
        if let (Some(caps), Some(att)) = (entry.get("capabilities").and_then(Value::as_object), att)
        {
            let mut rc = serde_json::Map::new();
            for (cap, on) in caps {
                if on.as_bool() == Some(true) {
                    if let Some(v) = att.capability_args.get(cap) {
                        rc.insert(cap.clone(), v.clone());
                    }
                }
            }
            if !rc.is_empty() {
                conf["runtimeConfig"] = Value::Object(rc);
            }
        }
        conf
    }

    /// Executes plugin `kind` with `command`, environment from `att`, `stdin` as configuration.
    pub fn exec(
        &self,
        kind: &str,
        command: &str,
        att: Option<&Attachment>,
        stdin: &Value,
    ) -> anyhow::Result<Exec> {
        let bin = self.find(kind)?;
        let ns = self.netns.as_ref().map(File::open).transpose()?;
        let mut cmd = match self.launcher.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        cmd.env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_PATH", std::env::join_paths(&self.cni_path)?)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(a) = att {
            let args: Vec<String> = a.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
            cmd.env("CNI_CONTAINERID", &a.container_id)
                .env("CNI_NETNS", &a.netns)
                .env("CNI_IFNAME", &a.ifname)
                .env("CNI_ARGS", args.join(";"));
        }
        if let Some(ns) = &ns {
            let raw = ns.as_raw_fd();
            // SAFETY: setns is async-signal-safe; the fd stays open until spawn returns.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sched::setns(
                        BorrowedFd::borrow_raw(raw),
                        nix::sched::CloneFlags::CLONE_NEWNET,
                    )
                    .map_err(std::io::Error::from)
                });
            }
        }
        let start = Instant::now();
        let mut child = cmd.spawn()?;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        let elapsed = start.elapsed();
        drop(ns);
        let e = Exec {
            plugin: kind.to_string(),
            command: command.to_string(),
            stdin: stdin.clone(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            status: out.status.code().unwrap_or(-1),
            elapsed,
        };
        self.trace.lock().unwrap().push(e.clone());
        Ok(e)
    }

    fn run(
        &self,
        kind: &str,
        command: &str,
        att: Option<&Attachment>,
        conf: &Value,
    ) -> Result<Exec, PluginError> {
        let e = self
            .exec(kind, command, att, conf)
            .map_err(|err| PluginError {
                exec: Box::new(Exec {
                    plugin: kind.into(),
                    command: command.into(),
                    stdin: conf.clone(),
                    stdout: String::new(),
                    stderr: err.to_string(),
                    status: -1,
                    elapsed: Duration::ZERO,
                }),
            })?;
        if e.status == 0 {
            Ok(e)
        } else {
            Err(PluginError { exec: Box::new(e) })
        }
    }

    fn key(att: &Attachment) -> (String, String) {
        (att.container_id.clone(), att.ifname.clone())
    }

    /// ADD through the chain; returns (and caches) the final result.
    pub fn add(&self, att: &Attachment) -> Result<Value, PluginError> {
        let mut prev: Option<Value> = None;
        for entry in self.plugins() {
            let mut conf = self.plugin_conf(&entry, Some(att));
            if let Some(p) = &prev {
                conf["prevResult"] = p.clone();
            }
            let e = self.run(
                entry["type"].as_str().unwrap_or(""),
                "ADD",
                Some(att),
                &conf,
            )?;
            prev = Some(e.json());
        }
        let result = prev.unwrap_or(Value::Null);
        self.cache
            .lock()
            .unwrap()
            .insert(Self::key(att), result.clone());
        Ok(result)
    }

    /// The cached ADD result of `att`.
    pub fn cached(&self, att: &Attachment) -> Option<Value> {
        self.cache.lock().unwrap().get(&Self::key(att)).cloned()
    }

    /// Replaces the cached ADD result (to simulate a runtime that lost or has a stale cache).
    pub fn set_cached(&self, att: &Attachment, result: Option<Value>) {
        let mut c = self.cache.lock().unwrap();
        match result {
            Some(r) => c.insert(Self::key(att), r),
            None => c.remove(&Self::key(att)),
        };
    }

    /// CHECK through the chain with the cached result as prevResult.
    pub fn check(&self, att: &Attachment) -> Result<(), PluginError> {
        let prev = self.cached(att);
        for entry in self.plugins() {
            let mut conf = self.plugin_conf(&entry, Some(att));
            if let Some(p) = &prev {
                conf["prevResult"] = p.clone();
            }
            self.run(
                entry["type"].as_str().unwrap_or(""),
                "CHECK",
                Some(att),
                &conf,
            )?;
        }
        Ok(())
    }

    /// DEL through the chain in reverse order; forgets the cached result on success.
    pub fn del(&self, att: &Attachment) -> Result<(), PluginError> {
        let prev = self.cached(att);
        for entry in self.plugins().iter().rev() {
            let mut conf = self.plugin_conf(entry, Some(att));
            if let Some(p) = &prev {
                conf["prevResult"] = p.clone();
            }
            self.run(
                entry["type"].as_str().unwrap_or(""),
                "DEL",
                Some(att),
                &conf,
            )?;
        }
        self.set_cached(att, None);
        Ok(())
    }

    fn speaks_list_version(&self, kind: &str) -> bool {
        let conf = json!({ "cniVersion": self.version() });
        self.run(kind, "VERSION", None, &conf)
            .map(|e| {
                e.json()["supportedVersions"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(self.version())))
            })
            .unwrap_or(false)
    }

    /// STATUS through the chain (no-op below cniVersion 1.1.0).
    pub fn status(&self) -> Result<(), PluginError> {
        if self.version() != "1.1.0" {
            return Ok(());
        }
        for entry in self.plugins() {
            let kind = entry["type"].as_str().unwrap_or("").to_string();
            if self.speaks_list_version(&kind) {
                self.run(&kind, "STATUS", None, &self.plugin_conf(&entry, None))?;
            }
        }
        Ok(())
    }

    /// GC through the chain with `valid` as `cni.dev/valid-attachments` (no-op below 1.1.0).
    pub fn gc(&self, valid: &[Attachment]) -> Result<(), PluginError> {
        if self.version() != "1.1.0" {
            return Ok(());
        }
        let list: Vec<Value> = valid
            .iter()
            .map(|a| json!({ "containerID": a.container_id, "ifname": a.ifname }))
            .collect();
        for entry in self.plugins() {
            let kind = entry["type"].as_str().unwrap_or("").to_string();
            if self.speaks_list_version(&kind) {
                let mut conf = self.plugin_conf(&entry, None);
                conf["cni.dev/valid-attachments"] = Value::Array(list.clone());
                self.run(&kind, "GC", None, &conf)?;
            }
        }
        Ok(())
    }
}

/// Directory of a binary path (for CNI_PATH).
pub fn dir_of(bin: &Path) -> PathBuf {
    bin.parent().map(Path::to_path_buf).unwrap_or_default()
}
