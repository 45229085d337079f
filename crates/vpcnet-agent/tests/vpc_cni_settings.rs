//! The `vpcnet-agent` binary against the emulator with VPC CNI settings it does not implement:
//! a refused one stops it at start (exit status 2, the refusal's line), before it writes a
//! conflist or makes any EC2 mutating call. Each refusal is paired with the same environment
//! carrying the accepted value, which starts, writes the conflist and grows the pool through
//! EC2, so the absence of those effects is the refusal's doing.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;

/// The agent's environment on `lab`'s instance, with `extra` on top.
fn agent(lab: &Lab, extra: &[(&str, &str)]) -> tokio::process::Command {
    let mut cmd = lab.bare_agent_command();
    cmd.env("RUST_LOG", "info").env("NO_COLOR", "1");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

/// Runs the agent to its exit (it must exit on its own within 30 s): (status, stderr).
async fn refused_run(lab: &Lab, extra: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), agent(lab, extra).output())
        .await
        .expect("a refused agent exits on its own")
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What an accepted run did.
struct Accepted {
    /// EC2 mutating calls.
    mutating: u64,
    conflist: String,
    /// Its log (stdout) and stderr.
    output: String,
}

/// Starts the agent and waits for its conflist (the pool can serve), then stops it.
async fn accepted_run(lab: &Lab, extra: &[(&str, &str)]) -> Accepted {
    lab.emu.reset_calls();
    let mut child = agent(lab, extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let serving = while_agent_runs(&mut child, Duration::from_secs(30), || {
        lab.conflist().exists()
    })
    .await
    .unwrap_or_else(|out| panic!("with {extra:?}: {out}"));
    assert!(serving, "no conflist after 30 s");
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let text = std::fs::read_to_string(lab.conflist()).unwrap();
    std::fs::remove_file(lab.conflist()).unwrap();
    Accepted {
        mutating: lab.emu.calls().mutating,
        conflist: text,
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_ipv6_true_is_refused_before_anything_happens() {
    let lab = lab("m5.large").await;
    lab.emu.reset_calls();
    let (code, err) = refused_run(&lab, &[("ENABLE_IPv6", "true")]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "refused ENABLE_IPv6=\"true\": vpcnet has no IPv6 mode yet: pods would get IPv4 \
             addresses only; instead: remove it or set it to false"
        ),
        "{err}"
    );
    assert_eq!(err.matches("refused ").count(), 1, "{err}");
    assert!(!lab.conflist().exists(), "a conflist was written");
    let calls = lab.emu.calls();
    assert_eq!(calls.mutating, 0, "{calls:?}");
    assert!(calls.per_action.is_empty(), "no EC2 call at all: {calls:?}");
    assert_eq!(lab.ec2_ips().len(), 0, "no secondary address was assigned");

    // The same environment with the VPC CNI's default value: serves, through EC2. (With a
    // pod MTU, and a misspelt variable, which is only warned about.)
    let run = accepted_run(
        &lab,
        &[
            ("ENABLE_IPv6", "false"),
            ("POD_MTU", "1500"),
            ("WARM_IP_TARGETS", "3"),
        ],
    )
    .await;
    assert!(run.mutating > 0, "the accepted run made no mutating call");
    let conf: serde_json::Value = serde_json::from_str(&run.conflist).unwrap();
    assert_eq!(conf["plugins"][0]["mtu"], "1500", "{}", run.conflist);
    let warning = run
        .output
        .lines()
        .find(|l| l.contains(r#""level":"warn""#) && l.contains("WARM_IP_TARGETS"))
        .unwrap_or_else(|| panic!("no warning about WARM_IP_TARGETS:\n{}", run.output));
    assert!(
        warning.contains("neither a vpcnet setting nor one of the VPC CNI"),
        "{warning}"
    );
    assert!(!warning.contains("POD_MTU"), "{warning}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_reported_in_one_run_with_the_invalid_values() {
    let lab = lab("m5.large").await;
    lab.emu.reset_calls();
    let (code, err) = refused_run(
        &lab,
        &[
            ("ENABLE_IPv6", "true"),
            ("ENABLE_POD_ENI", "true"),
            ("AWS_VPC_K8S_CNI_CONNMARK", "0x40"),
            ("AWS_VPC_ENI_MTU", "100000"),
            // Accepted: vpcnet's behaviour, or no effect.
            ("ENABLE_IPv4", "true"),
            ("ENABLE_NFTABLES", "true"),
        ],
    )
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("4 invalid or refused variables"), "{err}");
    for line in [
        "invalid AWS_VPC_ENI_MTU=\"100000\"",
        "refused ENABLE_IPv6=\"true\"",
        "refused ENABLE_POD_ENI=\"true\": vpcnet does not label its Node for a trunk ENI",
        "refused AWS_VPC_K8S_CNI_CONNMARK=\"0x40\"",
    ] {
        assert!(err.contains(line), "{line} missing:\n{err}");
    }
    assert!(
        !err.contains("ENABLE_IPv4") && !err.contains("ENABLE_NFTABLES"),
        "{err}"
    );
    assert!(!lab.conflist().exists());
    assert_eq!(lab.emu.calls().mutating, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotate_pod_ip_and_manage_enis_non_schedulable_are_no_longer_refused() {
    // Refused before they were implemented (ANNOTATE_POD_IP=true, and the VPC CNI's default
    // AWS_MANAGE_ENIS_NON_SCHEDULABLE=false): now the agent starts and, without a Kubernetes
    // API server, manages ENIs as before.
    let lab = lab("m5.large").await;
    let run = accepted_run(
        &lab,
        &[
            ("ANNOTATE_POD_IP", "true"),
            ("AWS_MANAGE_ENIS_NON_SCHEDULABLE", "false"),
            ("MY_NODE_NAME", "ip-10-0-0-1.ec2.internal"),
        ],
    )
    .await;
    assert!(run.mutating > 0, "the pool did not grow:\n{}", run.output);
    assert!(!run.output.contains("refused"), "{}", run.output);
    let run = accepted_run(&lab, &[("AWS_MANAGE_ENIS_NON_SCHEDULABLE", "true")]).await;
    assert!(!run.output.contains("refused"), "{}", run.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_provisioning_and_imds_only_mode_are_no_longer_refused() {
    // Refused before they were implemented: now the agent starts, serves (here with an empty
    // pool: nothing is attached beforehand) and provisions nothing. tests/no_provisioning.rs
    // covers what they do.
    let lab = lab("m5.large").await;
    for (var, value) in [
        ("DISABLE_NETWORK_RESOURCE_PROVISIONING", "true"),
        ("ENABLE_IMDS_ONLY_MODE", "true"),
    ] {
        let run = accepted_run(&lab, &[(var, value)]).await;
        assert!(!run.output.contains("refused"), "{}", run.output);
        assert_eq!(run.mutating, 0, "{var}: {}", run.output);
        assert!(
            run.output.contains(&format!("{var}=true")),
            "{}",
            run.output
        );
    }
    // ENABLE_IMDS_ONLY_MODE: not one EC2 call, describes included.
    assert!(
        lab.emu.calls().per_action.is_empty(),
        "{:?}",
        lab.emu.calls()
    );
}

/// The plugin types of a conflist, in chain order.
fn chain(conflist: &str) -> Vec<String> {
    let conf: serde_json::Value = serde_json::from_str(conflist).unwrap();
    conf["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_plugin_and_pod_v6_chain_their_plugins_into_the_written_conflist() {
    // Refused before they were implemented: now the agent starts and its conflist chains the
    // reference bandwidth and tuning plugins after portmap, as the VPC CNI's entrypoint does.
    let lab = lab("m5.large").await;
    let run = accepted_run(
        &lab,
        &[
            ("ENABLE_BANDWIDTH_PLUGIN", "true"),
            ("DISABLE_POD_V6", "true"),
        ],
    )
    .await;
    assert!(!run.output.contains("refused"), "{}", run.output);
    assert_eq!(
        chain(&run.conflist),
        ["vpcnet-cni", "portmap", "bandwidth", "tuning"],
        "{}",
        run.conflist
    );
    let conf: serde_json::Value = serde_json::from_str(&run.conflist).unwrap();
    assert_eq!(conf["plugins"][2]["capabilities"]["bandwidth"], true);
    assert_eq!(
        conf["plugins"][3]["sysctl"]["net.ipv6.conf.all.disable_ipv6"],
        "1"
    );
    // Each alone, and neither (the VPC CNI's defaults, spelt out).
    let run = accepted_run(&lab, &[("ENABLE_BANDWIDTH_PLUGIN", "true")]).await;
    assert_eq!(chain(&run.conflist), ["vpcnet-cni", "portmap", "bandwidth"]);
    let run = accepted_run(&lab, &[("DISABLE_POD_V6", "true")]).await;
    assert_eq!(chain(&run.conflist), ["vpcnet-cni", "portmap", "tuning"]);
    let run = accepted_run(
        &lab,
        &[
            ("ENABLE_BANDWIDTH_PLUGIN", "false"),
            ("DISABLE_POD_V6", "false"),
        ],
    )
    .await;
    assert_eq!(chain(&run.conflist), ["vpcnet-cni", "portmap"]);
    // An invalid value is refused at start, as for every boolean.
    let (code, err) = refused_run(&lab, &[("DISABLE_POD_V6", "yes")]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalid DISABLE_POD_V6=\"yes\""), "{err}");
}

/// Runs the agent over the conflist `before` until it has written its own (with its socket),
/// then stops it: (the conflist written, the agent's output).
async fn rewrite_conflist(lab: &Lab, before: &str) -> (String, String) {
    std::fs::create_dir_all(lab.conflist().parent().unwrap()).unwrap();
    std::fs::write(lab.conflist(), before).unwrap();
    let mut child = agent(lab, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let written = || {
        std::fs::read_to_string(lab.conflist())
            .ok()
            .filter(|t| t.contains("agentSocket"))
    };
    eventually("the agent's conflist", Duration::from_secs(30), || {
        written().is_some()
    })
    .await;
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let text = written().unwrap();
    std::fs::remove_file(lab.conflist()).unwrap();
    (
        text,
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_others_chained_into_the_conflist_are_kept_when_the_agent_writes_it() {
    // As istio-cni leaves the file: its entry appended after the chain an earlier agent wrote
    // (with the bandwidth plugin, since turned off).
    let lab = lab("m5.large").await;
    let istio = serde_json::json!({"type": "istio-cni", "log_level": "info"});
    let before = serde_json::json!({
        "cniVersion": "1.0.0", "name": "aws-cni",
        "plugins": [
            {"type": "vpcnet-cni", "mtu": "1500"},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}},
            istio,
        ],
    });
    let (text, out) = rewrite_conflist(&lab, &before.to_string()).await;
    assert_eq!(
        chain(&text),
        ["vpcnet-cni", "portmap", "istio-cni"],
        "{text}"
    );
    let conf: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(conf["plugins"][2], istio);
    assert_eq!(conf["plugins"][0]["mtu"], "9001");
    assert!(out.contains("keeping the plugins chained"), "{out}");

    // A file that is no conflist is replaced, and the log says so.
    let (text, out) = rewrite_conflist(&lab, "not json").await;
    assert_eq!(chain(&text), ["vpcnet-cni", "portmap"]);
    assert!(
        out.contains("is not one vpcnet can keep chained plugins from (not JSON"),
        "{out}"
    );
}
