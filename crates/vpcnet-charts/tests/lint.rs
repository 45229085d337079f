//! `helm lint --strict` passes on both charts (warnings fail it).

use vpcnet_charts::{lint, Chart};

#[test]
fn both_charts_lint_clean_in_strict_mode() {
    for chart in Chart::ALL {
        match lint(chart) {
            Ok(out) => assert!(out.contains("0 chart(s) failed"), "{out}"),
            Err(e) => panic!("helm lint --strict charts/{}: {e}", chart.name()),
        }
    }
}
