//! The account's EC2 and ELBv2 rate limits (`vpcnet_emu::account_limits`), through the
//! unmodified SDK clients without retries, on tokio's paused clock: no time passes unless a
//! test advances it.

mod common;

use std::time::Duration;

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::config::Credentials;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::Client;
use common::{client_as, code, control, filter, status};
use serde_json::json;
use tokio::time::advance;
use vpcnet_emu::config::{apply, LabConfig};
use vpcnet_emu::{AccountLimits, BucketOverride, BucketState, Emulator};

/// AWS's defaults with `f`'s changes.
fn limits(f: impl FnOnce(&mut AccountLimits)) -> AccountLimits {
    let mut l = AccountLimits::aws_defaults();
    f(&mut l);
    l
}

/// `ok`, or the error code of a service error.
fn verdict<T, E: ProvideErrorMetadata + std::fmt::Debug>(
    r: Result<T, SdkError<E, HttpResponse>>,
) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => code(&e),
    }
}

/// (admitted, throttled) of the live bucket of `action` in `category`.
fn counts(emu: &Emulator, account: &str, action: &str, category: &str) -> (u64, u64) {
    let b = bucket(emu, account, action, category);
    (b.admitted, b.throttled)
}

/// The live bucket of `action` in `category`.
fn bucket(emu: &Emulator, account: &str, action: &str, category: &str) -> BucketState {
    emu.account_limits()
        .buckets
        .into_iter()
        .find(|b| b.account == account && b.action == action && b.category == category)
        .unwrap_or_else(|| panic!("no bucket {account}/{action}/{category}"))
}

fn signed_as(endpoint: &str, key: &str) -> Client {
    client_as(
        endpoint,
        1,
        Credentials::new(key, "secret", None, None, "account-limits-tests"),
    )
}

#[tokio::test(start_paused = true)]
async fn a_bucket_admits_its_capacity_then_one_call_per_refill_interval() {
    let lab = common::lab(81).await;
    lab.emu
        .set_account_limits(limits(|l| {
            l.ec2
                .insert("describe_unfiltered".into(), BucketOverride::new(3, 2.0));
        }))
        .unwrap();
    for i in 0..3 {
        let r = lab.ec2.describe_vpcs().send().await;
        assert_eq!(verdict(r), "ok", "call {i}");
    }
    let e = lab.ec2.describe_vpcs().send().await.unwrap_err();
    assert_eq!(code(&e), "RequestLimitExceeded");
    assert_eq!(status(&e), 503);
    assert_eq!(e.message(), Some("Request limit exceeded."));

    // refill 2/s: half a token after 250 ms, one after 500 ms
    advance(Duration::from_millis(250)).await;
    assert_eq!(
        verdict(lab.ec2.describe_vpcs().send().await),
        "RequestLimitExceeded"
    );
    advance(Duration::from_millis(250)).await;
    assert_eq!(verdict(lab.ec2.describe_vpcs().send().await), "ok");
    assert_eq!(
        verdict(lab.ec2.describe_vpcs().send().await),
        "RequestLimitExceeded"
    );

    let b = bucket(&lab.emu, "default", "DescribeVpcs", "describe_unfiltered");
    assert_eq!((b.capacity, b.refill_per_sec), (3, 2.0));
    assert_eq!((b.admitted, b.throttled), (4, 3));
    assert_eq!(b.tokens, 0.0);
    assert_eq!(lab.emu.calls().throttled.get("DescribeVpcs"), Some(&3));
    let log = lab.emu.requests(0).records;
    let last = log.last().unwrap();
    assert_eq!(
        (
            last.status,
            last.error_code.as_deref(),
            last.access_key.as_deref()
        ),
        (503, Some("RequestLimitExceeded"), Some("AKIDEMU"))
    );
}

