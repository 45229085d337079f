//! `vpcnet-cni-timing`: a CNI plugin timing shim, installed as `timed-<plugin>` beside a plugin
//! (named so in the conflist) or in its place (the plugin renamed `<plugin>.untimed`): runs the
//! plugin unchanged and logs its wall time, peak RSS and exit code per invocation
//! ([`vpcnet_cni_harness::timing`]).

fn main() {
    let argv0 = std::env::args().next().unwrap_or_default();
    match vpcnet_cni_harness::timing::main_with(&argv0) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // The CNI error format on stdout (spec "Section 6: Error"), code 999 (plugin-specific).
            println!(
                "{}",
                serde_json::json!({"cniVersion": "1.0.0", "code": 999, "msg": "timing shim failed", "details": format!("{e:#}")})
            );
            std::process::exit(1);
        }
    }
}
