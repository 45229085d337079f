//! The kubelet unit as systemd runs it: unit file + drop-ins → environment → kubelet's argv.
//!
//! [`kubelet_command_line`] reads the kubelet unit and its drop-ins under a root directory and
//! expands them the way systemd does (systemd.service(5) "Command lines", systemd.exec(5)
//! `Environment=`/`EnvironmentFile=`, systemd.unit(5) drop-ins and specifiers), so tests and
//! the lab can check, and run, exactly the command line kubelet gets on a node:
//!
//! - drop-ins `*.conf` of `kubelet.service.d/` in `/etc/systemd/system`, `/run/systemd/system`
//!   and `/usr/lib/systemd/system` are applied after the unit in file-name order (a name in
//!   `/etc` hides the same name in `/run`, which hides `/usr/lib`);
//! - `Environment=` assignments apply in order (later wins); `EnvironmentFile=` files
//!   (`-` prefix: may be missing) override them; an empty assignment resets either list;
//! - `ExecStart=`: an empty value resets it (a drop-in replaces the unit's command this way);
//!   words are unquoted and C-unescaped; then `$NAME` standing alone as a word becomes the
//!   variable's value split at whitespace (quotes in the value group words; zero words when
//!   empty or unset), while `${NAME}` (alone or inside a word) becomes exactly one word with
//!   the value as is, and `$$` is a literal `$`;
//! - specifiers `%%` (a literal `%`), `%n`, `%N`, `%p`, `%i`, `%t` are resolved; any other is an
//!   error rather than a silent difference from systemd.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::BootstrapError;
use crate::node_files::under_root;

/// Where vpcnet-bootstrap installs the kubelet unit (systemd's administrator unit directory).
pub const KUBELET_UNIT_PATH: &str = "/etc/systemd/system/kubelet.service";

/// Unit directories in systemd's priority order, highest first.
pub const UNIT_DIRS: [&str; 3] = [
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/lib/systemd/system",
];

/// Which kubelet unit file [`kubelet_command_line`] expands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// The `kubelet.service` installed under the root (the first found in `/etc`, `/run`,
    /// `/usr/lib` `systemd/system`): what systemd on that node would run.
    Installed,
    /// Any unit file text (e.g. an AMI's unit, to expand the drop-ins under it).
    Text(String),
}

/// Kubelet's argv as systemd would start it on the node rooted at `root`: `unit` plus the
/// drop-ins and environment files found under `root` (paths in the result are the node's
/// own, e.g. `/etc/kubernetes/kubelet/kubelet-config.json`; `argv[0]` is the unit's binary).
///
/// Errors ([`BootstrapError::Unit`], naming the file and line): no unit installed (with
/// [`Unit::Installed`]), an unreadable drop-in or required environment file, no `ExecStart=`,
/// two `ExecStart=` without a reset, an unknown specifier.
pub fn kubelet_command_line(root: &Path, unit: Unit) -> Result<Vec<String>, BootstrapError> {
    let files = unit_files(root, unit)?;
    let service = Service::parse(&files, "kubelet.service")?;
    let read = |path: &str| read_node_file(root, path);
    let mut env = BTreeMap::new();
    for (k, v) in &service.environment {
        env.insert(k.clone(), v.clone());
    }
    for (path, optional) in &service.environment_files {
        match read(path)? {
            Some(text) => {
                for (k, v) in parse_env_file(path, &text)? {
                    env.insert(k, v);
                }
            }
            None if *optional => {}
            None => {
                return Err(unit_error(
                    path,
                    0,
                    "EnvironmentFile= names a file that does not exist (prefix it with - to allow that)",
                ))
            }
        }
    }
    Ok(expand_command(&service.exec_start, &env))
}

