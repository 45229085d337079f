//! Fuzz target `cni_args`: see `fuzz_checks::cni_args` in crates/vpcnet-cni/tests/fuzz_checks/mod.rs
//! (shared with that crate's `fuzz_regressions` test, which CI runs).
#![no_main]

#[path = "../../crates/vpcnet-cni/tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::cni_args(data));
