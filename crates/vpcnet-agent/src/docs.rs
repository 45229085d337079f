//! The tables of `docs/configuration.md` and `docs/metrics.md` (at the repository's root),
//! generated from the declarations in `config.rs` and `metrics.rs`. Each table sits between
//! markers in the hand-written page:
//!
//! ```text
//! <!-- settings:warm-pool -->
//! | variable | ... |
//! <!-- /settings -->
//! ```
//!
//! A test per page fails when the page differs from what the declarations give;
//! `UPDATE_DOCS=1 cargo test -p vpcnet-agent docs_are_current` rewrites the tables.

/// A Markdown table; `|` in cells is escaped.
pub fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push_str(&line(header.iter().map(|_| "---".to_string()).collect()));
    for r in rows {
        out.push_str(&line(
            r.into_iter().map(|c| c.replace('|', "\\|")).collect(),
        ));
    }
    out
}

/// One table per section: `rows` are (section, cells) in page order.
pub fn tables(
    header: &[&str],
    rows: impl IntoIterator<Item = (&'static str, Vec<String>)>,
) -> std::collections::BTreeMap<&'static str, String> {
    let mut by_section: std::collections::BTreeMap<&'static str, Vec<Vec<String>>> =
        Default::default();
    for (section, cells) in rows {
        by_section.entry(section).or_default().push(cells);
    }
    by_section
        .into_iter()
        .map(|(section, rows)| (section, table(header, rows)))
        .collect()
}

/// A doc comment (lines joined by `\n`, each with its leading space) as one line of text.
pub fn one_line(doc: &str) -> String {
    doc.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `page` with the body of every `<!-- {kind}:{id} -->` … `<!-- /{kind} -->` block replaced by
/// `tables[id]`. Errors: a block naming no table, a table with no block, a block not closed.
#[cfg(test)]
pub fn splice(
    page: &str,
    kind: &str,
    tables: &std::collections::BTreeMap<&str, String>,
) -> Result<String, String> {
    let open = format!("<!-- {kind}:");
    let close = format!("<!-- /{kind} -->");
    let mut out = String::new();
    let mut rest = page;
    let mut seen = Vec::new();
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let (id, body) = after
            .split_once(" -->\n")
            .ok_or_else(|| format!("a `{open}` marker is not followed by ` -->` and a newline"))?;
        let table = tables
            .get(id)
            .ok_or_else(|| format!("`{open}{id} -->` names no declared table"))?;
        let end = body
            .find(&close)
            .ok_or_else(|| format!("`{open}{id} -->` is not closed by `{close}`"))?;
        out.push_str(&rest[..start]);
        out.push_str(&format!("{open}{id} -->\n{table}{close}"));
        rest = &body[end + close.len()..];
        seen.push(id);
    }
    out.push_str(rest);
    if let Some(missing) = tables.keys().find(|id| !seen.contains(id)) {
        return Err(format!(
            "no `{open}{missing} -->` block for the table {missing}"
        ));
    }
    Ok(out)
}

/// Compares the page at `path` with `want`; with `UPDATE_DOCS` set, writes `want` instead.
#[cfg(test)]
pub fn check_page(path: &str, want: &str) {
    let have = std::fs::read_to_string(path).unwrap_or_default();
    if have == want {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, want).unwrap();
        return;
    }
    panic!(
        "{path} differs from the declarations; regenerate it with \
         `UPDATE_DOCS=1 cargo test -p vpcnet-agent docs_are_current` and review the diff"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn splices_tables_between_markers() {
        let tables = BTreeMap::from([("a", "| x |\n".to_string()), ("b", "| y |\n".to_string())]);
        let page =
            "intro\n<!-- t:a -->\nold\n<!-- /t -->\nmiddle\n<!-- t:b -->\n<!-- /t -->\nend\n";
        assert_eq!(
            splice(page, "t", &tables).unwrap(),
            "intro\n<!-- t:a -->\n| x |\n<!-- /t -->\nmiddle\n<!-- t:b -->\n| y |\n<!-- /t -->\nend\n"
        );
        let one = BTreeMap::from([("a", String::new())]);
        assert!(splice(page, "t", &one).unwrap_err().contains("t:b"));
        assert!(splice("<!-- t:a -->\n", "t", &tables)
            .unwrap_err()
            .contains("not closed"));
        assert!(splice("", "t", &one)
            .unwrap_err()
            .contains("no `<!-- t:a -->` block"));
    }

    #[test]
    fn tables_escape_pipes() {
        assert_eq!(
            table(&["a", "b"], [vec!["1".into(), "x|y".into()]]),
            "| a | b |\n| --- | --- |\n| 1 | x\\|y |\n"
        );
        assert_eq!(one_line(" first\n second line\n"), "first second line");
    }
}
