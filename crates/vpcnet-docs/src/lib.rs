//! The checks behind `tests/links.rs`: the repository's Markdown files link only to files and
//! headings that exist, and never to anything outside the repository.
//!
//! Std only, so the test costs no build time in the normal suite. The Markdown reading is
//! deliberately small and covers what this repository writes: ATX and setext headings, fenced
//! code blocks (skipped), inline code spans (skipped), inline links and images, reference
//! definitions and HTML `href`/`id`/`name` attributes. Anchors are GitHub's heading slugs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// A link found in a Markdown file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// 1-based line of the link's target.
    pub line: usize,
    /// The target as written (`docs/agent.md#checkpoint-recovery`, `#layout`, `https://...`).
    pub target: String,
}

/// What a check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Markdown files read, relative to the root.
    pub files: Vec<PathBuf>,
    /// Relative links checked (to a file, a directory or an anchor).
    pub relative_links: usize,
    /// Of those, links with an `#anchor` that was checked against the target's headings.
    pub anchors: usize,
    /// External links (`https://...`, `mailto:`), not followed.
    pub external_links: usize,
    /// One line per problem: `path:line: what`.
    pub problems: Vec<String>,
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

/// `base` joined with the relative `path`, `.` and `..` applied without touching the file
/// system; `None` when it climbs above `base`'s root (the empty path).
pub fn resolve(base: &Path, path: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = base
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p.to_string()),
        }
    }
    Some(parts.iter().collect())
}

/// Percent-decodes the few escapes a relative link may carry (`%20`, ...).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a link target names a scheme (`https:`, `mailto:`, ...): not a repository path.
fn is_external(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
                && !scheme.contains('/')
        }
        None => false,
    }
}

/// Checks `files` (Markdown, relative to `root`): every relative link names an existing file
/// or directory inside `root` (not under a `target/` build directory), every `#anchor` into a
/// Markdown file names one of its headings, no link is absolute, and no path written anywhere
/// in a file climbs out of `root`.
pub fn check(root: &Path, files: &[PathBuf]) -> Report {
    let mut report = Report {
        files: files.to_vec(),
        ..Report::default()
    };
    let mut anchor_cache: BTreeMap<PathBuf, Option<BTreeSet<String>>> = BTreeMap::new();
    let mut anchors_of = |rel: &Path| -> Option<BTreeSet<String>> {
        anchor_cache
            .entry(rel.to_path_buf())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(rel))
                    .ok()
                    .map(|t| anchors(&t))
            })
            .clone()
    };
    for file in files {
        let shown = file.display();
        let text = match std::fs::read_to_string(root.join(file)) {
            Ok(t) => t,
            Err(e) => {
                report.problems.push(format!("{shown}: cannot read: {e}"));
                continue;
            }
        };
        let dir = file.parent().unwrap_or(Path::new(""));
        for (line, path) in parent_references(&text) {
            if resolve(dir, &path).is_none() {
                report.problems.push(format!(
                    "{shown}:{line}: `{path}` points outside the repository; \
                     keep what the docs need inside it"
                ));
            }
        }
        for link in links(&text) {
            let target = link.target.trim();
            let line = link.line;
            if is_external(target) {
                report.external_links += 1;
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target, None),
            };
            let path = percent_decode(path.split('?').next().unwrap_or_default());
            report.relative_links += 1;
            if path.starts_with('/') {
                report.problems.push(format!(
                    "{shown}:{line}: `{target}` is absolute; write a link relative to {shown}"
                ));
                continue;
            }
            let resolved = if path.is_empty() {
                Some(file.clone())
            } else {
                resolve(dir, &path)
            };
            let Some(resolved) = resolved else {
                report.problems.push(format!(
                    "{shown}:{line}: `{target}` points outside the repository"
                ));
                continue;
            };
            if resolved.components().any(|c| c.as_os_str() == "target") {
                report.problems.push(format!(
                    "{shown}:{line}: `{target}` points into a build directory"
                ));
                continue;
            }
            if !root.join(&resolved).exists() {
                report.problems.push(format!(
                    "{shown}:{line}: `{target}`: {} does not exist",
                    resolved.display()
                ));
                continue;
            }
            let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
                continue;
            };
            if resolved.extension().is_some_and(|e| e == "md") {
                report.anchors += 1;
                let known = anchors_of(&resolved).unwrap_or_default();
                if !known.contains(anchor) {
                    report.problems.push(format!(
                        "{shown}:{line}: `{target}`: {} has no heading with the anchor #{anchor}",
                        resolved.display()
                    ));
                }
            }
        }
    }
    report
}

