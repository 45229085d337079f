//! Fuzz target `emu_query`: see `fuzz_checks::emu_query` in crates/vpcnet-emu/tests/fuzz_checks/mod.rs
//! (shared with that crate's `fuzz_regressions` test, which CI runs).
#![no_main]

#[path = "../../crates/vpcnet-emu/tests/fuzz_checks/mod.rs"]
mod fuzz_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_checks::emu_query(data));
