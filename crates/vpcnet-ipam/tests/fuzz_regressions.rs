//! The inputs kept for the fuzz target `checkpoint` (fuzz/seeds, and the reproducers of
//! findings in fuzz/regressions), fed through the same checks as the target, so CI runs them
//! without cargo-fuzz.

mod fuzz_checks;
#[path = "../../../fuzz/inputs.rs"]
mod inputs;

#[test]
fn checkpoint_kept_inputs() {
    inputs::feed("checkpoint", fuzz_checks::checkpoint);
}
