//! The inputs kept for the fuzz targets `cni_netconf`, `cni_prev_result` and `cni_args`
//! (fuzz/seeds, and the reproducers of findings in fuzz/regressions), fed through the same
//! checks as the targets, so CI runs them without cargo-fuzz.

mod fuzz_checks;
#[path = "../../../fuzz/inputs.rs"]
mod inputs;

#[test]
fn cni_netconf_kept_inputs() {
    inputs::feed("cni_netconf", fuzz_checks::cni_netconf);
}

#[test]
fn cni_prev_result_kept_inputs() {
    inputs::feed("cni_prev_result", fuzz_checks::cni_prev_result);
}

#[test]
fn cni_args_kept_inputs() {
    inputs::feed("cni_args", fuzz_checks::cni_args);
}
