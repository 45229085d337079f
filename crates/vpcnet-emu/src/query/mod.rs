//! The EC2 Query protocol: form-encoded requests, XML responses in EC2's namespace, EC2's
//! error envelope.

pub mod actions;
mod describe;
pub mod filter;
mod ipv6;
pub mod params;
pub mod render;
pub mod security_groups;
pub mod xml;

use crate::error::Ec2Error;
use xml::Xml;

/// EC2's error envelope:
/// `<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>`.
pub fn error_body(err: &Ec2Error, request_id: &str) -> String {
    let mut x = Xml::bare("Response");
    x.open("Errors")
        .open("Error")
        .leaf("Code", &err.code)
        .leaf("Message", &err.message)
        .close("Error")
        .close("Errors")
        .leaf("RequestID", request_id);
    x.finish("Response")
}
