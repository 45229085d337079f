//! Applying a plan: files written under a root directory, idempotently; or printed (dry run).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::node_files::{under_root, Change, NodeFile};

/// Writes `files` under `root`. A file whose content and mode already match is not touched,
/// so a second run changes nothing. Each write goes to a temporary file in the same directory
/// and is renamed into place (falling back to an in-place write where rename is impossible,
/// e.g. a bind-mounted /etc/hosts).
///
/// Errors: the first I/O error, with the path.
pub fn apply(root: &Path, files: &[NodeFile]) -> io::Result<Vec<(String, Change)>> {
    changes(root, files, true)
}

/// What [`apply`] would do to each file, without writing (for `--dry-run`).
pub fn preview(root: &Path, files: &[NodeFile]) -> io::Result<Vec<(String, Change)>> {
    changes(root, files, false)
}

fn changes(root: &Path, files: &[NodeFile], write: bool) -> io::Result<Vec<(String, Change)>> {
    let mut changes = Vec::new();
    for f in files {
        let p = under_root(root, &f.path);
        let exists = match fs::symlink_metadata(&p) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(with_path(e, &p)),
        };
        let change = match &f.content {
            None if !exists => Change::Absent,
            None if !write => Change::Removed,
            None => match fs::remove_file(&p) {
                Ok(()) => Change::Removed,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Change::Absent,
                Err(e) => return Err(with_path(e, &p)),
            },
            Some(content) => write_one(&p, content, f.mode, write).map_err(|e| with_path(e, &p))?,
        };
        changes.push((f.path.clone(), change));
    }
    Ok(changes)
}

fn write_one(p: &Path, content: &str, mode: u32, write: bool) -> io::Result<Change> {
    let existing = match fs::read(p) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(b) = &existing {
        let cur_mode = fs::metadata(p)?.permissions().mode() & 0o7777;
        if b == content.as_bytes() && cur_mode == mode {
            return Ok(Change::Unchanged);
        }
    }
    if !write {
        return Ok(if existing.is_some() {
            Change::Updated
        } else {
            Change::Created
        });
    }
    let dir = p
        .parent()
        .ok_or_else(|| io::Error::other("no parent directory"))?;
    fs::create_dir_all(dir)?;
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.vpcnet-bootstrap.{}", std::process::id()));
    let renamed = (|| {
        fs::write(&tmp, content)?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
        fs::rename(&tmp, p)
    })();
    if renamed.is_err() {
        let _ = fs::remove_file(&tmp);
        fs::write(p, content)?;
        fs::set_permissions(p, fs::Permissions::from_mode(mode))?;
    }
    Ok(if existing.is_some() {
        Change::Updated
    } else {
        Change::Created
    })
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

/// Prints `files` as they would be written: a header per file, then its content.
pub fn print_dry_run(files: &[NodeFile], out: &mut impl Write) -> io::Result<()> {
    for f in files {
        match &f.content {
            Some(c) => {
                writeln!(out, "### {} (mode {:04o})", f.path, f.mode)?;
                out.write_all(c.as_bytes())?;
                if !c.ends_with('\n') {
                    writeln!(out)?;
                }
            }
            None => writeln!(out, "### {} (removed if present)", f.path)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotent_and_removes() {
        let d = tempfile::tempdir().unwrap();
        let files = vec![
            NodeFile {
                path: "/etc/a/b.conf".into(),
                content: Some("x\n".into()),
                mode: 0o600,
            },
            NodeFile {
                path: "/etc/a/gone.conf".into(),
                content: None,
                mode: 0o644,
            },
        ];
        let c1 = apply(d.path(), &files).unwrap();
        assert_eq!(
            c1.iter().map(|c| c.1).collect::<Vec<_>>(),
            vec![Change::Created, Change::Absent]
        );
        let c2 = apply(d.path(), &files).unwrap();
        assert_eq!(c2[0].1, Change::Unchanged);
        let mode = fs::metadata(d.path().join("etc/a/b.conf"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        fs::write(d.path().join("etc/a/gone.conf"), "old").unwrap();
        let c3 = apply(d.path(), &files).unwrap();
        assert_eq!(c3[1].1, Change::Removed);
        let names: Vec<_> = fs::read_dir(d.path().join("etc/a"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("b.conf")],
            "no temporary files left"
        );
    }
}
