//! Kubelet version: parsed from `--kubelet-version` or the output of `kubelet --version`.

use std::fmt;

/// A kubelet version `major.minor.patch` (pre-release and build suffixes dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeletVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KubeletVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `1.31.2`, `v1.31.2-eks-1234`, or `kubelet --version` output such as
    /// `Kubernetes v1.31.2-eks-1234`. A missing patch is 0. `None` when no version is found.
    pub fn parse(text: &str) -> Option<Self> {
        let word = text.split_whitespace().last()?;
        let word = word.strip_prefix('v').unwrap_or(word);
        let core = word.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(
            KubeletVersion::parse("1.31.2"),
            Some(KubeletVersion::new(1, 31, 2))
        );
        assert_eq!(
            KubeletVersion::parse("Kubernetes v1.25.16-eks-5e0fdde"),
            Some(KubeletVersion::new(1, 25, 16))
        );
        assert_eq!(
            KubeletVersion::parse("v1.30"),
            Some(KubeletVersion::new(1, 30, 0))
        );
        assert_eq!(KubeletVersion::parse("one.two"), None);
        assert_eq!(KubeletVersion::parse("1.2.3.4"), None);
        assert_eq!(KubeletVersion::parse(""), None);
        assert!(KubeletVersion::new(1, 26, 0) > KubeletVersion::new(1, 25, 16));
    }
}
