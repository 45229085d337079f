//! [`JsonLines`]: log lines as the VPC CNI writes them (zap's production JSON encoder with
//! ISO 8601 times): one JSON object per line, `level`, `ts`, `caller` and `msg` first, then the
//! event's other fields by name.
//!
//! ```text
//! {"level":"info","ts":"2026-12-07T06:10:00.123Z","caller":"reconciler/steps.rs:42","msg":"attached ENI","eni":"eni-0a1b"}
//! ```
//!
//! - `level`: `trace`, `debug`, `info`, `warn`, `error` (zap's names; zap has no trace).
//! - `ts`: UTC, milliseconds.
//! - `caller`: the source file's last directory and name with the line, as zap's short caller
//!   encoder writes `ipamd/ipamd.go:448`.
//! - Fields: strings, integers, floats and booleans keep their JSON types; any other value is
//!   its `Debug` text. A field named like one of the four keys is written as `field.<name>`.
//!   Span fields are not written (vpcnet logs events, not spans).

use std::fmt;
use std::time::SystemTime;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The keys every line starts with.
const KEYS: [&str; 4] = ["level", "ts", "caller", "msg"];

/// The event format of vpcnet's logs: `tracing_subscriber::fmt().event_format(JsonLines::new())`.
#[derive(Debug, Clone, Copy)]
pub struct JsonLines {
    now: fn() -> SystemTime,
}

impl JsonLines {
    /// Lines stamped with the system's wall clock.
    pub fn new() -> Self {
        JsonLines { now: wall_clock }
    }

    /// Lines stamped with `now`'s time (tests give a fixed one).
    pub fn with_clock(now: fn() -> SystemTime) -> Self {
        JsonLines { now }
    }
}

impl Default for JsonLines {
    fn default() -> Self {
        Self::new()
    }
}

#[allow(
    clippy::disallowed_methods,
    reason = "a log line's time is the wall time by definition"
)]
fn wall_clock() -> SystemTime {
    SystemTime::now()
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = line(
            *meta.level(),
            (self.now)(),
            &caller(meta.file(), meta.line()),
            fields,
        );
        writeln!(writer, "{line}")
    }
}

/// One line's JSON text.
fn line(level: Level, ts: SystemTime, caller: &str, fields: Fields) -> String {
    let mut out = Map::new();
    out.insert("level".into(), level_name(level).into());
    out.insert("ts".into(), timestamp(ts).into());
    out.insert("caller".into(), caller.into());
    out.insert("msg".into(), fields.msg.unwrap_or_default().into());
    for (name, value) in fields.rest {
        let key = if KEYS.contains(&name.as_str()) {
            format!("field.{name}")
        } else {
            name
        };
        out.insert(key, value);
    }
    // serde_json's map keeps insertion order only with its `preserve_order` feature; write the
    // four keys first by hand so the order does not depend on a feature another crate enables.
    let mut text = String::from("{");
    for key in KEYS {
        push_pair(&mut text, key, &out[key]);
    }
    for (key, value) in &out {
        if !KEYS.contains(&key.as_str()) {
            push_pair(&mut text, key, value);
        }
    }
    text.push('}');
    text
}

fn push_pair(text: &mut String, key: &str, value: &Value) {
    if text.len() > 1 {
        text.push(',');
    }
    text.push_str(&Value::from(key).to_string());
    text.push(':');
    text.push_str(&value.to_string());
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warn",
        Level::ERROR => "error",
    }
}

/// ISO 8601 in UTC with milliseconds, as zap's `ISO8601TimeEncoder` writes UTC times.
fn timestamp(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// `dir/file.rs:line` from the event's source file.
fn caller(file: Option<&str>, line: Option<u32>) -> String {
    let Some(file) = file else {
        return String::new();
    };
    let mut parts = file.rsplit(['/', '\\']);
    let name = parts.next().unwrap_or(file);
    let short = match parts.next() {
        Some(dir) if !dir.is_empty() => format!("{dir}/{name}"),
        _ => name.to_string(),
    };
    match line {
        Some(l) => format!("{short}:{l}"),
        None => short,
    }
}

/// The event's fields: `message` apart, the others by name in the order recorded.
#[derive(Default)]
struct Fields {
    msg: Option<String>,
    rest: Vec<(String, Value)>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.msg = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.rest.push((field.name().to_string(), value));
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn fixed() -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_796_623_800_123)
    }

    /// The lines `f` logs at TRACE and above through [`JsonLines`].
    fn logged(f: impl FnOnce()) -> Vec<String> {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .event_format(JsonLines::with_clock(fixed))
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(sub, f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_line_is_the_vpc_cni_shape_with_the_fields_after() {
        let lines = logged(|| {
            tracing::info!(
                eni = "eni-0a1b",
                ips = 14u64,
                warm = true,
                "attached \"ENI\""
            )
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert!(
            line.starts_with(
                r#"{"level":"info","ts":"2026-12-07T06:10:00.123Z","caller":"src/json.rs:"#
            ),
            "{line}"
        );
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["msg"], "attached \"ENI\"");
        assert_eq!(v["eni"], "eni-0a1b");
        assert_eq!(v["ips"], 14);
        assert_eq!(v["warm"], true);
        let caller = v["caller"].as_str().unwrap();
        let (_, n) = caller.rsplit_once(':').unwrap();
        assert!(n.parse::<u32>().unwrap() > 0, "{caller}");
    }

    #[test]
    fn levels_have_zaps_names_and_debug_values_are_text() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Pod {
            name: &'static str,
        }
        let lines = logged(|| {
            tracing::trace!("t");
            tracing::debug!("d");
            tracing::warn!(pod = ?Pod { name: "a" }, "w");
            tracing::error!(msg = "x", level = 3, "e");
        });
        let v: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let levels: Vec<&str> = v.iter().map(|l| l["level"].as_str().unwrap()).collect();
        assert_eq!(levels, ["trace", "debug", "warn", "error"]);
        assert_eq!(v[2]["pod"], r#"Pod { name: "a" }"#);
        // A field named like a key does not replace it.
        assert_eq!(v[3]["msg"], "e");
        assert_eq!(v[3]["field.msg"], "x");
        assert_eq!(v[3]["level"], "error");
        assert_eq!(v[3]["field.level"], 3);
    }

    #[test]
    fn caller_is_the_last_directory_file_and_line() {
        assert_eq!(
            caller(
                Some("crates/vpcnet-agent/src/reconciler/steps.rs"),
                Some(42)
            ),
            "reconciler/steps.rs:42"
        );
        assert_eq!(caller(Some("main.rs"), Some(7)), "main.rs:7");
        assert_eq!(caller(Some("src/lib.rs"), None), "src/lib.rs");
        assert_eq!(caller(None, Some(1)), "");
    }
}
