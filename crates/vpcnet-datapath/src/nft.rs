//! The `nft` command, the one way this crate talks to nftables: a script applied with
//! `nft -f -` (one transaction) and listings read back. In another network namespace `nft`
//! runs through `nsenter --net=<path>`, so the caller's threads never change namespace.

use std::path::Path;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::{Error, Result};

/// `nft` in `netns` (through `nsenter --net`) or in the caller's namespace.
fn command(netns: Option<&Path>) -> Command {
    let mut cmd = match netns {
        Some(p) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", p.display())).arg("nft");
            c
        }
        None => Command::new("nft"),
    };
    cmd.kill_on_drop(true);
    cmd
}

fn spawn_error(netns: Option<&Path>) -> impl FnOnce(std::io::Error) -> Error {
    let what = match netns {
        Some(_) => "run nsenter and nft (install util-linux and nftables: apt-get install util-linux nftables)",
        None => "run nft (install nftables: apt-get install nftables)",
    };
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

/// Applies `script` with `nft -f -`: one netlink batch, so the kernel applies all of it or
/// nothing. `what` names what the script changes, for errors (e.g. `table ip vpcnet`).
///
/// Errors: [`Error::Io`] when `nft` cannot run or rejects the script (its message included).
pub(crate) async fn apply(netns: Option<&Path>, script: &str, what: &str) -> Result<()> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    let mut child = command(netns)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error(netns))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin
        .write_all(script.as_bytes())
        .await
        .map_err(io("write the ruleset to nft"))?;
    drop(stdin);
    let out = child.wait_with_output().await.map_err(io("wait for nft"))?;
    if !out.status.success() {
        return Err(Error::Io {
            what: format!("nft -f - ({what})"),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        });
    }
    Ok(())
}

/// Runs `nft <args>` (a `list` command) and returns its output, or `None` when what it lists
/// does not exist (nft's "No such file or directory").
///
/// Errors: [`Error::Io`] when `nft` cannot run or fails for another reason.
pub(crate) async fn list(netns: Option<&Path>, args: &[&str]) -> Result<Option<String>> {
    let out = command(netns)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(spawn_error(netns))?;
    if out.status.success() {
        return String::from_utf8(out.stdout)
            .map(Some)
            .map_err(|e| Error::Io {
                what: format!("nft {}: output is not UTF-8", args.join(" ")),
                source: std::io::Error::other(e),
            });
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("No such file or directory") {
        return Ok(None);
    }
    Err(Error::Io {
        what: format!("nft {}", args.join(" ")),
        source: std::io::Error::other(err.trim().to_string()),
    })
}
