//! Which kubelet unit a node runs, and how vpcnet's settings reach kubelet through it.
//!
//! The EKS AMIs ship their own kubelet unit, and what it does (credential provider flags, the
//! pause image dependency, the iptables `FORWARD` policy, whatever a later AMI adds) must
//! survive bootstrap. So, as bootstrap.sh and nodeadm do, vpcnet-bootstrap keeps the AMI's
//! unit whenever there is one and carries its own settings only through what that unit reads:
//!
//! - **AL2 layout**: the AMI ships `/etc/eks/containerd/kubelet-containerd.service` for
//!   bootstrap.sh to copy to `/etc/systemd/system/kubelet.service` (with
//!   `sandbox-image.service`, which that unit requires), and the unit reads
//!   `$KUBELET_ARGS $KUBELET_EXTRA_ARGS`: vpcnet copies both units as bootstrap.sh does and
//!   writes the drop-ins. An installed unit that reads `$KUBELET_ARGS` is kept the same way.
//! - **AL2023 layout**: `/etc/systemd/system/kubelet.service` runs
//!   `kubelet $NODEADM_KUBELET_ARGS` from `EnvironmentFile=/etc/eks/kubelet/environment`,
//!   which nodeadm writes: vpcnet keeps the unit and writes that file, as nodeadm does.
//! - **No AMI unit** (or only one a vpcnet-bootstrap wrote): vpcnet's own unit
//!   ([`vpcnet_unit`]), which does what the AMI's unit does: runtime endpoint, credential
//!   provider flags when the provider is on the node, the `sandbox-image.service` dependency
//!   when that service exists, `FORWARD` policy ACCEPT before kubelet starts.
//!
//! An installed unit of another shape is refused: vpcnet cannot tell how to reach kubelet
//! through it without losing what it does.

use std::fmt;

use crate::error::BootstrapError;
use crate::systemd::{self, Service};

/// Where the AL2 AMI keeps its containerd kubelet unit for bootstrap.sh to copy.
pub const AMI_CONTAINERD_UNIT: &str = "/etc/eks/containerd/kubelet-containerd.service";
/// Where the AL2 AMI keeps the unit that pulls the pause image, copied with it.
pub const AMI_SANDBOX_IMAGE_UNIT: &str = "/etc/eks/containerd/sandbox-image.service";
/// Where bootstrap.sh installs [`AMI_SANDBOX_IMAGE_UNIT`].
pub const SANDBOX_IMAGE_UNIT_PATH: &str = "/etc/systemd/system/sandbox-image.service";
/// The environment file the AL2023 AMI's kubelet unit reads (nodeadm writes it).
pub const NODEADM_ENVIRONMENT_PATH: &str = "/etc/eks/kubelet/environment";
/// The variable of [`NODEADM_ENVIRONMENT_PATH`] that holds kubelet's flags.
pub const NODEADM_ARGS_VAR: &str = "NODEADM_KUBELET_ARGS";
/// First line of every unit vpcnet-bootstrap writes; a unit with it is not the AMI's.
pub const VPCNET_MARKER: &str = "# Written by vpcnet-bootstrap";

/// The kubelet unit files found on the node (read by [`crate::facts::gather`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUnits {
    /// [`AMI_CONTAINERD_UNIT`], when present.
    pub ami_containerd_unit: Option<String>,
    /// [`AMI_SANDBOX_IMAGE_UNIT`], when present.
    pub ami_sandbox_image_unit: Option<String>,
    /// The `kubelet.service` systemd would load (first of `/etc`, `/run`, `/usr/lib`
    /// `systemd/system`): path and text.
    pub installed: Option<(String, String)>,
    /// A `sandbox-image.service` is installed in a unit directory.
    pub sandbox_image_installed: bool,
}

/// How kubelet's flags reach it through a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The unit reads `$KUBELET_ARGS` and `$KUBELET_EXTRA_ARGS` (drop-ins set them).
    KubeletArgs,
    /// The unit reads `$NODEADM_KUBELET_ARGS` from [`NODEADM_ENVIRONMENT_PATH`].
    NodeadmEnvironment,
}

