//! Max pods for an instance type that may be missing from the compiled table: the table, else
//! EC2 `DescribeInstanceTypes`, else 110 with a warning. Shared by `vpcnet-bootstrap` and
//! `vpcnet max-pods`; the formula itself is [`vpcnet_limits::max_pods`].

use serde::Serialize;
use vpcnet_limits::{InstanceLimits, MaxPodsOptions, MaxPodsReport};

use crate::cloud::{CloudError, Ec2};

/// Max pods used when neither the table nor EC2 knows the type (kubelet's own default).
pub const FALLBACK_MAX_PODS: u32 = 110;

/// Where an instance type's limits came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitsSource {
    /// The table compiled into vpcnet (from the reference data).
    Table,
    /// EC2 `DescribeInstanceTypes`.
    Ec2,
    /// Nobody knew: [`FALLBACK_MAX_PODS`].
    Fallback,
}

/// Max pods for one instance type with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMaxPods {
    pub instance_type: String,
    /// The value to use (a count of pods).
    pub max_pods: u32,
    pub source: LimitsSource,
    /// Limits and formula details; `None` for the fallback.
    pub limits: Option<InstanceLimits>,
    pub report: Option<MaxPodsReport>,
    /// For the fallback: why and how to fix it.
    pub warning: Option<String>,
}

/// The limits of `instance_type`: the compiled table first, then EC2.
///
/// Errors: the EC2 error when the type is not in the table and EC2 fails.
pub async fn find_limits(
    instance_type: &str,
    ec2: &impl Ec2,
) -> Result<(InstanceLimits, LimitsSource), CloudError> {
    if let Some(l) = vpcnet_limits::lookup(instance_type) {
        return Ok((l.clone(), LimitsSource::Table));
    }
    tracing::info!(
        instance_type,
        "not in vpcnet's instance table; asking EC2 DescribeInstanceTypes"
    );
    let l = ec2.describe_instance_type(instance_type).await?;
    Ok((l, LimitsSource::Ec2))
}

/// Resolves max pods for `instance_type`; never fails (the fallback carries a warning).
/// `override_hint` names how the caller's user can set the value by hand.
pub async fn resolve(
    instance_type: &str,
    opts: MaxPodsOptions,
    ec2: &impl Ec2,
    override_hint: &str,
) -> ResolvedMaxPods {
    match find_limits(instance_type, ec2).await {
        Ok((limits, source)) => {
            let report = vpcnet_limits::max_pods(&limits, opts);
            ResolvedMaxPods {
                instance_type: instance_type.to_string(),
                max_pods: report.max_pods,
                source,
                limits: Some(limits),
                report: Some(report),
                warning: None,
            }
        }
        Err(e) => ResolvedMaxPods {
            instance_type: instance_type.to_string(),
            max_pods: FALLBACK_MAX_PODS,
            source: LimitsSource::Fallback,
            limits: None,
            report: None,
            warning: Some(fallback_warning(instance_type, &e, override_hint)),
        },
    }
}

/// The warning for the 110 fallback: what failed and the three ways to fix it.
pub fn fallback_warning(instance_type: &str, e: &CloudError, override_hint: &str) -> String {
    let iam = if e
        .code
        .as_deref()
        .is_some_and(|c| c.contains("Unauthorized") || c.contains("AccessDenied"))
    {
        "grant the node's IAM role ec2:DescribeInstanceTypes (it was denied)"
    } else {
        "make EC2 reachable and grant the node's IAM role ec2:DescribeInstanceTypes"
    };
    let e = e.to_string();
    let e = e.trim_end_matches('.');
    format!(
        "instance type {instance_type} is not in vpcnet's table and {e}; using {FALLBACK_MAX_PODS} max pods, which may not match the IPs this node can get. Fix: {override_hint}, {iam}, or upgrade vpcnet to a release that knows {instance_type}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoEc2(Option<InstanceLimits>);
    impl Ec2 for NoEc2 {
        async fn describe_instance_type(&self, t: &str) -> Result<InstanceLimits, CloudError> {
            self.0.clone().ok_or(CloudError {
                action: "DescribeInstanceTypes".into(),
                code: Some("UnauthorizedOperation".into()),
                message: format!("not allowed for {t}"),
            })
        }
        async fn private_dns_name(&self, _: &str) -> Result<String, CloudError> {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn table_then_ec2_then_fallback() {
        let r = resolve(
            "m5.large",
            MaxPodsOptions::default(),
            &NoEc2(None),
            "pass --max-pods",
        )
        .await;
        assert_eq!((r.max_pods, r.source), (29, LimitsSource::Table));

        let mut l = vpcnet_limits::lookup("m5.large").unwrap().clone();
        l.instance_type = "m99.large".into();
        l.eni_limit = 5;
        let r = resolve("m99.large", MaxPodsOptions::default(), &NoEc2(Some(l)), "x").await;
        assert_eq!((r.max_pods, r.source), (5 * 9 + 2, LimitsSource::Ec2));

        let r = resolve(
            "m99.large",
            MaxPodsOptions::default(),
            &NoEc2(None),
            "pass --max-pods N",
        )
        .await;
        assert_eq!((r.max_pods, r.source), (110, LimitsSource::Fallback));
        let w = r.warning.unwrap();
        assert!(
            w.contains("pass --max-pods N")
                && w.contains("ec2:DescribeInstanceTypes")
                && w.contains("upgrade vpcnet"),
            "{w}"
        );
    }
}