/// The repository's Markdown files, relative to `root`: what git tracks or would track (not
/// ignored), else every `*.md` outside `.git`, hidden directories and `target/`.
pub fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let git = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            "*.md",
        ])
        .output();
    let mut files: Vec<PathBuf> = match git {
        Ok(out) if out.status.success() && !out.stdout.is_empty() => out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            // A file deleted from the work tree but still in the index.
            .filter(|p| root.join(p).is_file())
            .collect(),
        _ => {
            let mut found = Vec::new();
            walk(root, Path::new(""), &mut found);
            found
        }
    };
    files.sort();
    files.dedup();
    files
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let path = rel.join(&*name);
        match e.file_type() {
            Ok(t) if t.is_dir() && !name.starts_with('.') && name != "target" => {
                walk(root, &path, out);
            }
            Ok(t) if t.is_file() && name.ends_with(".md") => out.push(path),
            _ => {}
        }
    }
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

    #[test]
    fn parent_references_and_resolution() {
        let md = "read `../shared/DESIGN.md` or ../../x, not .../kubelet.service.d or a..b/c\n";
        let refs: Vec<String> = parent_references(md).into_iter().map(|r| r.1).collect();
        assert_eq!(refs, vec!["../shared/DESIGN.md", "../../x"]);
        assert_eq!(
            resolve(Path::new("docs"), "../README.md"),
            Some("README.md".into())
        );
        assert_eq!(resolve(Path::new("docs"), "../../x"), None);
        assert_eq!(resolve(Path::new(""), "../x"), None);
        assert_eq!(resolve(Path::new("a"), ".../b"), Some("a/.../b".into()));
    }

    #[test]
    fn external_targets() {
        assert!(is_external("https://example.com/x"));
        assert!(is_external("mailto:a@b"));
        assert!(!is_external("docs/a.md"));
        assert!(!is_external("#anchor"));
        assert_eq!(percent_decode("a%20b.md"), "a b.md");
    }

    /// A scratch repository: every problem kind is found, and good links pass.
    #[test]
    fn check_finds_every_problem_kind() {
        let root = std::env::temp_dir().join(format!("vpcnet-docs-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join("target/out.md"), "# Out\n").unwrap();
        std::fs::write(
            root.join("README.md"),
            "# Top\n\n[ok](docs/a.md#a-heading) [dir](docs) [self](#top) [web](https://x.y)\n\
             [dead](docs/missing.md) [anchor](docs/a.md#nope) [abs](/docs/a.md)\n\
             [out](../elsewhere.md) [built](target/out.md)\n\
             See `../shared/DESIGN.md`.\n",
        )
        .unwrap();
        std::fs::write(
            root.join("docs/a.md"),
            "# A heading\n\n[back](../README.md#top)\n",
        )
        .unwrap();
        let files = vec![PathBuf::from("README.md"), PathBuf::from("docs/a.md")];
        let r = check(&root, &files);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(r.external_links, 1);
        assert_eq!(r.relative_links, 9, "{:?}", r.problems);
        assert_eq!(r.anchors, 4);
        let joined = r.problems.join("\n");
        for want in [
            "README.md:4: `docs/missing.md`: docs/missing.md does not exist",
            "README.md:4: `docs/a.md#nope`: docs/a.md has no heading with the anchor #nope",
            "README.md:4: `/docs/a.md` is absolute",
            "README.md:5: `../elsewhere.md` points outside the repository",
            "README.md:5: `target/out.md` points into a build directory",
            "README.md:6: `../shared/DESIGN.md` points outside the repository",
        ] {
            assert!(joined.contains(want), "missing {want:?} in:\n{joined}");
        }
        // ../elsewhere.md is reported both as a written path and as a link.
        assert_eq!(r.problems.len(), 7, "{joined}");
    }
}
