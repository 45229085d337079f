//! [`LogWriter`]: the `tracing_subscriber` writer for a [`Target`].

use std::io::{self, Write};
use std::sync::MutexGuard;

use rolling_file::BasicRollingFileAppender;
use tracing_subscriber::fmt::MakeWriter;

use crate::{OpenError, RotatingFile, Rotation, Target};

/// Writes log lines to stdout, stderr or a rotated file.
#[derive(Debug)]
pub enum LogWriter {
    Stdout,
    Stderr,
    File(RotatingFile),
}

impl LogWriter {
    /// The writer for `target`; a file is opened now (its directory created), with `rotation`.
    pub fn open(target: &Target, rotation: Rotation) -> Result<LogWriter, OpenError> {
        Ok(match target {
            Target::Stdout => LogWriter::Stdout,
            Target::Stderr => LogWriter::Stderr,
            Target::File(path) => LogWriter::File(RotatingFile::open(path, rotation)?),
        })
    }
}

/// One line's writer, from [`LogWriter`].
pub enum Output<'a> {
    Stdout(io::StdoutLock<'static>),
    Stderr(io::StderrLock<'static>),
    File(MutexGuard<'a, BasicRollingFileAppender>),
}

impl Write for Output<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Output::Stdout(w) => w.write(buf),
            Output::Stderr(w) => w.write(buf),
            Output::File(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Stdout(w) => w.flush(),
            Output::Stderr(w) => w.flush(),
            Output::File(w) => w.flush(),
        }
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Output<'a>;

    fn make_writer(&'a self) -> Output<'a> {
        match self {
            LogWriter::Stdout => Output::Stdout(io::stdout().lock()),
            LogWriter::Stderr => Output::Stderr(io::stderr().lock()),
            LogWriter::File(f) => Output::File(f.lock()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_gets_its_writer() {
        let r = Rotation::VPC_CNI;
        assert!(matches!(
            LogWriter::open(&Target::Stdout, r),
            Ok(LogWriter::Stdout)
        ));
        assert!(matches!(
            LogWriter::open(&Target::Stderr, r),
            Ok(LogWriter::Stderr)
        ));
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ipamd.log");
        let w = LogWriter::open(&Target::File(log.clone()), r).unwrap();
        // Opened at once: the file exists before any line.
        assert!(log.exists());
        w.make_writer().write_all(b"a line\n").unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "a line\n");
    }

    #[test]
    fn a_subscriber_writes_its_lines_to_the_file_at_its_level() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("plugin.log");
        let w = LogWriter::open(&Target::File(log.clone()), Rotation::VPC_CNI).unwrap();
        let subscriber = tracing_subscriber::fmt()
            .event_format(crate::JsonLines::new())
            .with_writer(w)
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("shown at info");
            tracing::debug!("hidden at info");
        });
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.starts_with(r#"{"level":"info","#) && text.contains(r#""msg":"shown at info""#),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("hidden"), "{text}");
    }
}
