//! Installing a plugin binary into the host's CNI bin directory atomically: the new file is
//! written beside the target (same directory, so the rename stays on one file system), synced,
//! given mode 0755 and renamed over the target; the directory is synced after. A runtime that
//! executes the plugin meanwhile runs either the old file or the new one. A file already equal
//! to the source (contents and mode) is left alone, so a rerun changes nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of an installed plugin.
pub const PLUGIN_MODE: u32 = 0o755;

/// Errors of installing, each naming the path and the fix.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the host CNI bin directory {0} does not exist: mount the host's /opt/cni/bin there (a hostPath volume) or point HOST_CNI_BIN_PATH / --host-cni-bin-dir at it")]
    DestMissing(PathBuf),
    #[error("the host CNI bin directory {0} is not a directory: point HOST_CNI_BIN_PATH / --host-cni-bin-dir at the mounted /opt/cni/bin")]
    DestNotDir(PathBuf),
    #[error("plugin {path} is missing from the image or unreadable ({source}): the image is incomplete, rebuild it with scripts/build-images.sh or fix --source-dir")]
    Source { path: PathBuf, source: io::Error },
    #[error("cannot write {path} ({source}): the host CNI bin directory must be mounted read-write and the init container run as root")]
    Write { path: PathBuf, source: io::Error },
}

/// What an install did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The target was missing or different and now is the source.
    Installed,
    /// The target already was the source: nothing written.
    Unchanged,
}

/// The temporary file beside `target` the new version is written to.
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.vpcnet-init.tmp"))
}

fn same(target: &Path, data: &[u8]) -> bool {
    match fs::metadata(target) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o7777 == PLUGIN_MODE => {
            m.len() == data.len() as u64 && fs::read(target).is_ok_and(|t| t == data)
        }
        _ => false,
    }
}

/// Installs `source` as `dest_dir/<name>`.
pub fn install(source: &Path, dest_dir: &Path, name: &str) -> Result<Outcome, InstallError> {
    match fs::metadata(dest_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(InstallError::DestMissing(dest_dir.to_path_buf()))
        }
        Err(e) => {
            return Err(InstallError::Write {
                path: dest_dir.to_path_buf(),
                source: e,
            })
        }
        Ok(m) if !m.is_dir() => return Err(InstallError::DestNotDir(dest_dir.to_path_buf())),
        Ok(_) => {}
    }
    let src_err = |e| InstallError::Source {
        path: source.to_path_buf(),
        source: e,
    };
    let mut data = Vec::new();
    File::open(source)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(src_err)?;
    let target = dest_dir.join(name);
    if same(&target, &data) {
        return Ok(Outcome::Unchanged);
    }
    let tmp = temp_path(&target);
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |e| InstallError::Write { path, source: e }
    };
    // A previous run that died between create and rename left this file behind.
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(write_err(&tmp)(e)),
        _ => {}
    }
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PLUGIN_MODE)
            .open(&tmp)?;
        f.write_all(&data)?;
        // The umask may have cleared bits of the create mode.
        f.set_permissions(fs::Permissions::from_mode(PLUGIN_MODE))?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(write_err(&target)(e));
    }
    // The rename itself is durable once the directory is synced.
    File::open(dest_dir)
        .and_then(|d| d.sync_all())
        .map_err(write_err(dest_dir))?;
    Ok(Outcome::Installed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn installs_with_mode_0755_and_a_rerun_changes_nothing() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let s = src.path().join("portmap");
        fs::write(&s, b"new plugin").unwrap();
        fs::set_permissions(&s, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            install(&s, dst.path(), "portmap").unwrap(),
            Outcome::Installed
        );
        let t = dst.path().join("portmap");
        assert_eq!(fs::read(&t).unwrap(), b"new plugin");
        assert_eq!(
            fs::metadata(&t).unwrap().permissions().mode() & 0o7777,
            0o755
        );
        let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&t).unwrap());
        assert_eq!(
            install(&s, dst.path(), "portmap").unwrap(),
            Outcome::Unchanged
        );
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(&t).unwrap()),
            ino,
            "an unchanged file is not rewritten"
        );
        assert_eq!(names(dst.path()), ["portmap"]);
        // Same contents but the wrong mode: installed again, mode fixed.
        fs::set_permissions(&t, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            install(&s, dst.path(), "portmap").unwrap(),
            Outcome::Installed
        );
        assert_eq!(
            fs::metadata(&t).unwrap().permissions().mode() & 0o7777,
            0o755
        );
    }

    #[test]
    fn a_reader_during_an_upgrade_sees_the_old_or_the_new_file_never_a_mix() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        // Large enough that a non-atomic copy would be seen half-written.
        let old: Vec<u8> = vec![b'o'; 4 << 20];
        let new: Vec<u8> = vec![b'n'; 5 << 20];
        let (so, sn) = (src.path().join("old"), src.path().join("new"));
        fs::write(&so, &old).unwrap();
        fs::write(&sn, &new).unwrap();
        let target = dst.path().join("vpcnet-cni");
        install(&so, dst.path(), "vpcnet-cni").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (stop, target, old, new) = (stop.clone(), target.clone(), old.clone(), new.clone());
            std::thread::spawn(move || {
                let mut reads = 0u32;
                while !stop.load(Ordering::SeqCst) || reads < 50 {
                    let got = fs::read(&target).expect("the target always exists");
                    assert!(
                        got == old || got == new,
                        "read {} bytes of a mixed file",
                        got.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..40 {
            let s = if i % 2 == 0 { &sn } else { &so };
            install(s, dst.path(), "vpcnet-cni").unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        let reads = reader.join().expect("reader saw only whole files");
        assert!(reads >= 50);
        assert_eq!(fs::read(&target).unwrap(), old);
        assert_eq!(names(dst.path()), ["vpcnet-cni"], "no temporary file left");
    }

    #[test]
    fn a_stale_temporary_file_is_replaced() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let s = src.path().join("bandwidth");
        fs::write(&s, b"bw").unwrap();
        fs::write(temp_path(&dst.path().join("bandwidth")), b"half").unwrap();
        install(&s, dst.path(), "bandwidth").unwrap();
        assert_eq!(names(dst.path()), ["bandwidth"]);
    }

    #[test]
    fn missing_source_and_missing_or_bad_destination_name_the_path_and_the_fix() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let s = src.path().join("vpcnet-cni");
        let e = install(&s, dst.path(), "vpcnet-cni")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&s.display().to_string()) && e.contains("rebuild it"),
            "{e}"
        );
        assert!(names(dst.path()).is_empty());

        fs::write(&s, b"x").unwrap();
        let gone = dst.path().join("not-mounted");
        let e = install(&s, &gone, "vpcnet-cni").unwrap_err().to_string();
        assert!(
            e.contains(&gone.display().to_string()) && e.contains("hostPath"),
            "{e}"
        );

        let file = dst.path().join("a-file");
        fs::write(&file, b"").unwrap();
        let e = install(&s, &file, "vpcnet-cni").unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
    }

    #[test]
    fn an_unwritable_destination_is_an_error_naming_it() {
        // A directory where the target should be: the rename fails, the temp file is removed.
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let s = src.path().join("portmap");
        fs::write(&s, b"x").unwrap();
        fs::create_dir(dst.path().join("portmap")).unwrap();
        fs::write(dst.path().join("portmap/keep"), b"").unwrap();
        let e = install(&s, dst.path(), "portmap").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot write {}",
                dst.path().join("portmap").display()
            )),
            "{e}"
        );
        assert_eq!(names(dst.path()), ["portmap"]);
    }
}
