//! The checkpoint on disk: JSON, mode 0600, written atomically (temp file in the same
//! directory, fsync, rename, fsync of the directory), behind [`CheckpointStore`] so tests can
//! make reads and writes fail.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use vpcnet_ipam::Checkpoint;

/// What was found at the checkpoint path.
#[derive(Debug)]
pub enum Loaded {
    /// No file: a fresh node.
    Missing,
    Valid(Checkpoint),
    /// Unreadable or invalid; the file was moved to `moved_to` (`<path>.corrupt-<ms>`).
    Corrupt {
        reason: String,
        moved_to: Option<PathBuf>,
    },
}

/// Where the agent keeps its checkpoint. One real adapter ([`FileCheckpoint`]); tests wrap it
/// to inject failures.
pub trait CheckpointStore: Send + Sync + 'static {
    /// Reads the checkpoint at start (`now_ms`, ms since the epoch, names a corrupt file
    /// moved aside).
    fn load(&self, now_ms: u64) -> Loaded;
    /// Replaces the checkpoint with `cp`, atomically: after an error the previous
    /// checkpoint is still in place.
    fn write(&self, cp: &Checkpoint) -> std::io::Result<()>;
    /// Where it is, for logs and errors (a path).
    fn location(&self) -> String;
}

/// The checkpoint file at `path` ([`load`], [`write`]).
#[derive(Debug, Clone)]
pub struct FileCheckpoint {
    pub path: PathBuf,
}

impl CheckpointStore for FileCheckpoint {
    fn load(&self, now_ms: u64) -> Loaded {
        load(&self.path, now_ms)
    }

    fn write(&self, cp: &Checkpoint) -> std::io::Result<()> {
        write(&self.path, cp)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

/// A checkpoint write failed; the assignment or release it was to record did not happen
/// on disk.
#[derive(Debug, thiserror::Error)]
#[error("cannot write checkpoint {location}")]
pub struct CheckpointWriteError {
    pub location: String,
    #[source]
    pub source: std::io::Error,
}

/// Reads the checkpoint; a corrupt file is moved aside so the next write does not
/// destroy the evidence.
pub fn load(path: &Path, now_ms: u64) -> Loaded {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Missing,
        Err(e) => return corrupt(path, format!("cannot read {}: {e}", path.display()), now_ms),
    };
    match Checkpoint::from_json(&text) {
        Ok(cp) => Loaded::Valid(cp),
        Err(e) => corrupt(path, e.to_string(), now_ms),
    }
}

fn corrupt(path: &Path, reason: String, now_ms: u64) -> Loaded {
    let aside = PathBuf::from(format!("{}.corrupt-{now_ms}", path.display()));
    let moved_to = fs::rename(path, &aside).ok().map(|_| aside);
    Loaded::Corrupt { reason, moved_to }
}

/// Writes `cp` to `path` atomically with mode 0600.
pub fn write(path: &Path, cp: &Checkpoint) -> std::io::Result<()> {
    write_atomic(path, cp.to_json().as_bytes())
}

/// Replaces the file at `path` with `bytes` atomically (temp file in the same directory, fsync,
/// rename, fsync of the directory), mode 0600; creates the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("ipam.json")
    ));
    {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_mode_and_corrupt_file_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ipam.json");
        assert!(matches!(load(&p, 1), Loaded::Missing));
        let cp = Checkpoint {
            version: vpcnet_ipam::CHECKPOINT_VERSION,
            assignments: vec![],
            cooldowns: vec![],
        };
        write(&p, &cp).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(matches!(load(&p, 1), Loaded::Valid(c) if c == cp));
        fs::write(&p, "{garbage").unwrap();
        match load(&p, 42) {
            Loaded::Corrupt { reason, moved_to } => {
                assert!(reason.contains("JSON"), "{reason}");
                assert_eq!(moved_to.unwrap(), dir.path().join("ipam.json.corrupt-42"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!p.exists());
    }
}
