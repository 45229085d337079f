//! Another tool in the account (scenario d): while the fleet joins, something else calls EC2
//! under the same account, using a share of the refill of every bucket the fleet's agents
//! draw from, as a Terraform run, a controller or a monitoring agent would. Its calls are
//! metered like the agents' and then fail (they name an ENI or subnet that does not exist),
//! so they take tokens and change nothing; they come through the lab cloud's API socket, with
//! no instance, so the fleet's figures leave them out.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vpcnet_emu::AccountLimits;

use crate::lab::Lab;

/// An EC2 action and the parameters of a call of it that the cloud meters and then refuses.
type Call = (&'static str, &'static [(&'static str, &'static str)]);

/// The actions the agents of either CNI call while a fleet joins.
const ACTIONS: &[Call] = &[
    (
        "DescribeNetworkInterfaces",
        &[("NetworkInterfaceId.1", "eni-0000000000other")],
    ),
    ("DescribeSubnets", &[("SubnetId.1", "subnet-00000000other")]),
    (
        "DescribeInstances",
        &[("InstanceId.1", "i-000000000000other")],
    ),
    (
        "AssignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", "eni-0000000000other"),
            ("SecondaryPrivateIpAddressCount", "1"),
        ],
    ),
    (
        "UnassignPrivateIpAddresses",
        &[
            ("NetworkInterfaceId", "eni-0000000000other"),
            ("PrivateIpAddress.1", "10.255.255.1"),
        ],
    ),
    (
        "CreateNetworkInterface",
        &[("SubnetId", "subnet-00000000other")],
    ),
    (
        "AttachNetworkInterface",
        &[
            ("NetworkInterfaceId", "eni-0000000000other"),
            ("InstanceId", "i-000000000000other"),
            ("DeviceIndex", "1"),
        ],
    ),
    (
        "ModifyNetworkInterfaceAttribute",
        &[
            ("NetworkInterfaceId", "eni-0000000000other"),
            ("Description.Value", "other"),
        ],
    ),
    (
        "DeleteNetworkInterface",
        &[("NetworkInterfaceId", "eni-0000000000other")],
    ),
    (
        "CreateTags",
        &[
            ("ResourceId.1", "eni-0000000000other"),
            ("Tag.1.Key", "other"),
            ("Tag.1.Value", "tool"),
        ],
    ),
];

/// The other tool, calling until dropped.
pub struct OtherTool {
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl OtherTool {
    /// Starts calling every action of the list at `share` (0..1) of its bucket's refill in
    /// `limits`, evenly spaced.
    pub fn start(lab: &Lab, limits: &AccountLimits, share: f64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let schedule: Vec<(Call, Duration)> = ACTIONS
            .iter()
            .filter_map(|call| {
                let rate = limits.ec2_bucket(call.0, true).refill_per_sec * share;
                (rate > 0.0 && rate.is_finite())
                    .then(|| (*call, Duration::from_secs_f64(1.0 / rate)))
            })
            .collect();
        if schedule.is_empty() {
            return OtherTool {
                stop,
                calls,
                thread: None,
            };
        }
        let (lab, s, c) = (lab.clone(), stop.clone(), calls.clone());
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut next: Vec<Duration> = schedule.iter().map(|(_, every)| *every).collect();
            while !s.load(Ordering::Relaxed) {
                let (i, due) = next
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, d)| **d)
                    .map(|(i, d)| (i, *d))
                    .expect("at least one action");
                if let Some(wait) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait.min(Duration::from_millis(100)));
                    continue;
                }
                let ((action, params), every) = schedule[i];
                // Refused by design (nothing it names exists); metered all the same.
                let _ = lab.cloud().ec2(action, params);
                c.fetch_add(1, Ordering::Relaxed);
                next[i] += every;
            }
        });
        OtherTool {
            stop,
            calls,
            thread: Some(thread),
        }
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl Drop for OtherTool {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