/// The kubelet unit (`unit`) and its drop-ins under `root`, as (node path, text) in the order
/// systemd applies them (module docs). Errors as [`kubelet_command_line`].
pub fn unit_files(root: &Path, unit: Unit) -> Result<Vec<(String, String)>, BootstrapError> {
    let read = |path: &str| read_node_file(root, path);
    let (unit_path, unit_text) = match unit {
        Unit::Installed => {
            let mut found = None;
            for dir in UNIT_DIRS {
                let p = format!("{dir}/kubelet.service");
                if let Some(t) = read(&p)? {
                    found = Some((p, t));
                    break;
                }
            }
            found.ok_or_else(|| {
                unit_error(
                    KUBELET_UNIT_PATH,
                    0,
                    format!("no kubelet.service under {}: run vpcnet-bootstrap (it installs or keeps one) or pass another unit", root.display()),
                )
            })?
        }
        Unit::Text(t) => ("(unit text)".to_string(), t),
    };
    let mut dropins: BTreeMap<String, String> = BTreeMap::new();
    for dir in UNIT_DIRS.iter().rev() {
        let d = format!("{dir}/kubelet.service.d");
        let Ok(entries) = std::fs::read_dir(under_root(root, &d)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") {
                // Higher-priority directories come later and replace the same name.
                dropins.insert(name.clone(), format!("{d}/{name}"));
            }
        }
    }
    let mut files = vec![(unit_path, unit_text)];
    for path in dropins.into_values() {
        let text = read(&path)?.unwrap_or_default();
        files.push((path, text));
    }
    Ok(files)
}

/// A file under `root` (`None` when absent); errors name it.
fn read_node_file(root: &Path, path: &str) -> Result<Option<String>, BootstrapError> {
    match std::fs::read_to_string(under_root(root, path)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(unit_error(path, 0, format!("cannot read: {e}"))),
    }
}

/// Every directive of `files` (as [`unit_files`] gives them): (file, section, key, value), in
/// order, `\` continuations joined, specifiers not resolved.
pub fn unit_directives(files: &[(String, String)]) -> Vec<(String, String, String, String)> {
    files
        .iter()
        .flat_map(|(path, text)| {
            directives(text)
                .into_iter()
                .map(move |(_, section, k, v)| (path.clone(), section, k, v))
        })
        .collect()
}

/// The `[Service]` settings that make up a command line, after the unit and its drop-ins.
#[derive(Debug, Default)]
pub struct Service {
    /// `Environment=` assignments in order (later wins).
    pub environment: Vec<(String, String)>,
    /// `EnvironmentFile=` paths in order, with whether the file may be missing (`-`).
    pub environment_files: Vec<(String, bool)>,
    /// `ExecStart=` words after unquoting, before variable expansion.
    pub exec_start: Vec<String>,
}

impl Service {
    /// Applies `files` (path, text) in order: the unit file first, then its drop-ins.
    /// `unit_name` resolves `%n`, `%N`, `%p`.
    pub fn parse(files: &[(String, String)], unit_name: &str) -> Result<Service, BootstrapError> {
        let mut s = Service::default();
        let mut exec: Option<(Vec<String>, String, usize)> = None;
        for (path, text) in files {
            for (line_no, section, key, value) in directives(text) {
                if section != "Service" {
                    continue;
                }
                let err = |p: String| unit_error(path, line_no, p);
                let value = specifiers(&value, unit_name).map_err(err)?;
                match key.as_str() {
                    "Environment" => {
                        if value.trim().is_empty() {
                            s.environment.clear();
                        }
                        for word in split_words(&value, Unescape::C) {
                            if let Some((k, v)) = word.split_once('=') {
                                if valid_name(k) {
                                    s.environment.push((k.to_string(), v.to_string()));
                                }
                            }
                        }
                    }
                    "EnvironmentFile" => {
                        let v = value.trim();
                        if v.is_empty() {
                            s.environment_files.clear();
                        } else if let Some(p) = v.strip_prefix('-') {
                            s.environment_files.push((p.to_string(), true));
                        } else {
                            s.environment_files.push((v.to_string(), false));
                        }
                    }
                    "ExecStart" => {
                        if value.trim().is_empty() {
                            exec = None;
                            continue;
                        }
                        if let Some((_, first_path, first_line)) = &exec {
                            return Err(err(format!("a second ExecStart= (the first is at {first_path}:{first_line}); a drop-in replaces the command with an empty ExecStart= line first")));
                        }
                        let mut words = split_words(&value, Unescape::C);
                        if let Some(first) = words.first_mut() {
                            // Prefixes change failure handling and privileges, not the argv
                            // (`:` would also turn variable expansion off: keep it to say so).
                            let bare = first.trim_start_matches(['-', '@', '+', '!']);
                            *first = bare.to_string();
                        }
                        words.retain(|w| !w.is_empty());
                        exec = Some((words, path.clone(), line_no));
                    }
                    _ => {}
                }
            }
        }
        s.exec_start = exec
            .map(|(w, _, _)| w)
            .ok_or_else(|| unit_error(&files[0].0, 0, "no ExecStart= in [Service]"))?;
        Ok(s)
    }
}