/// The unit vpcnet-bootstrap installs or keeps, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitChoice {
    /// The AL2 AMI's containerd unit, copied from [`AMI_CONTAINERD_UNIT`] as bootstrap.sh
    /// does; `sandbox_image` is the AMI's sandbox-image unit, copied with it.
    AmiCopied {
        text: String,
        sandbox_image: Option<String>,
        exec_start: Vec<String>,
    },
    /// An AMI unit already installed at `path`, kept as it is.
    AmiKept {
        path: String,
        layout: Layout,
        exec_start: Vec<String>,
    },
    /// vpcnet's own unit; `replaces` is the path of an earlier vpcnet unit, if any.
    Vpcnet { replaces: Option<String> },
}

impl UnitChoice {
    /// How vpcnet's flags reach kubelet.
    pub fn layout(&self) -> Layout {
        match self {
            UnitChoice::AmiKept { layout, .. } => *layout,
            _ => Layout::KubeletArgs,
        }
    }

    /// Whether the chosen unit's own command line passes `flag` (`--flag` or `--flag=...`);
    /// vpcnet's unit passes what [`vpcnet_unit`] writes, decided by the caller.
    pub fn unit_passes(&self, flag: &str) -> bool {
        let words = match self {
            UnitChoice::AmiCopied { exec_start, .. } | UnitChoice::AmiKept { exec_start, .. } => {
                exec_start
            }
            UnitChoice::Vpcnet { .. } => return false,
        };
        let with_eq = format!("{flag}=");
        words.iter().any(|w| w == flag || w.starts_with(&with_eq))
    }
}

impl fmt::Display for UnitChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitChoice::AmiCopied { sandbox_image, .. } => write!(
                f,
                "the EKS AMI's ({AMI_CONTAINERD_UNIT} installed as {}{}, as bootstrap.sh does); vpcnet's settings in its drop-ins",
                systemd::KUBELET_UNIT_PATH,
                if sandbox_image.is_some() {
                    format!(", with {AMI_SANDBOX_IMAGE_UNIT} as {SANDBOX_IMAGE_UNIT_PATH}")
                } else {
                    String::new()
                }
            ),
            UnitChoice::AmiKept {
                path,
                layout: Layout::KubeletArgs,
                ..
            } => write!(
                f,
                "the AMI's {path}, kept (it reads $KUBELET_ARGS $KUBELET_EXTRA_ARGS); vpcnet's settings in its drop-ins"
            ),
            UnitChoice::AmiKept {
                path,
                layout: Layout::NodeadmEnvironment,
                ..
            } => write!(
                f,
                "the AMI's {path}, kept (it runs kubelet ${NODEADM_ARGS_VAR}); vpcnet's settings in {NODEADM_ENVIRONMENT_PATH}, as nodeadm writes it"
            ),
            UnitChoice::Vpcnet { replaces: None } => write!(
                f,
                "vpcnet's ({}), because the node has no AMI kubelet unit ({AMI_CONTAINERD_UNIT} or a kubelet.service)",
                systemd::KUBELET_UNIT_PATH
            ),
            UnitChoice::Vpcnet { replaces: Some(p) } => write!(
                f,
                "vpcnet's ({}), because the node has no AMI kubelet unit ({p} was written by vpcnet-bootstrap)",
                systemd::KUBELET_UNIT_PATH
            ),
        }
    }
}

/// Chooses the unit (module docs).
///
/// Errors ([`BootstrapError::Unit`]): an AMI unit that cannot be parsed, or whose command line
/// reads neither `$KUBELET_ARGS` nor `$NODEADM_KUBELET_ARGS` from
/// [`NODEADM_ENVIRONMENT_PATH`].
pub fn choose(units: &NodeUnits) -> Result<UnitChoice, BootstrapError> {
    if let Some(text) = &units.ami_containerd_unit {
        let (layout, exec_start) = layout_of(AMI_CONTAINERD_UNIT, text)?;
        if layout != Layout::KubeletArgs {
            return Err(unsupported(AMI_CONTAINERD_UNIT));
        }
        return Ok(UnitChoice::AmiCopied {
            text: text.clone(),
            sandbox_image: units.ami_sandbox_image_unit.clone(),
            exec_start,
        });
    }
    match &units.installed {
        Some((path, text)) if text.starts_with(VPCNET_MARKER) => Ok(UnitChoice::Vpcnet {
            replaces: Some(path.clone()),
        }),
        Some((path, text)) => {
            let (layout, exec_start) = layout_of(path, text)?;
            Ok(UnitChoice::AmiKept {
                path: path.clone(),
                layout,
                exec_start,
            })
        }
        None => Ok(UnitChoice::Vpcnet { replaces: None }),
    }
}

