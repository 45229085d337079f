//! A log file rotated by size: the policy ([`Rotation`]) and the open file ([`RotatingFile`]).

use std::fmt;
use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rolling_file::{BasicRollingFileAppender, RollingConditionBasic};

/// When a log file is rotated and how many rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// A write to a file of at least this size first moves it to `<file>.1`.
    pub max_bytes: u64,
    /// Rotated files kept: `<file>.1` (newest) to `<file>.<backups>`; older ones are deleted.
    pub backups: usize,
}

impl Rotation {
    /// The VPC CNI's policy for ipamd's and the plugin's logs (its logger's `MaxSize` of 100
    /// megabytes, counted in MiB, and `MaxBackups` of 5). The VPC CNI also gzips rotated files
    /// and deletes them after 30 days; vpcnet keeps them uncompressed and by count only.
    pub const VPC_CNI: Rotation = Rotation {
        max_bytes: 100 * 1024 * 1024,
        backups: 5,
    };

    /// The VPC CNI node agent's policy for its log, which holds the policy event log
    /// (`network-policy-agent.log`: `MaxSize` 200 megabytes, `MaxBackups` 8). It also gzips
    /// rotated files and deletes them after 30 days; vpcnet keeps them uncompressed, by count.
    pub const NODE_AGENT: Rotation = Rotation {
        max_bytes: 200 * 1024 * 1024,
        backups: 8,
    };
}

/// A log file that cannot be opened.
#[derive(Debug)]
pub struct OpenError {
    pub path: PathBuf,
    /// What failed: creating the file's directory, or opening the file.
    pub step: &'static str,
    pub source: io::Error,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot {} {}: {}",
            self.step,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// An open log file, rotated by its [`Rotation`]; lines are appended, unbuffered, so a crash
/// loses none.
#[derive(Debug)]
pub struct RotatingFile {
    file: Mutex<BasicRollingFileAppender>,
}

impl RotatingFile {
    /// Creates the file's directory (mode 0755, as the VPC CNI does) and opens the file for
    /// appending, creating it.
    pub fn open(path: &Path, rotation: Rotation) -> Result<RotatingFile, OpenError> {
        let fail = |step, source| OpenError {
            path: path.to_path_buf(),
            step,
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| fail("create the directory of", e))?;
        }
        let condition = RollingConditionBasic::new().max_size(rotation.max_bytes);
        // Buffer capacity 0: every line goes to the file as it is written.
        let file = BasicRollingFileAppender::new_with_buffer_capacity(
            path,
            condition,
            rotation.backups,
            0,
        )
        .map_err(|e| fail("open", e))?;
        Ok(RotatingFile {
            file: Mutex::new(file),
        })
    }

    /// The file, for one write. A writer that panicked mid-line leaves it usable.
    pub fn lock(&self) -> MutexGuard<'_, BasicRollingFileAppender> {
        self.file.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_vpc_cni_policy() {
        // amazon-vpc-cni-k8s pkg/utils/logger: lumberjack MaxSize 100 (MB of 2^20 bytes),
        // MaxBackups 5.
        assert_eq!(Rotation::VPC_CNI.max_bytes, 104_857_600);
        assert_eq!(Rotation::VPC_CNI.backups, 5);
    }

    fn write_line(f: &RotatingFile, line: &str) {
        f.lock().write_all(line.as_bytes()).unwrap();
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap_or_default()
    }

    #[test]
    fn a_full_file_moves_to_dot_1_and_only_backups_files_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ipamd.log");
        let policy = Rotation {
            max_bytes: 10,
            backups: 2,
        };
        let f = RotatingFile::open(&log, policy).unwrap();
        write_line(&f, "line-1 ...\n"); // 11 bytes: the file is now full
        assert_eq!(read(&log), "line-1 ...\n");
        write_line(&f, "line-2 ...\n");
        assert_eq!(read(&log), "line-2 ...\n");
        assert_eq!(read(&dir.path().join("ipamd.log.1")), "line-1 ...\n");
        write_line(&f, "line-3 ...\n");
        write_line(&f, "line-4 ...\n");
        assert_eq!(read(&log), "line-4 ...\n");
        assert_eq!(read(&dir.path().join("ipamd.log.1")), "line-3 ...\n");
        assert_eq!(read(&dir.path().join("ipamd.log.2")), "line-2 ...\n");
        assert!(!dir.path().join("ipamd.log.3").exists());
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["ipamd.log", "ipamd.log.1", "ipamd.log.2"]);
    }

    #[test]
    fn lines_append_to_an_existing_file_below_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("plugin.log");
        std::fs::write(&log, "before\n").unwrap();
        let f = RotatingFile::open(&log, Rotation::VPC_CNI).unwrap();
        write_line(&f, "after\n");
        assert_eq!(read(&log), "before\nafter\n");
        assert!(!dir.path().join("plugin.log.1").exists());
    }

    #[test]
    fn an_existing_file_at_the_vpc_cni_limit_is_rotated_by_the_first_line() {
        // The VPC CNI's own size, without writing 100 MiB: a sparse file of exactly that size.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ipamd.log");
        std::fs::File::create(&log)
            .unwrap()
            .set_len(Rotation::VPC_CNI.max_bytes)
            .unwrap();
        let f = RotatingFile::open(&log, Rotation::VPC_CNI).unwrap();
        write_line(&f, "first\n");
        assert_eq!(read(&log), "first\n");
        let rotated = dir.path().join("ipamd.log.1");
        assert_eq!(
            std::fs::metadata(&rotated).unwrap().len(),
            Rotation::VPC_CNI.max_bytes
        );
    }

    #[test]
    fn one_byte_short_of_the_limit_is_not_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ipamd.log");
        std::fs::File::create(&log)
            .unwrap()
            .set_len(Rotation::VPC_CNI.max_bytes - 1)
            .unwrap();
        let f = RotatingFile::open(&log, Rotation::VPC_CNI).unwrap();
        write_line(&f, "x\n");
        assert!(!dir.path().join("ipamd.log.1").exists());
        assert_eq!(
            std::fs::metadata(&log).unwrap().len(),
            Rotation::VPC_CNI.max_bytes + 1
        );
    }

    #[test]
    fn a_missing_directory_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("var/log/aws-routed-eni/ipamd.log");
        let f = RotatingFile::open(&log, Rotation::VPC_CNI).unwrap();
        write_line(&f, "hello\n");
        assert_eq!(read(&log), "hello\n");
    }

    #[test]
    fn an_impossible_path_is_an_error_naming_the_path_and_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let log = file.join("ipamd.log");
        let e = RotatingFile::open(&log, Rotation::VPC_CNI).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "cannot create the directory of {}: ",
                log.display()
            )),
            "{msg}"
        );
        assert_eq!(e.source.kind(), io::ErrorKind::AlreadyExists, "{msg}");

        let e = RotatingFile::open(dir.path(), Rotation::VPC_CNI).unwrap_err();
        assert!(e.to_string().starts_with("cannot open "), "{e}");
    }
}
