//! EC2 and IMDS adapter: the only crate that depends on aws-sdk-ec2 (1.2 million lines).
//! The CNI plugin and the pure IPAM core never depend on it.

pub use aws_config;
pub use aws_sdk_ec2;