/// Substitutes the environment into `exec_start` as systemd does (module docs). A first word
/// starting with `:` turns substitution off (the `:` is dropped).
pub fn expand_command(exec_start: &[String], env: &BTreeMap<String, String>) -> Vec<String> {
    if let Some(first) = exec_start.first() {
        if let Some(bare) = first.strip_prefix(':') {
            let mut out = vec![bare.to_string()];
            out.extend(exec_start[1..].iter().cloned());
            return out;
        }
    }
    let mut out = Vec::new();
    for word in exec_start {
        match word.strip_prefix('$') {
            Some(name) if !name.starts_with('{') && !name.starts_with('$') && valid_name(name) => {
                if let Some(v) = env.get(name) {
                    out.extend(split_args(v));
                }
            }
            _ => out.push(replace_braced(word, env)),
        }
    }
    out
}

/// Splits a variable's value into arguments as systemd does for `$NAME` on a command line:
/// at whitespace, with `'...'`/`"..."` grouping words and `\` escaping the next character;
/// an unterminated quote runs to the end. Also what vpcnet reads kubelet's extra flags with,
/// so it sees exactly the arguments kubelet gets.
pub fn split_args(value: &str) -> Vec<String> {
    split_words(value, Unescape::Plain)
}

/// How a backslash outside of the quote handling is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unescape {
    /// `\x` is `x` (variable values split for a command line).
    Plain,
    /// C escapes: `\n`, `\t`, `\\`, `\"`, `\'`, `\xNN`, ...; unknown ones keep the backslash
    /// (unit file values).
    C,
}

fn split_words(s: &str, unescape: Unescape) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            in_word = true;
            match chars.next() {
                None => {}
                Some(n) if unescape == Unescape::C => cur.push_str(&c_unescape(n, &mut chars)),
                Some(n) => cur.push(n),
            }
            continue;
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// One C escape after a backslash (`n` is the character after it).
fn c_unescape(n: char, rest: &mut std::iter::Peekable<std::str::Chars<'_>>) -> String {
    match n {
        'a' => "\u{7}".into(),
        'b' => "\u{8}".into(),
        'f' => "\u{c}".into(),
        'n' => "\n".into(),
        'r' => "\r".into(),
        't' => "\t".into(),
        'v' => "\u{b}".into(),
        's' => " ".into(),
        '\\' | '"' | '\'' | '$' => n.to_string(),
        'x' => {
            let hex: String = (0..2)
                .filter_map(|_| rest.next_if(|c| c.is_ascii_hexdigit()))
                .collect();
            match u8::from_str_radix(&hex, 16) {
                Ok(b) if hex.len() == 2 => char::from(b).to_string(),
                _ => format!("\\x{hex}"),
            }
        }
        other => format!("\\{other}"),
    }
}

