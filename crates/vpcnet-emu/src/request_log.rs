//! The request log: one [`RequestRecord`] per EC2, ELBv2 or IMDS request the emulator
//! answered, with who made it and how it was answered, so a lab can list the calls each agent
//! made and check that a client (vpcnet-agent, the VPC CNI's ipamd) got no answer EC2 would
//! not give. Served by the control API as `GET /_emu/requests` (`DELETE` clears).
//!
//! The log keeps the newest [`CAPACITY`] records; `dropped` counts older ones let go.

use std::collections::VecDeque;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// Records kept (about 200 bytes each: at most ~40 MB).
pub const CAPACITY: usize = 200_000;

/// Which API a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// The EC2 Query API.
    Ec2,
    /// ELBv2's Query API (same endpoint).
    Elbv2,
    /// The instance metadata service.
    Imds,
}

/// One request as the emulator answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Sequence number, from 1, in arrival order of the answers.
    pub seq: u64,
    /// Milliseconds since the emulator started.
    pub at_ms: u64,
    /// The API.
    pub api: Api,
    /// EC2/ELBv2: the `Action` parameter (empty if missing). IMDS: method and path, e.g.
    /// `GET /latest/meta-data/mac`.
    pub action: String,
    /// Whether `action` is a mutating EC2 action (Create*, Attach*, Detach*, Delete*,
    /// Modify*, Assign*, Unassign*, Terminate*; CreateTags too) or a mutating ELBv2 action
    /// (Create*, Delete*, Modify*, Register/DeregisterTargets, AddTags, RemoveTags, ...).
    #[serde(default)]
    pub mutating: bool,
    /// The instance that made the call: for IMDS the instance it answered for; for EC2 the
    /// instance whose primary private IP is the source address (the lab's nodes).
    pub instance_id: Option<String>,
    /// The source address.
    pub source: Option<IpAddr>,
    /// The `User-Agent` header (the SDK and its version, e.g. `aws-sdk-go-v2/1.36.3 ...`).
    pub user_agent: Option<String>,
    /// The access key ID from the SigV4 `Authorization` header's `Credential=` (EC2/ELBv2).
    pub access_key: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
    /// EC2's error code when the answer was an error (e.g. `InvalidAction`,
    /// `RequestLimitExceeded`); for IMDS errors the status's reason.
    pub error_code: Option<String>,
}

impl RequestRecord {
    /// Whether the answer was a success (2xx).
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// What `GET /_emu/requests` answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestLog {
    /// The kept records, oldest first.
    pub records: Vec<RequestRecord>,
    /// Records let go because the log was full.
    pub dropped: u64,
}

/// The log as kept in memory.
#[derive(Debug, Default)]
pub(crate) struct Log {
    records: VecDeque<RequestRecord>,
    next_seq: u64,
    dropped: u64,
}

impl Log {
    /// Appends `r` (its `seq` is assigned here).
    pub(crate) fn push(&mut self, mut r: RequestRecord) {
        self.next_seq += 1;
        r.seq = self.next_seq;
        if self.records.len() == CAPACITY {
            self.records.pop_front();
            self.dropped += 1;
        }
        self.records.push_back(r);
    }

    /// The records with `seq > since`.
    pub(crate) fn snapshot(&self, since: u64) -> RequestLog {
        RequestLog {
            records: self
                .records
                .iter()
                .filter(|r| r.seq > since)
                .cloned()
                .collect(),
            dropped: self.dropped,
        }
    }

    /// Empties the log (sequence numbers keep counting).
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.dropped = 0;
    }
}

/// The access key ID of a SigV4 `Authorization` header
/// (`AWS4-HMAC-SHA256 Credential=AKID/20250101/us-east-1/ec2/aws4_request, ...`).
pub(crate) fn access_key(authorization: &str) -> Option<String> {
    let rest = authorization.split("Credential=").nth(1)?;
    let key = rest.split('/').next()?;
    (!key.is_empty()).then(|| key.to_string())
}

/// The `<Code>` of an EC2/ELBv2 error body.
pub(crate) fn error_code(body: &str) -> Option<String> {
    let start = body.find("<Code>")? + "<Code>".len();
    let end = body[start..].find("</Code>")? + start;
    Some(body[start..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(action: &str) -> RequestRecord {
        RequestRecord {
            seq: 0,
            at_ms: 0,
            api: Api::Ec2,
            action: action.into(),
            mutating: false,
            instance_id: None,
            source: None,
            user_agent: None,
            access_key: None,
            status: 200,
            error_code: None,
        }
    }

    #[test]
    fn keeps_the_newest_records_and_counts_the_dropped() {
        let mut log = Log::default();
        for _ in 0..CAPACITY + 3 {
            log.push(rec("DescribeVpcs"));
        }
        let s = log.snapshot(0);
        assert_eq!(s.records.len(), CAPACITY);
        assert_eq!(s.dropped, 3);
        assert_eq!(s.records[0].seq, 4);
        assert_eq!(log.snapshot(CAPACITY as u64 + 1).records.len(), 2);
        log.clear();
        log.push(rec("X"));
        assert_eq!(log.snapshot(0).records[0].seq, CAPACITY as u64 + 4);
    }

    #[test]
    fn parses_the_access_key_and_the_error_code() {
        assert_eq!(
            access_key(
                "AWS4-HMAC-SHA256 Credential=AKIDLAB/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=00"
            )
            .as_deref(),
            Some("AKIDLAB")
        );
        assert_eq!(access_key("Bearer x"), None);
        assert_eq!(
            error_code("<Response><Errors><Error><Code>InvalidAction</Code><Message>m</Message></Error></Errors></Response>")
                .as_deref(),
            Some("InvalidAction")
        );
        assert_eq!(error_code("<ok/>"), None);
    }
}
