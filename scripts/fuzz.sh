#!/usr/bin/env bash
# Fuzzes every parser of outside input with cargo-fuzz (libFuzzer, AddressSanitizer, debug
# assertions and overflow checks on), one target after the other, each for SECONDS
# (default 60), and prints the executions per target. Not part of CI (scripts/test.sh):
# CI runs the kept reproducers through each owning crate's `fuzz_regressions` test.
#   scripts/fuzz.sh                 # every target, 60 s each
#   scripts/fuzz.sh 300 emu_query   # one target, 5 minutes
#   FUZZ_RUNS=10000000 scripts/fuzz.sh   # every target until 10 million executions (no time
#                                        # limit; the goal of issue 32, run outside CI)
#   FUZZ_SANITIZER=none ...              # without AddressSanitizer (default: address): the
#                                        # fuzzed crates have no `unsafe`, and the long runs go
#                                        # about twice as fast; panics, debug assertions and
#                                        # overflow checks still count as findings
# Targets (fuzz/fuzz_targets/): cni_netconf, cni_prev_result, cni_args, checkpoint, imds,
# emu_query. Seeds (fuzz/seeds/<target>/) and dictionaries (fuzz/dicts/<target>.dict) are
# kept in git; the grown corpus (fuzz/corpus/) and raw crash artifacts (fuzz/artifacts/)
# stay out of git. A finding: minimize it (cargo fuzz tmin) into fuzz/regressions/<target>/,
# fix it, and assert the fixed behaviour in the owning crate's fuzz_regressions test.
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer, -Cpasses=sancov-module); on the
# stable toolchain RUSTC_BOOTSTRAP=1 allows them.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(cni_netconf cni_prev_result cni_args checkpoint imds emu_query)
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-address}"
case "$sanitizer" in
    address | none) ;;
    *) echo "fuzz.sh: FUZZ_SANITIZER=$sanitizer: use address (default) or none" >&2; exit 2 ;;
esac
cd fuzz
summary=()
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t" "regressions/$t" logs
    log="logs/$t.log"
    if [ -n "${FUZZ_RUNS:-}" ]; then echo "== $t: $FUZZ_RUNS executions"; else echo "== $t: ${secs} s"; fi
    # Single process (-jobs not set = one job): the machine is shared.
    dict=()
    [ -f "dicts/$t.dict" ] && dict=(-dict="dicts/$t.dict")
    limit=(-max_total_time="$secs")
    [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS" -max_total_time=0)
    if cargo fuzz run --debug-assertions --sanitizer "$sanitizer" "$t" "corpus/$t" "seeds/$t" "regressions/$t" -- \
        "${dict[@]}" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" >"$log" 2>&1; then
        result="ok"
    else
        result="FINDING or error (see fuzz/$log and fuzz/artifacts/$t/)"
        status=1
        tail -n 40 "$log"
    fi
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n1)"
    cov="$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | grep -o '[0-9]*')"
    corpus="$(find "corpus/$t" -type f | wc -l)"
    secs_taken="$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' | tail -n1)"
    summary+=("$(printf '%-16s %12s executions  %6s s  %6s edges  %6s corpus files  %s' "$t" "${runs:-?}" "${secs_taken:-?}" "${cov:-?}" "$corpus" "$result")")
done
echo
if [ -n "${FUZZ_RUNS:-}" ]; then per="$FUZZ_RUNS executions"; else per="$secs s"; fi
echo "fuzz summary ($per per target, sanitizer $sanitizer, commit $(git rev-parse --short HEAD), $(date -u +%F)):"
printf '  %s\n' "${summary[@]}"
exit "$status"
