//! Plain-text tables: how `vpcnet inspect`, `vpcnet lab` and `vpcnet-bench` print rows.

/// Formats rows as left-aligned columns separated by two spaces, trailing blanks trimmed.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_align_by_character_count() {
        let rows = vec![
            vec!["A".to_string(), "LONG HEADER".into(), "C".into()],
            vec!["ééé".to_string(), "x".into(), String::new()],
        ];
        assert_eq!(table(&rows), "A    LONG HEADER  C\nééé  x\n");
    }
}
