//! What every comparison table shares: the ratio cell.

/// A benchmark table's ratio cell, ours / theirs to two decimals: `=` when both are 0, `-`
/// when only theirs is (no ratio).
pub fn ratio(ours: f64, theirs: f64) -> String {
    if theirs == 0.0 {
        if ours == 0.0 {
            "=".into()
        } else {
            "-".into()
        }
    } else {
        format!("{:.2}", ours / theirs)
    }
}

#[cfg(test)]
mod tests {
    use super::ratio;

    #[test]
    fn ratios_handle_zero_counts() {
        assert_eq!(ratio(0.0, 0.0), "=");
        assert_eq!(ratio(1.0, 0.0), "-");
        assert_eq!(ratio(1.0, 4.0), "0.25");
    }
}