/// The layout of the unit at `path` and its `ExecStart=` words.
fn layout_of(path: &str, text: &str) -> Result<(Layout, Vec<String>), BootstrapError> {
    let s = Service::parse(&[(path.to_string(), text.to_string())], "kubelet.service")?;
    let reads = |var: &str| s.exec_start.iter().any(|w| w == &format!("${var}"));
    let layout = if reads("KUBELET_ARGS") {
        Layout::KubeletArgs
    } else if reads(NODEADM_ARGS_VAR)
        && s.environment_files
            .iter()
            .any(|(p, _)| p == NODEADM_ENVIRONMENT_PATH)
    {
        Layout::NodeadmEnvironment
    } else {
        return Err(unsupported(path));
    };
    Ok((layout, s.exec_start))
}

fn unsupported(path: &str) -> BootstrapError {
    BootstrapError::Unit {
        path: path.into(),
        problem: format!(
            "this kubelet unit reads neither $KUBELET_ARGS (EKS AL2 AMI, bootstrap.sh) nor ${NODEADM_ARGS_VAR} from {NODEADM_ENVIRONMENT_PATH} (AL2023 AMI, nodeadm), so vpcnet-bootstrap cannot pass kubelet its settings through it without losing what it does. Fix: make its ExecStart= end with $KUBELET_ARGS $KUBELET_EXTRA_ARGS, or remove it (and any drop-ins) to let vpcnet-bootstrap install its own unit"
        ),
    }
}

/// What vpcnet's own unit includes besides the fixed flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VpcnetUnitOptions {
    /// Pass `--image-credential-provider-config` and `--image-credential-provider-bin-dir`.
    pub credential_provider: bool,
    /// Order after, and require, `sandbox-image.service`.
    pub sandbox_image: bool,
}

/// vpcnet's kubelet unit for containerd nodes without an AMI unit: kubelet's configuration
/// file, kubeconfig and runtime endpoint, the credential provider flags when the provider is
/// on the node, then `$KUBELET_ARGS $KUBELET_EXTRA_ARGS` from the drop-ins (the cloud provider
/// among them, so the flag is passed exactly once). `FORWARD` policy ACCEPT before start, as
/// the AMIs' units do (`-`: a node without iptables still starts kubelet).
pub fn vpcnet_unit(o: VpcnetUnitOptions) -> String {
    let deps = if o.sandbox_image {
        "containerd.service sandbox-image.service"
    } else {
        "containerd.service"
    };
    let credential_flags = if o.credential_provider {
        format!(
            "    --image-credential-provider-config={} \\\n    --image-credential-provider-bin-dir={} \\\n",
            crate::credential_provider::CONFIG_PATH,
            crate::credential_provider::BIN_DIR
        )
    } else {
        String::new()
    };
    format!(
        "{VPCNET_MARKER}; rerunning it rewrites this file.
[Unit]
Description=Kubernetes kubelet (configured by vpcnet-bootstrap)
Documentation=https://kubernetes.io/docs/reference/command-line-tools-reference/kubelet/
Wants=network-online.target
After=network-online.target {deps}
Requires={deps}

[Service]
Slice=runtime.slice
ExecStartPre=-/sbin/iptables -P FORWARD ACCEPT -w 5
ExecStart=/usr/bin/kubelet \\
    --config={config} \\
    --kubeconfig={kubeconfig} \\
    --container-runtime-endpoint={endpoint} \\
{credential_flags}    $KUBELET_ARGS \\
    $KUBELET_EXTRA_ARGS
Restart=on-failure
RestartSec=5
KillMode=process
CPUAccounting=true
MemoryAccounting=true

[Install]
WantedBy=multi-user.target
",
        config = crate::node_files::KUBELET_CONFIG_PATH,
        kubeconfig = crate::node_files::KUBECONFIG_PATH,
        endpoint = crate::node_files::CONTAINERD_SOCKET,
    )
}

