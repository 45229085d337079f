//! Booleans in the environment as the VPC CNI reads them (Go's `strconv.ParseBool`).

/// Errors of reading a boolean setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{name}={value:?} is not a boolean: use true or false (or 1/0, t/f, TRUE/FALSE, True/False)"
)]
pub struct BadBool {
    pub name: String,
    pub value: String,
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The value of `name` from `lookup` as a boolean; unset or empty gives `default`.
pub fn bool_setting(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: bool,
) -> Result<bool, BadBool> {
    match lookup(name) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) => parse_bool(&v).ok_or(BadBool {
            name: name.to_string(),
            value: v,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_spellings_default_and_refusal() {
        let env = |n: &str| match n {
            "A" => Some("True".to_string()),
            "B" => Some("0".to_string()),
            "C" => Some("yes".to_string()),
            "D" => Some(String::new()),
            _ => None,
        };
        assert_eq!(bool_setting(&env, "A", false), Ok(true));
        assert_eq!(bool_setting(&env, "B", true), Ok(false));
        assert_eq!(bool_setting(&env, "D", true), Ok(true));
        assert_eq!(bool_setting(&env, "unset", true), Ok(true));
        let e = bool_setting(&env, "C", false).unwrap_err().to_string();
        assert!(e.starts_with("C=\"yes\" is not a boolean"), "{e}");
    }
}
