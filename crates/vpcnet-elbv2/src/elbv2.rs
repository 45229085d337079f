//! The ELBv2 actions as typed async methods on [`Elbv2`]; each runs under the client's
//! [`vpcnet_aws::CallSettings`] (token bucket, deadlines, retries).

use std::future::Future;

use aws_sdk_elasticloadbalancingv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_elasticloadbalancingv2::types as sdk;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use crate::error::sdk_error;
use crate::model::{self, sdk_tags, sdk_target};
use crate::{
    Elbv2, Elbv2Error, HealthCheck, Listener, LoadBalancer, LoadBalancerType, NewLoadBalancer,
    NewTargetGroup, Target, TargetGroup, TargetHealth, TargetType,
};

fn protocol(p: &str) -> sdk::ProtocolEnum {
    sdk::ProtocolEnum::from(p)
}

fn i32_of(v: Option<u32>) -> Option<i32> {
    v.map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The one item a Create/Modify answer must hold.
fn first<'a, T>(action: &'static str, items: &'a [T], what: &str) -> Result<&'a T, Elbv2Error> {
    items.first().ok_or_else(|| Elbv2Error::InvalidResponse {
        action,
        message: what.to_string(),
    })
}

fn pairs(attrs: &[sdk::TargetGroupAttribute]) -> Vec<(String, String)> {
    attrs
        .iter()
        .filter_map(|a| Some((a.key()?.to_string(), a.value().unwrap_or("").to_string())))
        .collect()
}

impl Elbv2 {
    /// One logical call: `request()` builds and sends the request (once per attempt) under the
    /// client's [`vpcnet_aws::CallSettings`]; SDK errors become [`Elbv2Error`]s.
    async fn send<O, E, F, Fut>(&self, action: &'static str, request: F) -> Result<O, Elbv2Error>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.caller
            .run(action, || {
                let sent = request();
                async move { sent.await.map_err(|e| sdk_error(action, e)) }
            })
            .await
    }

    /// Every page of a Marker-paginated Describe ([`vpcnet_aws::Caller::pages`]):
    /// `call(marker)` sends one request, `split` converts the page's items and returns its
    /// NextMarker.
    async fn all_pages<O, E, T, F, Fut>(
        &self,
        action: &'static str,
        call: F,
        split: impl Fn(&O) -> (Result<Vec<T>, Elbv2Error>, Option<String>),
    ) -> Result<Vec<T>, Elbv2Error>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<O, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.caller
            .pages(
                action,
                |marker| {
                    let sent = call(marker);
                    async move { sent.await.map_err(|e| sdk_error(action, e)) }
                },
                |page, out| {
                    let (items, next) = split(&page);
                    out.extend(items?);
                    Ok(next)
                },
            )
            .await
    }

    /// `CreateLoadBalancer`. Errors: `DuplicateLoadBalancerName`, `SubnetNotFound`,
    /// `InvalidSubnet`, `InvalidSecurityGroup`, `TooManyLoadBalancers`, `ValidationError`.
    pub async fn create_load_balancer(
        &self,
        lb: &NewLoadBalancer,
    ) -> Result<LoadBalancer, Elbv2Error> {
        const A: &str = "CreateLoadBalancer";
        let out = self
            .send(A, || {
                self.client
                    .create_load_balancer()
                    .name(&lb.name)
                    .r#type(match lb.lb_type {
                        LoadBalancerType::Network => sdk::LoadBalancerTypeEnum::Network,
                        LoadBalancerType::Application => sdk::LoadBalancerTypeEnum::Application,
                    })
                    .scheme(if lb.internal {
                        sdk::LoadBalancerSchemeEnum::Internal
                    } else {
                        sdk::LoadBalancerSchemeEnum::InternetFacing
                    })
                    .set_subnets(Some(lb.subnets.clone()))
                    .set_security_groups(
                        (!lb.security_groups.is_empty()).then(|| lb.security_groups.clone()),
                    )
                    .set_tags((!lb.tags.is_empty()).then(|| sdk_tags(&lb.tags)))
                    .send()
            })
            .await?;
        let first = first(A, out.load_balancers(), "no load balancer in the answer")?;
        model::load_balancer(A, first)
    }

    /// `DescribeLoadBalancers`, every page; `names` empty = all. Errors:
    /// `LoadBalancerNotFound` (a name does not exist).
    pub async fn load_balancers(&self, names: &[String]) -> Result<Vec<LoadBalancer>, Elbv2Error> {
        const A: &str = "DescribeLoadBalancers";
        self.all_pages(
            A,
            |marker| {
                let req = self
                    .client
                    .describe_load_balancers()
                    .set_names((!names.is_empty()).then(|| names.to_vec()))
                    .set_marker(marker)
                    .page_size(self.page_size());
                req.send()
            },
            |page| {
                let items = page
                    .load_balancers()
                    .iter()
                    .map(|l| model::load_balancer(A, l));
                (items.collect(), page.next_marker().map(str::to_string))
            },
        )
        .await
    }

    /// `DeleteLoadBalancer` (and its listeners); succeeds when it is already gone.
    pub async fn delete_load_balancer(&self, arn: &str) -> Result<(), Elbv2Error> {
        const A: &str = "DeleteLoadBalancer";
        self.send(A, || {
            self.client
                .delete_load_balancer()
                .load_balancer_arn(arn)
                .send()
        })
        .await?;
        Ok(())
    }

    /// `CreateTargetGroup`. Errors: `DuplicateTargetGroupName`, `TooManyTargetGroups`,
    /// `ValidationError` (health-check ranges, unknown VPC).
    pub async fn create_target_group(
        &self,
        tg: &NewTargetGroup,
    ) -> Result<TargetGroup, Elbv2Error> {
        const A: &str = "CreateTargetGroup";
        let h = &tg.health;
        let out = self
            .send(A, || {
                self.client
                    .create_target_group()
                    .name(&tg.name)
                    .protocol(protocol(&tg.protocol))
                    .port(i32::from(tg.port))
                    .vpc_id(&tg.vpc_id)
                    .target_type(match tg.target_type {
                        TargetType::Ip => sdk::TargetTypeEnum::Ip,
                        TargetType::Instance => sdk::TargetTypeEnum::Instance,
                    })
                    .set_health_check_protocol(h.protocol.as_deref().map(protocol))
                    .set_health_check_port(h.port.clone())
                    .set_health_check_path(h.path.clone())
                    .set_health_check_interval_seconds(i32_of(h.interval_seconds))
                    .set_health_check_timeout_seconds(i32_of(h.timeout_seconds))
                    .set_healthy_threshold_count(i32_of(h.healthy_threshold))
                    .set_unhealthy_threshold_count(i32_of(h.unhealthy_threshold))
                    .set_matcher(
                        h.matcher
                            .as_ref()
                            .map(|m| sdk::Matcher::builder().http_code(m).build()),
                    )
                    .set_tags((!tg.tags.is_empty()).then(|| sdk_tags(&tg.tags)))
                    .send()
            })
            .await?;
        let first = first(A, out.target_groups(), "no target group in the answer")?;
        model::target_group(A, first)
    }

    /// `DescribeTargetGroups`, every page: those of load balancer `lb_arn`, or those named
    /// `names`, or all. Errors: `LoadBalancerNotFound`, `TargetGroupNotFound`.
    pub async fn target_groups(
        &self,
        lb_arn: Option<&str>,
        names: &[String],
    ) -> Result<Vec<TargetGroup>, Elbv2Error> {
        const A: &str = "DescribeTargetGroups";
        self.all_pages(
            A,
            |marker| {
                let req = self
                    .client
                    .describe_target_groups()
                    .set_load_balancer_arn(lb_arn.map(str::to_string))
                    .set_names((!names.is_empty()).then(|| names.to_vec()))
                    .set_marker(marker)
                    .page_size(self.page_size());
                req.send()
            },
            |page| {
                let items = page
                    .target_groups()
                    .iter()
                    .map(|t| model::target_group(A, t));
                (items.collect(), page.next_marker().map(str::to_string))
            },
        )
        .await
    }

    /// `DescribeTargetGroups` of one target group by ARN (its `LoadBalancerArns` say which
    /// load balancers use it; empty: none). Errors: `TargetGroupNotFound`.
    pub async fn target_group(&self, arn: &str) -> Result<TargetGroup, Elbv2Error> {
        const A: &str = "DescribeTargetGroups";
        let out = self
            .send(A, || {
                self.client
                    .describe_target_groups()
                    .target_group_arns(arn)
                    .send()
            })
            .await?;
        let first = first(A, out.target_groups(), "no target group in the answer")?;
        model::target_group(A, first)
    }

    /// `ModifyTargetGroup`: change the health check (None fields stay). Errors:
    /// `TargetGroupNotFound`, `ValidationError`.
    pub async fn modify_target_group(
        &self,
        arn: &str,
        h: &HealthCheck,
    ) -> Result<TargetGroup, Elbv2Error> {
        const A: &str = "ModifyTargetGroup";
        let out = self
            .send(A, || {
                self.client
                    .modify_target_group()
                    .target_group_arn(arn)
                    .set_health_check_protocol(h.protocol.as_deref().map(protocol))
                    .set_health_check_port(h.port.clone())
                    .set_health_check_path(h.path.clone())
                    .set_health_check_interval_seconds(i32_of(h.interval_seconds))
                    .set_health_check_timeout_seconds(i32_of(h.timeout_seconds))
                    .set_healthy_threshold_count(i32_of(h.healthy_threshold))
                    .set_unhealthy_threshold_count(i32_of(h.unhealthy_threshold))
                    .set_matcher(
                        h.matcher
                            .as_ref()
                            .map(|m| sdk::Matcher::builder().http_code(m).build()),
                    )
                    .send()
            })
            .await?;
        let first = first(A, out.target_groups(), "no target group in the answer")?;
        model::target_group(A, first)
    }

    /// `DeleteTargetGroup`. Error: `ResourceInUse` (a listener forwards to it).
    pub async fn delete_target_group(&self, arn: &str) -> Result<(), Elbv2Error> {
        const A: &str = "DeleteTargetGroup";
        self.send(A, || {
            self.client
                .delete_target_group()
                .target_group_arn(arn)
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DescribeTargetGroupAttributes`: every attribute as (key, value).
    pub async fn target_group_attributes(
        &self,
        arn: &str,
    ) -> Result<Vec<(String, String)>, Elbv2Error> {
        const A: &str = "DescribeTargetGroupAttributes";
        let out = self
            .send(A, || {
                self.client
                    .describe_target_group_attributes()
                    .target_group_arn(arn)
                    .send()
            })
            .await?;
        Ok(pairs(out.attributes()))
    }

    /// `ModifyTargetGroupAttributes` (e.g. `deregistration_delay.timeout_seconds`); returns
    /// the attributes after the change. Errors: `TargetGroupNotFound`, `ValidationError`.
    pub async fn modify_target_group_attributes(
        &self,
        arn: &str,
        attrs: &[(&str, &str)],
    ) -> Result<Vec<(String, String)>, Elbv2Error> {
        const A: &str = "ModifyTargetGroupAttributes";
        let list: Vec<sdk::TargetGroupAttribute> = attrs
            .iter()
            .map(|(k, v)| {
                sdk::TargetGroupAttribute::builder()
                    .key(*k)
                    .value(*v)
                    .build()
            })
            .collect();
        let out = self
            .send(A, || {
                self.client
                    .modify_target_group_attributes()
                    .target_group_arn(arn)
                    .set_attributes(Some(list.clone()))
                    .send()
            })
            .await?;
        Ok(pairs(out.attributes()))
    }

    /// `CreateListener` forwarding `protocol`/`port` to target group `tg_arn`. Errors:
    /// `DuplicateListener`, `IncompatibleProtocols`, `TargetGroupAssociationLimit`,
    /// `TooManyListeners`, `LoadBalancerNotFound`, `TargetGroupNotFound`.
    pub async fn create_listener(
        &self,
        lb_arn: &str,
        protocol_name: &str,
        port: u16,
        tg_arn: &str,
    ) -> Result<Listener, Elbv2Error> {
        const A: &str = "CreateListener";
        let forward = sdk::Action::builder()
            .r#type(sdk::ActionTypeEnum::Forward)
            .target_group_arn(tg_arn)
            .build();
        let out = self
            .send(A, || {
                self.client
                    .create_listener()
                    .load_balancer_arn(lb_arn)
                    .protocol(protocol(protocol_name))
                    .port(i32::from(port))
                    .default_actions(forward.clone())
                    .send()
            })
            .await?;
        let first = first(A, out.listeners(), "no listener in the answer")?;
        model::listener(A, first)
    }

    /// `DescribeListeners` of a load balancer, every page.
    pub async fn listeners(&self, lb_arn: &str) -> Result<Vec<Listener>, Elbv2Error> {
        const A: &str = "DescribeListeners";
        self.all_pages(
            A,
            |marker| {
                let req = self
                    .client
                    .describe_listeners()
                    .load_balancer_arn(lb_arn)
                    .set_marker(marker)
                    .page_size(self.page_size());
                req.send()
            },
            |page| {
                let items = page.listeners().iter().map(|l| model::listener(A, l));
                (items.collect(), page.next_marker().map(str::to_string))
            },
        )
        .await
    }

    /// `DeleteListener`. Error: `ListenerNotFound`.
    pub async fn delete_listener(&self, arn: &str) -> Result<(), Elbv2Error> {
        const A: &str = "DeleteListener";
        self.send(A, || self.client.delete_listener().listener_arn(arn).send())
            .await?;
        Ok(())
    }

    /// `RegisterTargets` (all or none). Errors: `InvalidTarget`, `TooManyTargets`,
    /// `TargetGroupNotFound`.
    pub async fn register_targets(
        &self,
        tg_arn: &str,
        targets: &[Target],
    ) -> Result<(), Elbv2Error> {
        const A: &str = "RegisterTargets";
        let list: Vec<sdk::TargetDescription> = targets.iter().map(sdk_target).collect();
        self.send(A, || {
            self.client
                .register_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(list.clone()))
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DeregisterTargets`: they drain for the deregistration delay. Errors: `InvalidTarget`
    /// (not registered), `TargetGroupNotFound`.
    pub async fn deregister_targets(
        &self,
        tg_arn: &str,
        targets: &[Target],
    ) -> Result<(), Elbv2Error> {
        const A: &str = "DeregisterTargets";
        let list: Vec<sdk::TargetDescription> = targets.iter().map(sdk_target).collect();
        self.send(A, || {
            self.client
                .deregister_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(list.clone()))
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DescribeTargetHealth` of `targets`, or of every registered target when empty.
    pub async fn target_health(
        &self,
        tg_arn: &str,
        targets: &[Target],
    ) -> Result<Vec<TargetHealth>, Elbv2Error> {
        const A: &str = "DescribeTargetHealth";
        let list: Vec<sdk::TargetDescription> = targets.iter().map(sdk_target).collect();
        let out = self
            .send(A, || {
                self.client
                    .describe_target_health()
                    .target_group_arn(tg_arn)
                    .set_targets((!list.is_empty()).then(|| list.clone()))
                    .send()
            })
            .await?;
        out.target_health_descriptions()
            .iter()
            .map(|d| model::target_health(A, d))
            .collect()
    }

    /// `AddTags` to 1..=20 resources (load balancers, target groups, listeners). Errors:
    /// `DuplicateTagKeys`, `TooManyTags`, `*NotFound`.
    pub async fn add_tags(
        &self,
        arns: &[String],
        tags: &[(String, String)],
    ) -> Result<(), Elbv2Error> {
        const A: &str = "AddTags";
        self.send(A, || {
            self.client
                .add_tags()
                .set_resource_arns(Some(arns.to_vec()))
                .set_tags(Some(sdk_tags(tags)))
                .send()
        })
        .await?;
        Ok(())
    }

    /// `RemoveTags` (keys) from 1..=20 resources.
    pub async fn remove_tags(&self, arns: &[String], keys: &[String]) -> Result<(), Elbv2Error> {
        const A: &str = "RemoveTags";
        self.send(A, || {
            self.client
                .remove_tags()
                .set_resource_arns(Some(arns.to_vec()))
                .set_tag_keys(Some(keys.to_vec()))
                .send()
        })
        .await?;
        Ok(())
    }

    /// `DescribeTags` of 1..=20 resources: (ARN, tags) each.
    pub async fn tags(
        &self,
        arns: &[String],
    ) -> Result<Vec<(String, Vec<(String, String)>)>, Elbv2Error> {
        const A: &str = "DescribeTags";
        let out = self
            .send(A, || {
                self.client
                    .describe_tags()
                    .set_resource_arns(Some(arns.to_vec()))
                    .send()
            })
            .await?;
        Ok(out
            .tag_descriptions()
            .iter()
            .map(|d| {
                (
                    d.resource_arn().unwrap_or_default().to_string(),
                    d.tags()
                        .iter()
                        .filter_map(|t| {
                            Some((t.key()?.to_string(), t.value().unwrap_or("").to_string()))
                        })
                        .collect(),
                )
            })
            .collect())
    }
}