#[tokio::test(start_paused = true)]
async fn access_keys_of_one_account_share_its_buckets_and_accounts_do_not() {
    let lab = common::lab(82).await;
    let a = signed_as(&lab.server.endpoint, "AKIDA");
    let b = signed_as(&lab.server.endpoint, "AKIDB");
    let one_token = |l: &mut AccountLimits| {
        l.actions
            .insert("DescribeSubnets".into(), BucketOverride::new(2, 0.0));
    };
    // every key in the default account
    lab.emu.set_account_limits(limits(one_token)).unwrap();
    assert_eq!(verdict(a.describe_subnets().send().await), "ok");
    assert_eq!(verdict(b.describe_subnets().send().await), "ok");
    assert_eq!(
        verdict(a.describe_subnets().send().await),
        "RequestLimitExceeded"
    );
    assert_eq!(
        verdict(b.describe_subnets().send().await),
        "RequestLimitExceeded"
    );

    // the two keys in two accounts (a third key joins the first account)
    lab.emu
        .set_account_limits(limits(|l| {
            one_token(l);
            l.accounts.insert("AKIDA".into(), "one".into());
            l.accounts.insert("AKIDC".into(), "one".into());
            l.accounts.insert("AKIDB".into(), "two".into());
        }))
        .unwrap();
    let c = signed_as(&lab.server.endpoint, "AKIDC");
    assert_eq!(verdict(a.describe_subnets().send().await), "ok");
    assert_eq!(verdict(c.describe_subnets().send().await), "ok");
    assert_eq!(
        verdict(a.describe_subnets().send().await),
        "RequestLimitExceeded"
    );
    assert_eq!(verdict(b.describe_subnets().send().await), "ok");
    assert_eq!(verdict(b.describe_subnets().send().await), "ok");
    assert_eq!(
        verdict(b.describe_subnets().send().await),
        "RequestLimitExceeded"
    );
    // an unmapped key is in the default account, which has a full bucket
    assert_eq!(verdict(lab.ec2.describe_subnets().send().await), "ok");
    for account in ["one", "two"] {
        let c = counts(&lab.emu, account, "DescribeSubnets", "describe_unfiltered");
        assert_eq!(c, (2, 1), "{account}");
    }
}