/// `${NAME}` → the value as is (empty when unset), `$$` → `$`; anything else unchanged.
fn replace_braced(word: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => {
                    out.push_str(env.get(&inner[..end]).map_or("", String::as_str));
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str(&rest[i..]);
                    rest = "";
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Resolves unit specifiers in `value` (module docs); errors name an unsupported one.
fn specifiers(value: &str, unit_name: &str) -> Result<String, String> {
    let prefix = unit_name.rsplit_once('.').map_or(unit_name, |(p, _)| p);
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('n') => out.push_str(unit_name),
            Some('N') | Some('p') => out.push_str(prefix),
            Some('i') => {}
            Some('t') => out.push_str("/run"),
            Some(other) => {
                return Err(format!(
                    "specifier %{other} is not supported here; write %% for a literal %"
                ))
            }
            None => return Err("a lone % at the end; write %% for a literal %".into()),
        }
    }
    Ok(out)
}

/// `(line number, section, key, value)` of every directive, with `\` continuations joined
/// (comment lines inside a continuation are skipped, as systemd does).
fn directives(text: &str) -> Vec<(usize, String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_some() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        let (start, mut joined) = match pending.take() {
            Some((start, acc)) => (start, acc + line),
            None => {
                if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                    continue;
                }
                if line.starts_with('[') && line.ends_with(']') {
                    section = line[1..line.len() - 1].to_string();
                    continue;
                }
                (i + 1, line.to_string())
            }
        };
        if joined.ends_with('\\') {
            joined.pop();
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        if let Some((k, v)) = joined.split_once('=') {
            out.push((
                start,
                section.clone(),
                k.trim().to_string(),
                v.trim().to_string(),
            ));
        }
    }
    if let Some((start, joined)) = pending {
        if let Some((k, v)) = joined.split_once('=') {
            out.push((start, section, k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// Parses an `EnvironmentFile=`: `NAME=value` lines, `#`/`;` comments, values unquoted as a
/// shell would (`"..."` with `\"`, `\\`, `\$` escapes, `'...'` literal, unquoted `\x` → `x`),
/// trailing whitespace of unquoted values dropped.
pub fn parse_env_file(path: &str, text: &str) -> Result<Vec<(String, String)>, BootstrapError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(unit_error(path, i + 1, "not a NAME=value line"));
        };
        let k = k.trim();
        if !valid_name(k) {
            return Err(unit_error(
                path,
                i + 1,
                format!("{k:?} is not a variable name"),
            ));
        }
        let mut value = String::new();
        let mut quote: Option<char> = None;
        let mut chars = v.trim_start().chars();
        let mut trailing = 0usize;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('\''), '\'') | (Some('"'), '"') => quote = None,
                (Some('"'), '\\') => match chars.next() {
                    Some(n @ ('"' | '\\' | '$' | '`')) => value.push(n),
                    Some(n) => {
                        value.push('\\');
                        value.push(n);
                    }
                    None => value.push('\\'),
                },
                (Some(_), c) => value.push(c),
                (None, '\'' | '"') => {
                    quote = Some(c);
                    trailing = 0;
                }
                (None, '\\') => {
                    if let Some(n) = chars.next() {
                        value.push(n);
                    }
                    trailing = 0;
                }
                (None, c) => {
                    value.push(c);
                    trailing = if c.is_whitespace() {
                        trailing + c.len_utf8()
                    } else {
                        0
                    };
                }
            }
        }
        value.truncate(value.len() - trailing);
        out.push((k.to_string(), value));
    }
    Ok(out)
}

/// The value to write after `Environment=` so systemd sets `name` to exactly `value`:
/// single-quoted as bootstrap.sh writes it (`'NAME=value'`), or double-quoted when the value
/// holds a `'`; `\` (and `"` inside double quotes) C-escaped, `%` doubled (specifiers are
/// resolved first). Line breaks must have been replaced by the caller (they would end the
/// directive).
pub fn environment_assignment(name: &str, value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('%', "%%");
    if escaped.contains('\'') {
        format!("\"{name}={}\"", escaped.replace('"', "\\\""))
    } else {
        format!("'{name}={escaped}'")
    }
}

fn valid_name(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn unit_error(path: &str, line: usize, problem: impl Into<String>) -> BootstrapError {
    BootstrapError::Unit {
        path: if line > 0 {
            format!("{path}:{line}")
        } else {
            path.to_string()
        },
        problem: problem.into(),
    }
}

#[cfg(test)]
mod tests;
