use std::sync::Arc;

use super::*;

/// The value of the sample line starting with `series` (name plus labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.trim().parse().ok())
    })
}

#[test]
fn encoding_carries_the_vpc_cni_names_and_values() {
    let m = Metrics::new();
    m.set_total_ip_addresses(28);
    m.set_assigned_ip_addresses(3);
    m.set_eni_allocated(2);
    m.set_eni_max(3);
    m.set_ip_max(27);
    m.set_total_ipv4_prefixes(0);
    m.set_cooldown_ip_addresses(1);
    m.set_assigned_ip_per_eni([("eni-1", 2), ("eni-2", 1)]);
    m.set_assigned_ip_per_cidr([("10.0.0.5/32", 1)]);
    m.inc_add_ip_req();
    m.inc_add_ip_req();
    m.inc_del_ip_req("PodDeleted");
    m.inc_no_available_ip();
    m.inc_ipamd_error("increaseIPPool");
    m.inc_reconcile("eniReconcile");
    m.inc_force_removed_enis(1);
    m.inc_force_removed_ips(2);
    drop(m.action("increaseIPPool"));

    let t = m.encode();
    assert_eq!(sample(&t, "awscni_total_ip_addresses "), Some(28.0));
    assert_eq!(sample(&t, "awscni_assigned_ip_addresses "), Some(3.0));
    assert_eq!(sample(&t, "awscni_eni_allocated "), Some(2.0));
    assert_eq!(sample(&t, "awscni_eni_max "), Some(3.0));
    assert_eq!(sample(&t, "awscni_ip_max "), Some(27.0));
    assert_eq!(sample(&t, "awscni_total_ipv4_prefixes "), Some(0.0));
    assert_eq!(sample(&t, "vpcnet_cooldown_ip_addresses "), Some(1.0));
    assert_eq!(
        sample(&t, "awscni_assigned_ip_per_eni{eni=\"eni-1\"} "),
        Some(2.0)
    );
    assert_eq!(
        sample(&t, "awscni_assigned_ip_per_cidr{cidr=\"10.0.0.5/32\"} "),
        Some(1.0)
    );
    // Counters keep the VPC CNI's sample names (no `_total`).
    assert_eq!(sample(&t, "awscni_add_ip_req_count "), Some(2.0));
    assert_eq!(
        sample(&t, "awscni_del_ip_req_count{reason=\"PodDeleted\"} "),
        Some(1.0)
    );
    assert_eq!(sample(&t, "awscni_no_available_ip_addresses "), Some(1.0));
    assert_eq!(
        sample(&t, "awscni_ipamd_error_count{fn=\"increaseIPPool\"} "),
        Some(1.0)
    );
    assert_eq!(
        sample(&t, "awscni_reconcile_count{fn=\"eniReconcile\"} "),
        Some(1.0)
    );
    assert_eq!(sample(&t, "awscni_force_removed_enis "), Some(1.0));
    assert_eq!(sample(&t, "awscni_force_removed_ips "), Some(2.0));
    assert!(!t.contains("_count_total"), "{t}");
    assert_eq!(
        sample(&t, "awscni_ipamd_action_inprogress{fn=\"increaseIPPool\"} "),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &t,
            "vpcnet_ipamd_action_latency_ms_count{fn=\"increaseIPPool\"} "
        ),
        Some(1.0)
    );
    assert!(t.ends_with("# EOF\n"));
}

#[test]
fn action_timer_counts_in_progress() {
    let m = Metrics::new();
    let a = m.action("decreaseIPPool");
    let b = m.action("decreaseIPPool");
    assert_eq!(
        sample(
            &m.encode(),
            "awscni_ipamd_action_inprogress{fn=\"decreaseIPPool\"} "
        ),
        Some(2.0)
    );
    drop(a);
    assert_eq!(
        sample(
            &m.encode(),
            "awscni_ipamd_action_inprogress{fn=\"decreaseIPPool\"} "
        ),
        Some(1.0)
    );
    drop(b);
    assert_eq!(
        sample(
            &m.encode(),
            "vpcnet_ipamd_action_latency_ms_count{fn=\"decreaseIPPool\"} "
        ),
        Some(2.0)
    );
}

#[test]
fn ec2_observer_counts_requests_errors_and_latency_by_action() {
    let m = Arc::new(Metrics::new());
    let obs: Arc<dyn Ec2Observer> = m.clone();
    let throttled = Ec2Error::api(
        Action::AssignPrivateIpAddresses,
        "RequestLimitExceeded",
        "",
        Some(503),
    );
    obs.on_attempt(
        Action::AssignPrivateIpAddresses,
        Duration::from_millis(12),
        Some(&throttled),
    );
    obs.on_attempt(
        Action::AssignPrivateIpAddresses,
        Duration::from_millis(30),
        None,
    );
    obs.on_attempt(
        Action::DescribeNetworkInterfaces,
        Duration::from_millis(7),
        None,
    );
    let limit = Ec2Error::api(
        Action::AttachNetworkInterface,
        "AttachmentLimitExceeded",
        "",
        Some(400),
    );
    obs.on_attempt(
        Action::AttachNetworkInterface,
        Duration::from_millis(3),
        Some(&limit),
    );
    obs.on_call(
        Action::AttachNetworkInterface,
        Duration::from_millis(3),
        Some(&limit),
    );
    obs.on_rate_limited(Action::CreateNetworkInterface, Duration::from_millis(200));

    let t = m.encode();
    assert_eq!(
        sample(
            &t,
            "awscni_ec2api_req_count{fn=\"AssignPrivateIpAddresses\"} "
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &t,
            "awscni_ec2api_req_count{fn=\"DescribeNetworkInterfaces\"} "
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "awscni_ec2api_error_count{fn=\"AssignPrivateIpAddresses\"} "
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &t,
            "awscni_ec2api_error_count{fn=\"AttachNetworkInterface\"} "
        ),
        Some(1.0)
    );
    assert_eq!(
            sample(&t, "awscni_aws_api_error_count{api=\"AssignPrivateIpAddresses\",error=\"RequestLimitExceeded\"} "),
            Some(1.0)
        );
    assert_eq!(
            sample(&t, "awscni_aws_api_latency_ms_count{api=\"AssignPrivateIpAddresses\",error=\"false\",status=\"200\"} "),
            Some(1.0)
        );
    assert_eq!(
            sample(&t, "awscni_aws_api_latency_ms_sum{api=\"AssignPrivateIpAddresses\",error=\"true\",status=\"RequestLimitExceeded\"} "),
            Some(12.0)
        );
    assert_eq!(
            sample(&t, "vpcnet_ec2_call_error_count{api=\"AttachNetworkInterface\",error=\"AttachmentLimitExceeded\"} "),
            Some(1.0)
        );
    assert_eq!(
        sample(
            &t,
            "vpcnet_ec2_ratelimited_count{fn=\"CreateNetworkInterface\"} "
        ),
        Some(1.0)
    );
}

#[test]
fn per_eni_series_are_replaced() {
    let m = Metrics::new();
    m.set_assigned_ip_per_eni([("eni-1", 2), ("eni-2", 1)]);
    m.set_assigned_ip_per_eni([("eni-2", 4)]);
    let t = m.encode();
    assert!(!t.contains("eni-1"), "{t}");
    assert_eq!(
        sample(&t, "awscni_assigned_ip_per_eni{eni=\"eni-2\"} "),
        Some(4.0)
    );
}
