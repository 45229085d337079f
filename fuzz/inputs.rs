//! The inputs kept for a fuzz target: `fuzz/seeds/<target>/` and the minimized reproducers of
//! findings in `fuzz/regressions/<target>/`. Included (through `#[path]`) by each owning
//! crate's `tests/fuzz_regressions.rs`, so CI feeds them through normal tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Every kept input of `target` as (path, bytes), seeds first, each directory sorted.
pub fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for kind in ["seeds", "regressions"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if p.is_file() {
                let data = std::fs::read(&p).unwrap();
                out.push((p, data));
            }
        }
    }
    assert!(!out.is_empty(), "no kept inputs for fuzz target {target}");
    out
}

/// Feeds every kept input of `target` to `check`, naming the input that fails.
pub fn feed(target: &str, check: impl Fn(&[u8])) {
    for (path, data) in inputs(target) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&data)));
        if let Err(p) = r {
            eprintln!("fuzz input {} failed", path.display());
            std::panic::resume_unwind(p);
        }
    }
}
