//! CNI spec versions this plugin speaks.

/// Spec versions accepted in `cniVersion` (the 0.3.x result shape equals 0.4.0's).
pub const SUPPORTED: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
/// The newest version, reported by VERSION.
pub const CURRENT: &str = "1.1.0";

/// Whether `v` is supported.
pub fn is_supported(v: &str) -> bool {
    SUPPORTED.contains(&v)
}

/// Whether results of version `v` carry `"version": "4"` in each `ips` entry (before 1.0.0).
pub fn ips_have_version_field(v: &str) -> bool {
    v.starts_with("0.")
}

/// Whether `v` has the STATUS and GC verbs (1.1.0 and later).
pub fn has_status_and_gc(v: &str) -> bool {
    v == "1.1.0"
}

/// The VERSION verb's answer: `{"cniVersion": <requested>, "supportedVersions": [...]}`, where
/// `requested` is the stdin's `cniVersion` when supported, else [`CURRENT`].
pub fn version_info(requested: &str) -> serde_json::Value {
    let v = if is_supported(requested) {
        requested
    } else {
        CURRENT
    };
    serde_json::json!({ "cniVersion": v, "supportedVersions": SUPPORTED })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for v in ["0.4.0", "1.0.0", "1.1.0"] {
            assert!(is_supported(v));
        }
        for v in ["0.2.0", "1.2.0", "", "1.0"] {
            assert!(!is_supported(v), "{v}");
        }
        assert!(ips_have_version_field("0.4.0"));
        assert!(!ips_have_version_field("1.0.0"));
        assert!(has_status_and_gc("1.1.0") && !has_status_and_gc("1.0.0"));
        assert_eq!(version_info("1.0.0")["supportedVersions"][2], "0.4.0");
        assert_eq!(version_info("1.0.0")["cniVersion"], "1.0.0");
        assert_eq!(version_info("")["cniVersion"], "1.1.0");
    }
}
