//! Private ECR pulls in the Kubernetes lab (issue 31 item 2): the lab's registry (distribution,
//! htpasswd with the emulator's ECR credentials) under an ECR-shaped name; a pod on a node
//! bootstrapped by vpcnet-bootstrap, whose kubelet runs the real `ecr-credential-provider`
//! (which asks the emulator's ECR `GetAuthorizationToken`), pulls its image and runs; the same
//! pod on a node whose kubelet lacks the credential provider flags fails to pull (401).
//!
//! Needs root, the built binaries, the Kubernetes binaries (`VPCNET_K8S_BIN_DIR`), the provider
//! (`VPCNET_ECR_CREDENTIAL_PROVIDER`, from `scripts/build-ecr-credential-provider.sh`) and the
//! registry (`VPCNET_REGISTRY_BIN_DIR`, from `scripts/build-registry.sh`); fails without them.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::with_kube_lab;
use vpcnet_lab::registry;

fn pod_manifest(name: &str, node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeSelector:
    {label}: {node}
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Always
    command: ["sleep", "3600"]
"#,
        label = vpcnet_lab::kube::node::NODE_LABEL,
        image = registry::image_ref(),
    )
}

#[test]
fn a_private_ecr_image_is_pulled_through_ecr_credential_provider_and_not_without_it() {
    let (Some(_), Some(reg_bin)) = (
        std::env::var_os(registry::PROVIDER_ENV),
        std::env::var_os("VPCNET_REGISTRY_BIN_DIR"),
    ) else {
        panic!(
            "this test needs {} and VPCNET_REGISTRY_BIN_DIR: scripts/test.sh builds both and \
             sets them (scripts/build-ecr-credential-provider.sh, scripts/build-registry.sh)",
            registry::PROVIDER_ENV
        );
    };
    let reg_bin = PathBuf::from(reg_bin);
    with_kube_lab(
        "ecr",
        |o| o.nodes = 2,
        |lab| {
            let (_reg, creds) = lab.registry().start(&reg_bin).expect("registry");
            let s = lab.state().unwrap();
            let (n1, n2) = (&s.nodes[0], &s.nodes[1]);
            lab.registry().push(n1, &creds).expect("push");
            for n in &s.nodes {
                lab.registry().use_on(n).unwrap();
            }
            // n1's kubelet runs with the flags vpcnet-bootstrap wrote.
            let argv = std::fs::read_to_string(n1.dir.join("kubelet.cmdline")).unwrap();
            assert!(
                argv.contains("--image-credential-provider-config=")
                    && argv.contains("--image-credential-provider-bin-dir="),
                "kubelet of n1 without the credential provider flags: {argv}"
            );
            // Negative control: n2's kubelet without them.
            let dropped = lab
                .kube()
                .restart_kubelet_without(
                    &n2.name,
                    &[
                        "--image-credential-provider-config",
                        "--image-credential-provider-bin-dir",
                    ],
                )
                .unwrap();
            assert_eq!(dropped.len(), 2, "{dropped:?}");

            let k = lab.kube().kubectl().unwrap();
            k.apply(&pod_manifest("ecr-with", &n1.name)).unwrap();
            k.apply(&pod_manifest("ecr-without", &n2.name)).unwrap();

            let t0 = Instant::now();
            let (mut with_ok, mut without_failed) = (false, None::<String>);
            while t0.elapsed() < Duration::from_secs(180) && !(with_ok && without_failed.is_some())
            {
                let p = k
                    .json(&["get", "pod", "ecr-with", "-n", "default"])
                    .unwrap();
                with_ok = p["status"]["phase"] == "Running";
                let q = k
                    .json(&["get", "pod", "ecr-without", "-n", "default"])
                    .unwrap();
                let w = &q["status"]["containerStatuses"][0]["state"]["waiting"];
                if w["reason"] == "ErrImagePull" || w["reason"] == "ImagePullBackOff" {
                    without_failed = Some(w["message"].as_str().unwrap_or_default().to_string());
                }
                assert_ne!(
                    q["status"]["phase"], "Running",
                    "pulled without credentials: {q}"
                );
                std::thread::sleep(Duration::from_secs(2));
            }
            let p = k
                .json(&["get", "pod", "ecr-with", "-n", "default"])
                .unwrap();
            assert!(with_ok, "pod with the credential provider not Running: {p}");
            let reason =
                without_failed.expect("pod without the credential provider did not fail to pull");
            // Why: kubelet's "Failed to pull image" event quotes containerd's error.
            let events = k
                .run(&[
                    "get",
                    "events",
                    "-n",
                    "default",
                    "--field-selector",
                    "involvedObject.name=ecr-without",
                    "-o",
                    "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
                ])
                .unwrap();
            let msg = format!("{reason}\n{events}");
            assert!(
                msg.contains("401") || msg.to_lowercase().contains("unauthorized"),
                "the pull without credentials failed for another reason: {msg}"
            );
            let q = k
                .json(&["get", "pod", "ecr-without", "-n", "default"])
                .unwrap();
            assert_ne!(q["status"]["phase"], "Running", "{q}");
            eprintln!("pull without the credential provider: {msg}");
            // The credentials came from the real provider asking the emulator's ECR.
            let calls: serde_json::Value =
                vpcnet_lab::api::control_get(&vpcnet_lab::daemon::api_socket(&lab.dir), "calls")
                    .unwrap();
            let n = calls["per_action"]["GetAuthorizationToken"]
                .as_u64()
                .unwrap_or(0);
            assert!(
                n >= 1,
                "ecr-credential-provider never called GetAuthorizationToken: {calls}"
            );
            eprintln!("GetAuthorizationToken calls: {n}");
        },
    );
}
