//! Every Markdown file of the repository (README, docs/, the crates' pages): relative links
//! and `#anchors` resolve, no link is absolute, and nothing points outside the repository
//! (a design note or data beside the clone is not something a reader of the repository has).
//! Also: every page in docs/ is reachable from the index, docs/README.md.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn links_and_anchors_resolve_inside_the_repository() {
    let root = root();
    let files = vpcnet_docs::markdown_files(&root);
    let report = vpcnet_docs::check(&root, &files);
    println!(
        "{} Markdown files, {} relative links ({} with an anchor), {} external links",
        report.files.len(),
        report.relative_links,
        report.anchors,
        report.external_links
    );
    // Not vacuous: the pages are there and carry links.
    for must in [
        "README.md",
        "docs/README.md",
        "docs/configuration.md",
        "docs/metrics.md",
    ] {
        assert!(
            report.files.iter().any(|f| f == Path::new(must)),
            "{must} not among the Markdown files found: {:?}",
            report.files
        );
    }
    assert!(report.files.len() >= 15, "only {:?}", report.files);
    assert!(
        report.relative_links >= 100,
        "only {} relative links checked",
        report.relative_links
    );
    assert!(
        report.anchors >= 30,
        "only {} anchors checked",
        report.anchors
    );
    assert!(
        report.problems.is_empty(),
        "{} problem(s) in the Markdown files:\n{}",
        report.problems.len(),
        report.problems.join("\n")
    );
}

#[test]
fn every_docs_page_is_linked_from_the_index() {
    let root = root();
    let index = std::fs::read_to_string(root.join("docs/README.md")).unwrap();
    let linked: Vec<String> = vpcnet_docs::links(&index)
        .into_iter()
        .map(|l| l.target.split('#').next().unwrap_or_default().to_string())
        .collect();
    let mut pages = 0;
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".md") || name == "README.md" {
            continue;
        }
        pages += 1;
        assert!(
            linked.contains(&name),
            "docs/{name} is not linked from docs/README.md"
        );
    }
    assert!(pages >= 15, "only {pages} pages in docs/");
}