#[tokio::test(start_paused = true)]
async fn filtered_and_unfiltered_describes_draw_from_separate_buckets() {
    let lab = common::lab(83).await;
    lab.emu
        .set_account_limits(limits(|l| {
            l.actions.insert(
                "DescribeNetworkInterfaces".into(),
                BucketOverride::new(1, 0.0),
            );
        }))
        .unwrap();
    let unfiltered = || lab.ec2.describe_network_interfaces().send();
    let filtered = || {
        lab.ec2
            .describe_network_interfaces()
            .filters(filter("subnet-id", &[&lab.subnet]))
            .send()
    };
    assert_eq!(verdict(unfiltered().await), "ok");
    assert_eq!(verdict(unfiltered().await), "RequestLimitExceeded");
    assert_eq!(verdict(filtered().await), "ok");
    assert_eq!(verdict(filtered().await), "RequestLimitExceeded");
    // paginated without a filter: the filtered bucket too
    let paged = lab
        .ec2
        .describe_network_interfaces()
        .max_results(5)
        .send()
        .await;
    assert_eq!(verdict(paged), "RequestLimitExceeded");
    let action = "DescribeNetworkInterfaces";
    assert_eq!(
        counts(&lab.emu, "default", action, "describe_filtered"),
        (1, 2)
    );
    assert_eq!(
        counts(&lab.emu, "default", action, "describe_unfiltered"),
        (1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn aws_defaults_apply_when_enabled_without_overrides() {
    let lab = common::lab(84).await;
    lab.emu
        .set_account_limits(AccountLimits::aws_defaults())
        .unwrap();
    // ENI-mutating: 100 tokens (a call that fails in EC2 still takes one)
    let unassign = || {
        lab.ec2
            .unassign_private_ip_addresses()
            .network_interface_id("eni-0000000000000000")
            .private_ip_addresses("10.0.0.9")
            .send()
    };
    for i in 0..100 {
        assert_eq!(
            verdict(unassign().await),
            "InvalidNetworkInterfaceID.NotFound",
            "call {i}"
        );
    }
    assert_eq!(verdict(unassign().await), "RequestLimitExceeded");
    let b = bucket(
        &lab.emu,
        "default",
        "UnassignPrivateIpAddresses",
        "eni_mutating",
    );
    assert_eq!((b.capacity, b.refill_per_sec), (100, 5.0));
    advance(Duration::from_millis(200)).await;
    assert_eq!(
        verdict(unassign().await),
        "InvalidNetworkInterfaceID.NotFound"
    );

    // unfiltered describe: 50 tokens; a filtered one is still full
    for i in 0..50 {
        assert_eq!(
            verdict(lab.ec2.describe_instances().send().await),
            "ok",
            "call {i}"
        );
    }
    assert_eq!(
        verdict(lab.ec2.describe_instances().send().await),
        "RequestLimitExceeded"
    );
    let filtered = lab
        .ec2
        .describe_instances()
        .filters(filter("subnet-id", &[&lab.subnet]))
        .send()
        .await;
    assert_eq!(verdict(filtered), "ok");
    let f = bucket(
        &lab.emu,
        "default",
        "DescribeInstances",
        "describe_filtered",
    );
    assert_eq!((f.capacity, f.refill_per_sec), (100, 20.0));
}

#[tokio::test(start_paused = true)]
async fn elbv2_answers_throttling_from_its_own_buckets() {
    let lab = common::elbv2::lab(85).await;
    lab.emu
        .set_account_limits(limits(|l| {
            l.elbv2
                .insert("describe".into(), BucketOverride::new(2, 1.0));
        }))
        .unwrap();
    for _ in 0..2 {
        assert_eq!(
            verdict(lab.elb.describe_load_balancers().send().await),
            "ok"
        );
    }
    let e = lab.elb.describe_load_balancers().send().await.unwrap_err();
    assert_eq!(code(&e), "Throttling");
    assert_eq!(status(&e), 400);
    assert_eq!(e.message(), Some("Rate exceeded"));
    // another describe action has its own bucket
    assert_eq!(verdict(lab.elb.describe_target_groups().send().await), "ok");
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        verdict(lab.elb.describe_load_balancers().send().await),
        "ok"
    );

    // registration: the documented 20 tokens
    let register = || {
        lab.elb
            .register_targets()
            .target_group_arn(
                "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/none/0",
            )
            .targets(common::elbv2::target("10.0.1.10", Some(80), None))
            .send()
    };
    for i in 0..20 {
        assert_eq!(verdict(register().await), "TargetGroupNotFound", "call {i}");
    }
    assert_eq!(verdict(register().await), "Throttling");
    let b = bucket(&lab.emu, "default", "RegisterTargets", "registration");
    assert_eq!((b.capacity, b.refill_per_sec, b.throttled), (20, 4.0, 1));
    assert_eq!(
        lab.emu.calls().throttled.get("elbv2:RegisterTargets"),
        Some(&1)
    );
}

#[tokio::test(start_paused = true)]
async fn the_control_api_sets_reads_and_turns_off_the_limits() {
    let lab = common::lab(86).await;
    let app = lab.emu.router();
    // off by default: no bucket, nothing throttled
    let (st, v) = control(&app, "GET", "/_emu/account-limits", None).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["config"]["enabled"], json!(false));
    assert_eq!(v["buckets"], json!([]));
    for _ in 0..60 {
        assert_eq!(verdict(lab.ec2.describe_vpcs().send().await), "ok");
    }

    let (st, v) = control(
        &app,
        "PUT",
        "/_emu/account-limits",
        Some(json!({"enabled": true, "actions": {"DescribeVpcs": {"capacity": 1, "refill_per_sec": 0.5}}})),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(verdict(lab.ec2.describe_vpcs().send().await), "ok");
    assert_eq!(
        verdict(lab.ec2.describe_vpcs().send().await),
        "RequestLimitExceeded"
    );
    advance(Duration::from_secs(1)).await;
    let (_, v) = control(&app, "GET", "/_emu/account-limits", None).await;
    assert_eq!(
        v["buckets"],
        json!([{
            "account": "default", "api": "ec2", "action": "DescribeVpcs",
            "category": "describe_unfiltered", "capacity": 1, "refill_per_sec": 0.5,
            "tokens": 0.5, "admitted": 1, "throttled": 1
        }])
    );

    let (st, _) = control(&app, "DELETE", "/_emu/account-limits", None).await;
    assert_eq!(st, 200);
    assert_eq!(verdict(lab.ec2.describe_vpcs().send().await), "ok");
    assert_eq!(verdict(lab.ec2.describe_vpcs().send().await), "ok");
}

#[tokio::test(start_paused = true)]
async fn bad_settings_are_refused_naming_the_field_and_the_fix() {
    let emu = Emulator::new(87);
    let app = emu.router();
    let cases = [
        (
            json!({"enabled": true, "ec2": {"tags": {"capacity": 0}}}),
            "ec2.tags: capacity must be at least 1",
        ),
        (
            json!({"enabled": true, "actions": {"elbv2:RegisterTargets": {"refill_per_sec": -1.0}}}),
            "actions.elbv2:RegisterTargets: refill_per_sec must be a finite number >= 0",
        ),
        (
            json!({"enabled": true, "ec2": {"describe": {"capacity": 5}}}),
            "ec2.describe: no such EC2 category; use one of eni_mutating, mutating, describe_filtered, describe_unfiltered, tags",
        ),
        (
            json!({"enabled": true, "actions": {"RunInstances": {"capacity": 5}}}),
            "actions.RunInstances: not an action the emulator serves; use an EC2 action name",
        ),
        (
            json!({"enabled": true, "accounts": {"AKIDA": ""}}),
            "account name must not be empty",
        ),
        (json!({"enable": true}), "unknown field `enable`"),
    ];
    for (body, want) in cases {
        let (st, v) = control(&app, "PUT", "/_emu/account-limits", Some(body.clone())).await;
        assert_eq!(st, 400, "{body} → {v}");
        assert_eq!(v["code"], json!("InvalidParameterValue"), "{v}");
        let msg = v["message"].as_str().unwrap();
        assert!(msg.contains(want), "{body}: {msg}");
    }
    // NaN cannot be written in JSON; in-process it is refused the same way
    let e = emu
        .set_account_limits(limits(|l| {
            l.ec2
                .insert("mutating".into(), BucketOverride::new(5, f64::NAN));
        }))
        .unwrap_err();
    assert!(e.message.starts_with("ec2.mutating: refill_per_sec"), "{e}");
    // nothing refused took effect
    assert!(!emu.account_limits().config.enabled);

    // the setup file: the same checks, the path from the file's top
    let cfg: LabConfig = serde_json::from_value(json!({
        "account_limits": {"enabled": true, "elbv2": {"registration": {"capacity": 0}}}
    }))
    .unwrap();
    let e = apply(&emu, &cfg).await.unwrap_err().to_string();
    assert!(
        e.starts_with("account_limits.elbv2.registration: capacity must be at least 1"),
        "{e}"
    );
    let cfg: LabConfig = serde_json::from_value(json!({
        "account_limits": {"enabled": true, "ec2": {"eni_mutating": {"capacity": 7}}}
    }))
    .unwrap();
    apply(&emu, &cfg).await.unwrap();
    assert_eq!(
        emu.account_limits().config.ec2["eni_mutating"],
        BucketOverride {
            capacity: Some(7),
            refill_per_sec: None
        }
    );
}
