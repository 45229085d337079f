//! What an ELF binary needs to run: its program interpreter (the dynamic loader, `PT_INTERP`)
//! and its `DT_NEEDED` libraries, found as the loader finds them (`DT_RPATH`/`DT_RUNPATH`, then
//! the system directories), recursively. Read with `goblin`; nothing is executed, so binaries
//! of another architecture or untrusted ones are safe to inspect.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The dynamic-linking facts of one ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElfDeps {
    /// `PT_INTERP`: the loader's absolute path (none for static binaries and libraries).
    pub interpreter: Option<String>,
    /// `DT_NEEDED` sonames, in order.
    pub needed: Vec<String>,
    /// `DT_RUNPATH` and `DT_RPATH` directories (`$ORIGIN` not expanded).
    pub search: Vec<String>,
}

/// Errors of reading or resolving ELF files.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    #[error("{path}: not an ELF file the image can carry: {reason}")]
    Parse { path: String, reason: String },
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{needed}, needed by {by}, is in none of {dirs:?}: install the package that ships it on the build machine")]
    NotFound {
        needed: String,
        by: String,
        dirs: Vec<String>,
    },
}

/// True when `data` starts with the ELF magic.
pub fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

/// Reads the dynamic-linking facts of an ELF image in memory; `path` names it in errors.
pub fn deps(path: &str, data: &[u8]) -> Result<ElfDeps, ElfError> {
    let elf = goblin::elf::Elf::parse(data).map_err(|e| ElfError::Parse {
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    let mut search: Vec<String> = Vec::new();
    for p in elf.runpaths.iter().chain(elf.rpaths.iter()) {
        search.extend(p.split(':').filter(|s| !s.is_empty()).map(str::to_string));
    }
    Ok(ElfDeps {
        interpreter: elf.interpreter.map(str::to_string),
        needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
        search,
    })
}

/// Debian's multiarch triplet of the OCI architecture `arch` (`amd64` → `x86_64-linux-gnu`):
/// the directory name under `/lib` and `/usr/lib` of its libraries (and of plugin directories
/// such as iptables' `/usr/lib/<triplet>/xtables`).
pub fn multiarch_triplet(arch: &str) -> &str {
    match arch {
        "amd64" => "x86_64-linux-gnu",
        "arm64" => "aarch64-linux-gnu",
        "arm" => "arm-linux-gnueabihf",
        "ppc64le" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        other => other,
    }
}

/// The loader's own directories on a multiarch (Debian) system for the OCI architecture
/// `arch`, in its search order.
pub fn system_dirs(arch: &str) -> Vec<String> {
    let triplet = multiarch_triplet(arch);
    vec![
        format!("/lib/{triplet}"),
        format!("/usr/lib/{triplet}"),
        "/lib".into(),
        "/usr/lib".into(),
    ]
}

/// The directories a file at `path` with `deps` searches for its needed libraries, in order.
pub fn search_dirs(path: &str, deps: &ElfDeps, system: &[String]) -> Vec<String> {
    let origin = Path::new(path)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    deps.search
        .iter()
        .map(|d| d.replace("$ORIGIN", &origin).replace("${ORIGIN}", &origin))
        .chain(system.iter().cloned())
        .collect()
}

/// One file an image needs beside its binaries: where the loader will look for it in the image,
/// and where its bytes are on the build machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    pub image_path: String,
    pub host_path: PathBuf,
}

/// The libraries and loaders that `binaries` (absolute image paths → their bytes) need,
/// resolved on the build machine under `root` (`/` normally): each library found in the first
/// search directory that has it, placed at that same path in the image, its own needs
/// followed; each loader at its `PT_INTERP` path. Static binaries need nothing.
pub fn closure(
    root: &Path,
    binaries: &BTreeMap<String, Vec<u8>>,
    system: &[String],
) -> Result<Vec<Needed>, ElfError> {
    let host = |p: &str| root.join(p.trim_start_matches('/'));
    let mut out: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut queue: Vec<(String, Vec<u8>)> = binaries
        .iter()
        .filter(|(_, d)| is_elf(d))
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    while let Some((path, data)) = queue.pop() {
        let d = deps(&path, &data)?;
        if let Some(interp) = &d.interpreter {
            if !out.contains_key(interp) && !binaries.contains_key(interp) {
                let hp = host(interp);
                let real = std::fs::read(&hp).map_err(|e| ElfError::Read {
                    path: hp.display().to_string(),
                    source: e,
                })?;
                out.insert(interp.clone(), hp);
                queue.push((interp.clone(), real));
            }
        }
        let dirs = search_dirs(&path, &d, system);
        for n in &d.needed {
            if !seen.insert(format!("{}\0{n}", dirs.join(":"))) {
                continue;
            }
            let found = dirs
                .iter()
                .map(|dir| format!("{}/{n}", dir.trim_end_matches('/')))
                .find(|p| host(p).is_file());
            let Some(image_path) = found else {
                return Err(ElfError::NotFound {
                    needed: n.clone(),
                    by: path.clone(),
                    dirs,
                });
            };
            if out.contains_key(&image_path) || binaries.contains_key(&image_path) {
                continue;
            }
            let hp = host(&image_path);
            let data = std::fs::read(&hp).map_err(|e| ElfError::Read {
                path: hp.display().to_string(),
                source: e,
            })?;
            out.insert(image_path.clone(), hp);
            queue.push((image_path, data));
        }
    }
    Ok(out
        .into_iter()
        .map(|(image_path, host_path)| Needed {
            image_path,
            host_path,
        })
        .collect())
}

/// Every need of every ELF file in `files` (absolute image paths → bytes) that no file in
/// `files` satisfies, as "<file>: <soname or loader>"; empty when the set is self-contained.
pub fn unresolved(files: &BTreeMap<String, Vec<u8>>, system: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for (path, data) in files.iter().filter(|(_, d)| is_elf(d)) {
        let d = match deps(path, data) {
            Ok(d) => d,
            Err(e) => {
                missing.push(e.to_string());
                continue;
            }
        };
        if let Some(i) = &d.interpreter {
            if !files.contains_key(i) {
                missing.push(format!("{path}: loader {i}"));
            }
        }
        let dirs = search_dirs(path, &d, system);
        for n in &d.needed {
            if !dirs
                .iter()
                .any(|dir| files.contains_key(&format!("{}/{n}", dir.trim_end_matches('/'))))
            {
                missing.push(format!("{path}: {n}"));
            }
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_needs_libc_and_a_loader_found_on_this_machine() {
        let me = std::env::current_exe().unwrap();
        let data = std::fs::read(&me).unwrap();
        let d = deps("/x", &data).unwrap();
        assert!(d.needed.iter().any(|n| n.starts_with("libc.so")), "{d:?}");
        let bins = BTreeMap::from([("/usr/bin/t".to_string(), data)]);
        let sys = system_dirs(if cfg!(target_arch = "x86_64") {
            "amd64"
        } else {
            "arm64"
        });
        let need = closure(Path::new("/"), &bins, &sys).unwrap();
        let mut files = bins.clone();
        for n in &need {
            files.insert(n.image_path.clone(), std::fs::read(&n.host_path).unwrap());
        }
        assert_eq!(unresolved(&files, &sys), Vec::<String>::new());
        assert!(files.contains_key(d.interpreter.as_deref().unwrap()));
        // Without its libraries the same set is reported incomplete.
        let alone = BTreeMap::from([("/usr/bin/t".to_string(), files["/usr/bin/t"].clone())]);
        assert!(unresolved(&alone, &sys)
            .iter()
            .any(|m| m.contains("libc.so")));
    }

    #[test]
    fn origin_is_expanded_and_comes_before_the_system_dirs() {
        let d = ElfDeps {
            interpreter: None,
            needed: vec![],
            search: vec!["$ORIGIN/../lib".into()],
        };
        assert_eq!(
            search_dirs("/opt/x/bin/tool", &d, &["/lib".into()]),
            ["/opt/x/bin/../lib", "/lib"]
        );
    }

    #[test]
    fn non_elf_is_not_elf_and_a_bad_elf_names_its_path() {
        assert!(!is_elf(b"#!/bin/sh\n"));
        let err = deps("/bad", b"\x7fELFgarbage").unwrap_err().to_string();
        assert!(err.starts_with("/bad:"), "{err}");
    }
}
