//! A load balancer whose HAProxy cannot start: the load balancer is `failed` with HAProxy's own
//! words as the reason, and nothing of its data plane is left — no process, no namespace, no
//! entry in the lab state. `haproxy` is replaced by a failing one on PATH for this lab (its own
//! test binary: the environment is the process's). Needs root (fails otherwise).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::with_lab;
use vpcnet_elbv2::{HealthCheck, LoadBalancerType};
use vpcnet_lab::lbctl::LbSettings;

#[test]
fn a_failed_haproxy_leaves_nothing_and_the_load_balancer_says_why() {
    let fake = tempfile::tempdir().unwrap();
    let bin = fake.path().join("haproxy");
    std::fs::write(
        &bin,
        "#!/bin/sh\necho 'fake haproxy: cannot start' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        fake.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // SAFETY: the only test of this binary; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PATH", path) };
    with_lab(
        "lbfail",
        |_| {},
        |lab| {
            let before = lab.state().unwrap();
            let e = lab
                .lbs()
                .create_lb(&LbSettings {
                    name: "web".into(),
                    lb_type: LoadBalancerType::Network,
                    port: 80,
                    target_port: 8080,
                    health: HealthCheck::default(),
                    deregistration_delay: None,
                })
                .map(|l| (l.lb.state, l.lb.state_reason));
            // create_lb itself succeeds through the API; the load balancer reports the failure
            let (state, reason) = e.expect("the API calls succeed");
            assert_eq!(state, "failed");
            let reason = reason.unwrap_or_default();
            assert!(reason.contains("fake haproxy: cannot start"), "{reason}");
            let after = lab.state().unwrap();
            assert_eq!(after.namespaces, before.namespaces, "no namespace left");
            assert!(
                !after
                    .processes
                    .iter()
                    .any(|p| p.role.starts_with("haproxy")),
                "no haproxy record left: {:?}",
                after.processes
            );
            assert!(!lab.dir.join("lb").join("web").exists());
        },
    );
}
