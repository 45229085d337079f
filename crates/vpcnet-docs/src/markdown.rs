//! The Markdown reading of the link check: GitHub's heading slugs, the links and anchors of a
//! page outside code blocks and code spans, and its references to files outside the
//! repository.

use std::collections::{BTreeMap, BTreeSet};

/// A link found in a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// 1-based line of the link's target.
    pub line: usize,
    /// The target as written (`docs/agent.md#checkpoint-recovery`, `#layout`, `https://...`).
    pub target: String,
}

/// GitHub's anchor for a heading: the heading's text as rendered, lower-cased, without
/// punctuation (anything but letters, digits, `_`, `-` and spaces), each space a `-`.
pub fn slug(heading: &str) -> String {
    let text = heading_text(heading);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The rendered text of a heading's Markdown: links become their text, code spans their
/// content, emphasis markers and HTML tags go.
fn heading_text(md: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = md.trim().chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' | '*' => {}
            '<' => {
                // An HTML tag: skip to its end.
                match chars[i..].iter().position(|&c| c == '>') {
                    Some(n) => i += n,
                    None => out.push('<'),
                }
            }
            '!' if chars.get(i + 1) == Some(&'[') => {}
            '[' => {}
            ']' if chars.get(i + 1) == Some(&'(') => {
                // `[text](target)`: keep the text, drop the target.
                let close = chars[i..].iter().position(|&c| c == ')');
                match close {
                    Some(n) => i += n,
                    None => out.push(']'),
                }
            }
            ']' => {}
            c => out.push(c),
        }
        i += 1;
    }
    out.trim().to_string()
}

/// A Markdown file's text with fenced code blocks blanked (their lines kept empty, so line
/// numbers stay).
fn without_code_blocks(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut fence: Option<(char, usize)> = None;
    for line in md.split_inclusive('\n') {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        let newline = if line.ends_with('\n') { "\n" } else { "" };
        match fence {
            Some((c, n)) => {
                if indent < 4 && run(c) >= n && trimmed[run(c)..].trim().is_empty() {
                    fence = None;
                }
                out.push_str(newline);
            }
            None => {
                let opener = ['`', '~'].into_iter().find(|&c| indent < 4 && run(c) >= 3);
                if let Some(c) = opener {
                    fence = Some((c, run(c)));
                    out.push_str(newline);
                } else {
                    out.push_str(line);
                }
            }
        }
    }
    out
}

/// [`without_code_blocks`], and inline code spans replaced by spaces: where links can be.
fn prose(md: &str) -> String {
    blank_code_spans(&without_code_blocks(md))
}

/// `text` with every inline code span (a backtick run up to the next run of the same length)
/// replaced by spaces, newlines kept.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let n = chars[i..].iter().take_while(|&&c| c == '`').count();
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let m = chars[j..].iter().take_while(|&&c| c == '`').count();
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for c in &mut out[i..j + n] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// Every link target in `md`: inline links and images `[..](target)`, reference definitions
/// `[id]: target` and HTML `href="target"`, outside code.
pub fn links(md: &str) -> Vec<Link> {
    let text = prose(md);
    let line_of = |byte: usize| text[..byte].matches('\n').count() + 1;
    let mut out = Vec::new();
    // Inline: `](target)` or `](<target>)`, optionally with a title.
    let mut from = 0;
    while let Some(at) = text[from..].find("](") {
        let start = from + at + 2;
        from = start;
        let rest = &text[start..];
        let target = if let Some(r) = rest.strip_prefix('<') {
            r.split('>').next().unwrap_or_default()
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == ')')
                .unwrap_or(rest.len());
            &rest[..end]
        };
        if !target.is_empty() {
            out.push(Link {
                line: line_of(start),
                target: target.to_string(),
            });
        }
    }
    // Reference definitions: `[id]: target` at the start of a line.
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if line.len() - t.len() < 4 && t.starts_with('[') && !t.starts_with("[^") {
            if let Some((label, after)) = t[1..].split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(target) = after.split_whitespace().next() {
                        let target = target.trim_start_matches('<').trim_end_matches('>');
                        out.push(Link {
                            line: line_of(offset),
                            target: target.to_string(),
                        });
                    }
                }
            }
        }
        offset += line.len();
    }
    // HTML: href="target".
    for (at, _) in text.match_indices("href=") {
        let rest = &text[at + 5..];
        let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        if let Some(target) = rest[1..].split(q).next() {
            out.push(Link {
                line: line_of(at),
                target: target.to_string(),
            });
        }
    }
    out.sort_by_key(|l| l.line);
    out
}

