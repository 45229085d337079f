//! A root filesystem layer as a set of entries, written as a deterministic tar: entries sorted
//! by path, every parent directory present, owner 0:0, one mtime for all.

use std::collections::BTreeMap;

/// One entry of a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory with its mode.
    Dir { mode: u32 },
    /// A regular file: contents and mode.
    File { data: Vec<u8>, mode: u32 },
    /// A symbolic link to `target`.
    Symlink { target: String },
}

/// Errors of building a layer.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("layer path {0:?} is not a relative path of normal components (no leading '/', '.', '..' or empty parts)")]
    BadPath(String),
    #[error("layer path {path:?} is added twice with different contents")]
    Conflict { path: String },
    #[error("layer path {path:?} has a parent {parent:?} that is not a directory")]
    ParentNotDir { path: String, parent: String },
    #[error("writing the layer tar: {0}")]
    Tar(#[from] std::io::Error),
}

/// The file set of a layer, keyed by relative path without a trailing slash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer {
    entries: BTreeMap<String, Entry>,
}

fn check(path: &str) -> Result<String, LayerError> {
    let p = path.trim_end_matches('/');
    let ok = !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(p.to_string())
    } else {
        Err(LayerError::BadPath(path.to_string()))
    }
}

impl Layer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `entry` at `path` (relative, e.g. `usr/bin/nft`) and its missing parent directories
    /// (mode 0755). Adding the same entry twice is fine; a different one is a conflict.
    pub fn add(&mut self, path: &str, entry: Entry) -> Result<(), LayerError> {
        let p = check(path)?;
        let mut parent = String::new();
        let parts: Vec<&str> = p.split('/').collect();
        for c in &parts[..parts.len() - 1] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(c);
            match self.entries.get(&parent) {
                None => {
                    self.entries
                        .insert(parent.clone(), Entry::Dir { mode: 0o755 });
                }
                Some(Entry::Dir { .. }) => {}
                Some(_) => return Err(LayerError::ParentNotDir { path: p, parent }),
            }
        }
        match self.entries.get(&p) {
            Some(e) if *e == entry => Ok(()),
            // An implied parent directory may be given its own mode later.
            Some(Entry::Dir { .. }) if matches!(entry, Entry::Dir { .. }) => {
                self.entries.insert(p, entry);
                Ok(())
            }
            Some(_) => Err(LayerError::Conflict { path: p }),
            None => {
                self.entries.insert(p, entry);
                Ok(())
            }
        }
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> Result<(), LayerError> {
        self.add(path, Entry::Dir { mode })
    }

    pub fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<(), LayerError> {
        self.add(path, Entry::File { data, mode })
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), LayerError> {
        self.add(
            path,
            Entry::Symlink {
                target: target.to_string(),
            },
        )
    }

    /// The entry at `path` (relative, or absolute as a process in the image sees it).
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries
            .get(path.trim_start_matches('/').trim_end_matches('/'))
    }

    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e))
    }

    /// The sum of the regular files' sizes.
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| match e {
                Entry::File { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// The layer as an uncompressed tar: entries in path order (a parent before its children),
    /// owner 0:0, mtime `mtime` for every entry, no user or group names.
    pub fn to_tar(&self, mtime: u64) -> Result<Vec<u8>, LayerError> {
        let mut b = tar::Builder::new(Vec::new());
        b.mode(tar::HeaderMode::Deterministic);
        for (path, entry) in &self.entries {
            let mut h = tar::Header::new_ustar();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(mtime);
            match entry {
                Entry::Dir { mode } => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    b.append_data(&mut h, format!("{path}/"), &[][..])?;
                }
                Entry::File { data, mode } => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, path, &data[..])?;
                }
                Entry::Symlink { target } => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, path, target)?;
                }
            }
        }
        Ok(b.into_inner()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(tar_bytes: &[u8]) -> Vec<(String, u32, u32, u64)> {
        let mut a = tar::Archive::new(tar_bytes);
        a.entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.mode().unwrap(),
                    h.uid().unwrap() as u32 + h.gid().unwrap() as u32,
                    h.mtime().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn parents_are_implied_entries_sorted_and_owned_by_root() {
        let mut l = Layer::new();
        l.file("usr/bin/b", b"b".to_vec(), 0o755).unwrap();
        l.file("etc/passwd", b"root".to_vec(), 0o644).unwrap();
        l.symlink("usr/bin/a", "b").unwrap();
        l.dir("tmp", 0o1777).unwrap();
        let t = l.to_tar(7).unwrap();
        let got: Vec<String> = paths(&t).into_iter().map(|p| p.0).collect();
        assert_eq!(
            got,
            [
                "etc/",
                "etc/passwd",
                "tmp/",
                "usr/",
                "usr/bin/",
                "usr/bin/a",
                "usr/bin/b"
            ]
        );
        for (p, mode, owners, mtime) in paths(&t) {
            assert_eq!(owners, 0, "{p}");
            assert_eq!(mtime, 7, "{p}");
            if p == "tmp/" {
                assert_eq!(mode, 0o1777);
            }
        }
    }

    #[test]
    fn insertion_order_does_not_change_the_bytes() {
        let mut a = Layer::new();
        a.file("x/1", b"1".to_vec(), 0o644).unwrap();
        a.file("y/2", b"2".to_vec(), 0o644).unwrap();
        let mut b = Layer::new();
        b.file("y/2", b"2".to_vec(), 0o644).unwrap();
        b.file("x/1", b"1".to_vec(), 0o644).unwrap();
        assert_eq!(a.to_tar(0).unwrap(), b.to_tar(0).unwrap());
    }

    #[test]
    fn bad_paths_and_conflicts_are_refused() {
        let mut l = Layer::new();
        for p in ["/abs", "a/../b", "", "a//b", "./a"] {
            assert!(
                matches!(l.file(p, vec![], 0o644), Err(LayerError::BadPath(_))),
                "{p}"
            );
        }
        l.file("a", b"1".to_vec(), 0o644).unwrap();
        l.file("a", b"1".to_vec(), 0o644).unwrap();
        assert!(matches!(
            l.file("a", b"2".to_vec(), 0o644),
            Err(LayerError::Conflict { .. })
        ));
        assert!(matches!(
            l.file("a/b", b"2".to_vec(), 0o644),
            Err(LayerError::ParentNotDir { .. })
        ));
    }
}
