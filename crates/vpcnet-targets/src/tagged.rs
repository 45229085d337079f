//! Target groups chosen by tag for the label-selected mode (kube-ingress-aws-controller finds
//! its target groups by tag too): every target group of the account and region that carries
//! all the wanted tags (`DescribeTargetGroups`, every page, then `DescribeTags` 20 ARNs at a
//! time).

use anyhow::{bail, Context, Result};
use vpcnet_elbv2::Elbv2;

/// Most ARNs one `DescribeTags` call takes (ELBv2's limit).
const TAGS_PER_CALL: usize = 20;

/// A `KEY=VALUE` tag as given on the command line. Errors: no `=`, or an empty key.
pub fn parse_tag(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => Err(format!(
            "target group tag {s:?} is not KEY=VALUE (e.g. kubernetes.io/service-name=default/web)"
        )),
    }
}

/// Whether a resource's `tags` include every one of `wanted` (same key, same value).
pub fn carries_all(tags: &[(String, String)], wanted: &[(String, String)]) -> bool {
    wanted.iter().all(|w| tags.contains(w))
}

/// ARNs of the target groups carrying every tag of `wanted`, sorted. Errors: an ELBv2 call
/// failed (after the client's retries), or no target group carries them (the message names
/// the tags and the fix).
pub async fn target_groups_tagged(elb: &Elbv2, wanted: &[(String, String)]) -> Result<Vec<String>> {
    let all: Vec<String> = elb
        .target_groups(None, &[])
        .await
        .context("listing target groups (DescribeTargetGroups)")?
        .into_iter()
        .map(|tg| tg.arn)
        .collect();
    let mut found = Vec::new();
    for chunk in all.chunks(TAGS_PER_CALL) {
        for (arn, tags) in elb
            .tags(chunk)
            .await
            .context("reading target group tags (DescribeTags)")?
        {
            if carries_all(&tags, wanted) {
                found.push(arn);
            }
        }
    }
    if found.is_empty() {
        let names: Vec<String> = wanted.iter().map(|(k, v)| format!("{k}={v}")).collect();
        bail!(
            "no target group carries the tags {} (of {} target groups): tag the target groups \
             with AddTags or fix --pod-target-group-tag",
            names.join(", "),
            all.len()
        );
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_parse_and_match_all() {
        let t = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(parse_tag("team=web").unwrap(), t("team", "web"));
        assert_eq!(parse_tag("k=").unwrap(), t("k", ""));
        assert!(parse_tag("team").is_err());
        assert!(parse_tag("=web").is_err());
        let have = [t("team", "web"), t("env", "prod")];
        assert!(carries_all(&have, &[t("team", "web")]));
        assert!(carries_all(&have, &[t("env", "prod"), t("team", "web")]));
        assert!(!carries_all(&have, &[t("team", "api")]));
        assert!(!carries_all(&have, &[t("team", "web"), t("tier", "front")]));
    }
}