/// The anchors a Markdown file defines: its headings' slugs (a repeated slug gets `-1`,
/// `-2`, ... as on GitHub) and HTML `id`/`name` attributes.
pub fn anchors(md: &str) -> BTreeSet<String> {
    // Code spans stay: a heading such as "## `vpcnet inspect`" is anchored by its code text.
    let text = without_code_blocks(md);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut add = |s: String, out: &mut BTreeSet<String>| {
        let n = seen.entry(s.clone()).or_insert(0);
        let unique = if *n == 0 { s } else { format!("{s}-{n}") };
        *n += 1;
        out.insert(unique);
    };
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if indent < 4 && t.starts_with('#') {
            let level = t.chars().take_while(|&c| c == '#').count();
            let rest = &t[level..];
            if level <= 6 && (rest.is_empty() || rest.starts_with(' ')) {
                let heading = rest.trim().trim_end_matches('#').trim_end();
                add(slug(heading), &mut out);
            }
            continue;
        }
        // Setext: a paragraph line underlined with `===` or `---`.
        if i > 0 && indent < 4 && !t.is_empty() {
            let underline = t.trim_end();
            let is_underline = (underline.chars().all(|c| c == '=')
                || underline.chars().all(|c| c == '-'))
                && !underline.is_empty();
            let prev = lines[i - 1].trim();
            let prev_is_paragraph = !prev.is_empty()
                && !prev.starts_with(['#', '|', '-', '*', '+', '>', '<'])
                && !prev.starts_with(|c: char| c.is_ascii_digit());
            if is_underline && prev_is_paragraph {
                add(slug(prev), &mut out);
            }
        }
    }
    for attr in [" id=", " name="] {
        for (at, _) in text.match_indices(attr) {
            let rest = &text[at + attr.len()..];
            let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
                continue;
            };
            if let Some(v) = rest[1..].split(q).next() {
                out.insert(v.to_string());
            }
        }
    }
    out
}

/// Paths written in `md` (anywhere, code included) that climb out of the file's directory
/// with `..`: each with its 1-based line. The caller resolves them.
pub fn parent_references(md: &str) -> Vec<(usize, String)> {
    let is_path_char = |c: char| c.is_alphanumeric() || matches!(c, '.' | '/' | '_' | '-' | '~');
    let mut out = Vec::new();
    for (n, line) in md.lines().enumerate() {
        let mut rest = line;
        while !rest.is_empty() {
            let start = match rest.find(is_path_char) {
                Some(s) => s,
                None => break,
            };
            let token_len = rest[start..]
                .find(|c: char| !is_path_char(c))
                .unwrap_or(rest.len() - start);
            let token = &rest[start..start + token_len];
            let climbs = token.split('/').any(|part| part == "..");
            if climbs && token.contains('/') {
                out.push((n + 1, token.to_string()));
            }
            rest = &rest[start + token_len..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_githubs() {
        assert_eq!(slug("Checkpoint recovery"), "checkpoint-recovery");
        assert_eq!(
            slug("Migrating from the VPC CNI (and back)"),
            "migrating-from-the-vpc-cni-and-back"
        );
        assert_eq!(slug("`vpcnet inspect`"), "vpcnet-inspect");
        assert_eq!(
            slug("Load-balancer targets (`vpcnet-targets`)"),
            "load-balancer-targets-vpcnet-targets"
        );
        assert_eq!(
            slug("What one pod leaves on the node: vpcnet and the VPC CNI"),
            "what-one-pod-leaves-on-the-node-vpcnet-and-the-vpc-cni"
        );
        assert_eq!(slug("A → B, 2× faster"), "a--b-2-faster");
        assert_eq!(slug("[The lab](lab.md) **now**"), "the-lab-now");
        assert_eq!(slug("snake_case and CAPS"), "snake_case-and-caps");
    }

    #[test]
    fn links_outside_code_only() {
        let md = "see [a](a.md#x) and ![img](i.png \"title\")\n\
                  ```sh\n[not](a link)\n```\n\
                  `[nor](this)` but [wrapped\ntext](b.md)\n\
                  [ref]: c.md\n<a href=\"d.md\">d</a>\n";
        let got: Vec<(usize, String)> = links(md).into_iter().map(|l| (l.line, l.target)).collect();
        assert_eq!(
            got,
            vec![
                (1, "a.md#x".to_string()),
                (1, "i.png".to_string()),
                (6, "b.md".to_string()),
                (7, "c.md".to_string()),
                (8, "d.md".to_string()),
            ]
        );
    }

    #[test]
    fn anchors_of_headings_and_ids() {
        let md = "# Title\n\n## Part\n\n## Part\n\nSetext\n---\n\n```\n# not a heading\n```\n\
                  <a id=\"custom\"></a>\n| a |\n|---|\n### `vpcnet inspect`\n";
        let got = anchors(md);
        let want: BTreeSet<String> = [
            "title",
            "part",
            "part-1",
            "setext",
            "custom",
            "vpcnet-inspect",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(got, want);
    }
}
