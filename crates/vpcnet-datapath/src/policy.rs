//! TEMP STUB (replaced by the policy-nft branch)
use std::path::Path;
pub fn render_full(_rs: &vpcnet_policy::Ruleset) -> String { String::new() }
pub fn render_update(_a: &vpcnet_policy::Ruleset, _b: &vpcnet_policy::Ruleset) -> Option<String> { None }
pub async fn apply(_n: Option<&Path>, _s: &str) -> crate::Result<()> { Ok(()) }
pub async fn remove(_n: Option<&Path>) -> crate::Result<()> { Ok(()) }
