//! The inputs kept for the fuzz target `emu_query` (fuzz/seeds, and the reproducers of
//! findings in fuzz/regressions), fed through the same checks as the target, so CI runs them
//! without cargo-fuzz.

mod fuzz_checks;
#[path = "../../../fuzz/inputs.rs"]
mod inputs;

#[test]
fn emu_query_kept_inputs() {
    inputs::feed("emu_query", fuzz_checks::emu_query);
}
