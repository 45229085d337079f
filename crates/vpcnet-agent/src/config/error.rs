//! What an invalid environment is: [`InvalidSetting`], one variable with an invalid or
//! refused value, and [`ConfigError`], every one of them at once.

use std::fmt;

/// A configuration variable with an invalid value, or a value vpcnet refuses: a VPC CNI
/// setting asking for behaviour vpcnet lacks ([`vpc_cni`](super::vpc_cni)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting {
    /// The environment variable, e.g. `AWS_VPC_ENI_MTU`.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What is wrong with it; refused: why vpcnet does not do what it asks.
    pub problem: String,
    /// What the variable accepts; refused: what to use instead.
    pub accepted: String,
    /// A valid VPC CNI value that vpcnet refuses (rather than an invalid value).
    pub refused: bool,
}

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (var, value, problem, accepted) =
            (self.var, &self.value, &self.problem, &self.accepted);
        if self.refused {
            write!(f, "refused {var}={value:?}: {problem}; instead: {accepted}")
        } else {
            write!(
                f,
                "invalid {var}={value:?}: {problem}; accepted: {accepted}"
            )
        }
    }
}

impl std::error::Error for InvalidSetting {}

/// Every invalid variable of an environment, in declaration order (at least one). Derefs to
/// the first, so the usual single mistake reads as `e.var`, `e.value`; [`ConfigError::all`]
/// lists them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub(super) first: InvalidSetting,
    pub(super) rest: Vec<InvalidSetting>,
}

impl ConfigError {
    /// Every invalid or refused variable: the invalid ones of `config.rs` in declaration
    /// order, then those of [`vpc_cni::SETTINGS`](super::vpc_cni::SETTINGS).
    pub fn all(&self) -> impl Iterator<Item = &InvalidSetting> {
        std::iter::once(&self.first).chain(&self.rest)
    }
}

impl From<InvalidSetting> for ConfigError {
    fn from(first: InvalidSetting) -> Self {
        ConfigError {
            first,
            rest: Vec::new(),
        }
    }
}

impl std::ops::Deref for ConfigError {
    type Target = InvalidSetting;
    fn deref(&self) -> &InvalidSetting {
        &self.first
    }
}

impl fmt::Display for ConfigError {
    /// One invalid variable: its line. Several: their count, then one line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rest.is_empty() {
            return self.first.fmt(f);
        }
        let n = self.rest.len() + 1;
        if self.all().any(|e| e.refused) {
            write!(f, "{n} invalid or refused variables:")?;
        } else {
            write!(f, "{n} invalid variables:")?;
        }
        for e in self.all() {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
