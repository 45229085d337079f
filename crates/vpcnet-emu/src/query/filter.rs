//! Describe-call filters (EC2 semantics: values of one filter are OR-ed, filters are AND-ed,
//! `*` and `?` are wildcards) and NextToken pagination.

use crate::error::Ec2Error;
use crate::model::Tags;
use crate::query::params::Filter;

/// EC2 wildcard match: `*` any run of characters, `?` one character.
pub fn glob(pattern: &str, value: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    let (mut pi, mut vi) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while vi < v.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == v[vi]) {
            pi += 1;
            vi += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = vi;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            vi = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Values of the generic tag filters `tag:KEY`, `tag-key`, `tag-value`; None if `name` is not one.
pub fn tag_values(tags: &Tags, name: &str) -> Option<Vec<String>> {
    if let Some(key) = name.strip_prefix("tag:") {
        return Some(
            tags.get(key)
                .map(|v| vec![v.to_string()])
                .unwrap_or_default(),
        );
    }
    match name {
        "tag-key" => Some(tags.0.iter().map(|(k, _)| k.clone()).collect()),
        "tag-value" => Some(tags.0.iter().map(|(_, v)| v.clone()).collect()),
        _ => None,
    }
}

/// Whether an object passes every filter; `values(name)` gives the object's values for a filter
/// name, None for a name the resource does not support (→ `InvalidParameterValue`).
pub fn matches(
    filters: &[Filter],
    values: impl Fn(&str) -> Option<Vec<String>>,
) -> Result<bool, Ec2Error> {
    for f in filters {
        let have = values(&f.name).ok_or_else(|| {
            Ec2Error::invalid_value(format!("The filter '{}' is invalid", f.name))
        })?;
        if !f
            .values
            .iter()
            .any(|want| have.iter().any(|h| glob(want, h)))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// One page of `items` (sorted by key) after `next_token`, at most `max` long; the returned
/// token resumes after the page's last item. Errors: `InvalidParameterValue` for MaxResults out
/// of `range`, `InvalidPaginationToken` for a token this emulator did not issue.
pub fn page<T>(
    items: Vec<(String, T)>,
    max: Option<u32>,
    range: (u32, u32),
    next_token: Option<&str>,
) -> Result<(Vec<T>, Option<String>), Ec2Error> {
    if let Some(m) = max {
        if m < range.0 || m > range.1 {
            return Err(Ec2Error::invalid(
                "MaxResults",
                &m.to_string(),
                &format!("Expected a value between {} and {}.", range.0, range.1),
            ));
        }
    }
    let after = match next_token {
        None | Some("") => None,
        Some(t) => Some(decode_token(t).ok_or_else(|| {
            Ec2Error::new(
                "InvalidPaginationToken",
                format!("The pagination token '{t}' is not valid"),
            )
        })?),
    };
    let mut rest: Vec<(String, T)> = items
        .into_iter()
        .filter(|(k, _)| after.as_ref().is_none_or(|a| k > a))
        .collect();
    let limit = max.map(|m| m as usize).unwrap_or(usize::MAX);
    let token = if rest.len() > limit {
        rest.truncate(limit);
        rest.last().map(|(k, _)| encode_token(k))
    } else {
        None
    };
    Ok((rest.into_iter().map(|(_, v)| v).collect(), token))
}

fn encode_token(key: &str) -> String {
    let mut s = String::from("emu1");
    for b in key.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn decode_token(t: &str) -> Option<String> {
    let hex = t.strip_prefix("emu1")?;
    if hex.len() % 2 != 0 || !hex.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("eni-*", "eni-123"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "abbc"));
        assert!(glob("*", ""));
        assert!(glob("x*y*z", "x12y34z"));
        assert!(!glob("x*y*z", "x12y34"));
    }

    #[test]
    fn pages() {
        let items: Vec<(String, u32)> = (0..12).map(|i| (format!("k{i:02}"), i)).collect();
        let (p1, t1) = page(items.clone(), Some(5), (5, 1000), None).unwrap();
        assert_eq!(p1, [0, 1, 2, 3, 4]);
        let (p2, t2) = page(items.clone(), Some(5), (5, 1000), t1.as_deref()).unwrap();
        assert_eq!(p2, [5, 6, 7, 8, 9]);
        let (p3, t3) = page(items.clone(), Some(5), (5, 1000), t2.as_deref()).unwrap();
        assert_eq!((p3, t3), (vec![10, 11], None));
        assert_eq!(
            page(items.clone(), Some(4), (5, 1000), None)
                .unwrap_err()
                .code,
            "InvalidParameterValue"
        );
        assert_eq!(
            page(items, None, (5, 1000), Some("zz")).unwrap_err().code,
            "InvalidPaginationToken"
        );
    }
}
