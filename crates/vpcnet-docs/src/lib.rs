//! The checks behind `tests/links.rs`: the repository's Markdown files link only to files and
//! headings that exist, and never to anything outside the repository.
//!
//! Std only, so the test costs no build time in the normal suite. The Markdown reading is
//! deliberately small and covers what this repository writes: ATX and setext headings, fenced
//! code blocks (skipped), inline code spans (skipped), inline links and images, reference
//! definitions and HTML `href`/`id`/`name` attributes. Anchors are GitHub's heading slugs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

pub use markdown::{anchors, links, parent_references, slug, Link};

mod markdown;

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
