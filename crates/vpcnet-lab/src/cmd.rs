//! Running the external tools the lab drives (`ip`, `ctr`, `sysctl` via `ip netns exec`), with
//! errors that carry the command line and its stderr.

use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

/// Runs `program args...`, returns its stdout as UTF-8 (lossy). Errors: the program cannot be
/// started (names it and suggests `scripts/install-deps.sh`) or exits non-zero (includes stderr).
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = output(program, args)?;
    if !out.status.success() {
        bail!(
            "`{} {}` failed ({}): {}",
            program,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `program args...` and returns its full output whatever the exit status.
pub fn output(program: &str, args: &[&str]) -> Result<Output> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| {
            format!("cannot run `{program}`: is it installed? (run scripts/install-deps.sh)")
        })
}

/// `ip -n <netns> args...`: iproute2 in a named network namespace.
pub fn ip_in(netns: &str, args: &[&str]) -> Result<String> {
    let mut full = vec!["-n", netns];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Like [`ip_in`] but ignores failure (for idempotent deletes during cleanup); returns whether
/// the command succeeded.
pub fn ip_in_quiet(netns: &str, args: &[&str]) -> bool {
    let mut full = vec!["-n", netns];
    full.extend_from_slice(args);
    output("ip", &full)
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Sets a sysctl inside a network namespace (`ip netns exec <ns> sysctl -qw key=value`); only
/// per-namespace keys (net.*) are meaningful here.
pub fn sysctl_in(netns: &str, key: &str, value: &str) -> Result<()> {
    let kv = format!("{key}={value}");
    run("ip", &["netns", "exec", netns, "sysctl", "-qw", &kv])?;
    Ok(())
}

/// Runs several iproute2 commands in one process (`ip -n <netns> -force -batch -`), one per
/// line; with `-force` every line runs even if an earlier one failed. Returns whether all
/// succeeded and stderr.
pub fn ip_batch(netns: &str, lines: &[String]) -> Result<(bool, String)> {
    use std::io::Write;
    if lines.is_empty() {
        return Ok((true, String::new()));
    }
    let mut child = Command::new("ip")
        .args(["-n", netns, "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run `ip`: is iproute2 installed? (run scripts/install-deps.sh)")?;
    {
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(lines.join("\n").as_bytes())?;
        stdin.write_all(b"\n")?;
    }
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Applies an nftables script inside a network namespace (`ip netns exec <ns> nft -f -`);
/// the script is one transaction. Errors include nft's message.
pub fn nft_in(netns: &str, script: &str) -> Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run `nft`: is nftables installed? (run scripts/install-deps.sh)")?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft in {netns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
