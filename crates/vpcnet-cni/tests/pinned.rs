//! The conflist the agent writes, pinned byte for byte by golden files in `tests/golden/`
//! (the runtime reads this file; its text is part of the contract). A deliberate change
//! regenerates them with `UPDATE_GOLDEN=1 cargo test -p vpcnet-cni --test pinned`.

use std::path::PathBuf;

use vpcnet_cni::conflist::{render, ConflistSettings};

fn check(name: &str, got: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 creates it)", path.display()));
    assert_eq!(got, want, "{name} differs from its golden file");
}

#[test]
fn conflist_text() {
    check(
        "conflist-default.json",
        &render(&ConflistSettings::default()),
    );
    check(
        "conflist-custom.json",
        &render(&ConflistSettings {
            veth_prefix: "pod".into(),
            mtu: 1500,
            agent_socket: "/run/vpcnet/agent.sock".into(),
            agent_timeout: "500ms".into(),
            plugin_log_file: "stderr".into(),
            plugin_log_level: "Warn".into(),
            portmap: false,
            ..Default::default()
        }),
    );
}

/// `ENABLE_BANDWIDTH_PLUGIN` and `DISABLE_POD_V6`, each alone and both (off: the default file
/// above).
#[test]
fn conflist_text_with_the_chained_reference_plugins() {
    check(
        "conflist-bandwidth.json",
        &render(&ConflistSettings {
            bandwidth: true,
            ..Default::default()
        }),
    );
    check(
        "conflist-pod-v6-off.json",
        &render(&ConflistSettings {
            disable_pod_v6: true,
            ..Default::default()
        }),
    );
    check(
        "conflist-bandwidth-pod-v6-off.json",
        &render(&ConflistSettings {
            bandwidth: true,
            disable_pod_v6: true,
            ..Default::default()
        }),
    );
}