/// The environment file for the AL2023 unit: `NODEADM_KUBELET_ARGS` set to `args` (words as
/// systemd splits `$NODEADM_KUBELET_ARGS`: quotes group), double-quoted and escaped so that
/// systemd's environment-file reader gives back exactly `args`.
pub fn nodeadm_environment(args: &str) -> String {
    let mut v = String::new();
    for c in args.chars() {
        if matches!(c, '"' | '\\' | '$' | '`') {
            v.push('\\');
        }
        v.push(c);
    }
    format!("# Written by vpcnet-bootstrap in nodeadm's place; rerunning it rewrites this file.\n{NODEADM_ARGS_VAR}=\"{v}\"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const AL2023_SHAPE: &str = "[Service]\nEnvironmentFile=/etc/eks/kubelet/environment\nExecStart=/usr/bin/kubelet $NODEADM_KUBELET_ARGS\n";
    const AL2_SHAPE: &str =
        "[Service]\nExecStart=/usr/bin/kubelet --config /c $KUBELET_ARGS $KUBELET_EXTRA_ARGS\n";

    #[test]
    fn template_beats_an_installed_unit() {
        // The AL2 AMI installs a docker-era kubelet.service and ships the containerd one aside.
        let units = NodeUnits {
            ami_containerd_unit: Some(AL2_SHAPE.into()),
            installed: Some((
                "/etc/systemd/system/kubelet.service".into(),
                "[Service]\nExecStart=/usr/bin/kubelet --container-runtime docker $KUBELET_ARGS\n"
                    .into(),
            )),
            ..Default::default()
        };
        let c = choose(&units).unwrap();
        assert!(matches!(c, UnitChoice::AmiCopied { .. }), "{c:?}");
        assert!(c.unit_passes("--config") && !c.unit_passes("--kubeconfig"));
    }

    #[test]
    fn layouts_and_vpcnet_fallback() {
        let kept = |text: &str| {
            choose(&NodeUnits {
                installed: Some((
                    "/usr/lib/systemd/system/kubelet.service".into(),
                    text.into(),
                )),
                ..Default::default()
            })
        };
        assert_eq!(
            kept(AL2023_SHAPE).unwrap().layout(),
            Layout::NodeadmEnvironment
        );
        assert_eq!(kept(AL2_SHAPE).unwrap().layout(), Layout::KubeletArgs);
        let ours = vpcnet_unit(VpcnetUnitOptions::default());
        assert_eq!(
            kept(&ours).unwrap(),
            UnitChoice::Vpcnet {
                replaces: Some("/usr/lib/systemd/system/kubelet.service".into())
            }
        );
        assert_eq!(
            choose(&NodeUnits::default()).unwrap(),
            UnitChoice::Vpcnet { replaces: None }
        );
        // NODEADM_KUBELET_ARGS from some other file is not the AL2023 contract.
        let other = AL2023_SHAPE.replace("/etc/eks/kubelet/environment", "/etc/other");
        let e = kept(&other).unwrap_err().to_string();
        assert!(
            e.contains("/usr/lib/systemd/system/kubelet.service") && e.contains("Fix:"),
            "{e}"
        );
    }

    #[test]
    fn vpcnet_unit_options_show_in_the_text() {
        let plain = vpcnet_unit(VpcnetUnitOptions::default());
        assert!(!plain.contains("sandbox-image") && !plain.contains("credential"));
        let full = vpcnet_unit(VpcnetUnitOptions {
            credential_provider: true,
            sandbox_image: true,
        });
        assert!(full.contains("Requires=containerd.service sandbox-image.service\n"));
        assert!(full.contains(
            "--image-credential-provider-bin-dir=/etc/eks/image-credential-provider \\\n"
        ));
    }

    #[test]
    fn nodeadm_environment_round_trips_through_the_env_file_reader() {
        let args = r#"--node-labels='team=a b' --x="q" --y=$HOME --z=a\b"#;
        let text = nodeadm_environment(args);
        let vars = systemd::parse_env_file("env", &text).unwrap();
        assert_eq!(vars, vec![(NODEADM_ARGS_VAR.to_string(), args.to_string())]);
    }
}
