//! `vpcnet lab requests`: the lab cloud's request log (every EC2 and IMDS request with its
//! calling instance and answer), per node or all, as a summary per action or every record.

use std::collections::BTreeMap;

use anyhow::Result;
use clap::Args as ClapArgs;
use vpcnet_lab::cloud::{Api, RequestRecord};
use vpcnet_lab::lab::Lab;

use vpcnet_introspection::text::table;

#[derive(ClapArgs)]
pub struct Args {
    #[command(flatten)]
    name: super::NameArg,
    /// Only the requests of this node's instance (its agent, bootstrap and kubelet).
    #[arg(long)]
    node: Option<String>,
    /// Only the requests answered with an error (non-2xx).
    #[arg(long)]
    failed: bool,
    /// Every record (time, API, action, status, error, user agent) instead of counts per action.
    #[arg(long)]
    all: bool,
    /// The records as JSON lines.
    #[arg(long)]
    json: bool,
}

pub fn run(a: &Args) -> Result<()> {
    let lab = Lab::open(&a.name.name)?;
    let mut records = match &a.node {
        Some(n) => lab.node(n).requests()?,
        None => lab.cloud().requests()?.records,
    };
    if a.failed {
        records.retain(|r| !r.ok());
    }
    if a.json {
        for r in &records {
            println!("{}", serde_json::to_string(r)?);
        }
    } else if a.all {
        print!("{}", records_table(&records));
    } else {
        print!("{}", summary_table(&records));
    }
    Ok(())
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::Ec2 => "ec2",
        Api::Elbv2 => "elbv2",
        Api::Imds => "imds",
    }
}

/// One row per (API, action, answer): how many.
pub(crate) fn summary_table(records: &[RequestRecord]) -> String {
    let mut counts: BTreeMap<(&str, &str, String), u64> = BTreeMap::new();
    for r in records {
        let answer = match &r.error_code {
            Some(c) => format!("{} {c}", r.status),
            None => r.status.to_string(),
        };
        *counts
            .entry((api_name(r.api), r.action.as_str(), answer))
            .or_default() += 1;
    }
    let mut rows = vec![vec![
        "API".into(),
        "ACTION".into(),
        "ANSWER".into(),
        "CALLS".into(),
    ]];
    for ((api, action, answer), n) in counts {
        rows.push(vec![api.into(), action.into(), answer, n.to_string()]);
    }
    table(&rows)
}

fn records_table(records: &[RequestRecord]) -> String {
    let mut rows = vec![vec![
        "SEQ".into(),
        "AT_MS".into(),
        "INSTANCE".into(),
        "API".into(),
        "ACTION".into(),
        "STATUS".into(),
        "ERROR".into(),
        "USER_AGENT".into(),
    ]];
    for r in records {
        rows.push(vec![
            r.seq.to_string(),
            r.at_ms.to_string(),
            r.instance_id.clone().unwrap_or_else(|| "-".into()),
            api_name(r.api).into(),
            r.action.clone(),
            r.status.to_string(),
            r.error_code.clone().unwrap_or_else(|| "-".into()),
            r.user_agent
                .as_deref()
                .map(|u| u.split_whitespace().next().unwrap_or(u).to_string())
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_calls_per_action_and_answer() {
        let rec = |action: &str, status: u16, code: Option<&str>| RequestRecord {
            seq: 0,
            at_ms: 0,
            api: Api::Ec2,
            action: action.into(),
            mutating: false,
            instance_id: None,
            source: None,
            user_agent: None,
            access_key: None,
            status,
            error_code: code.map(str::to_string),
        };
        let t = summary_table(&[
            rec("DescribeVpcs", 200, None),
            rec("DescribeVpcs", 200, None),
            rec("Nope", 400, Some("InvalidAction")),
        ]);
        assert!(
            t.contains("DescribeVpcs") && t.lines().any(|l| l.ends_with(" 2")),
            "{t}"
        );
        assert!(t.contains("400 InvalidAction"), "{t}");
    }
}
