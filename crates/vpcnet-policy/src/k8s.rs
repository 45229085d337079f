//! TEMP STUB
pub struct Converted<T> { pub value: T, pub warnings: Vec<String> }
pub fn namespace(_n: &k8s_openapi::api::core::v1::Namespace) -> Option<crate::Namespace> { None }
pub fn pod(_n: &k8s_openapi::api::core::v1::Pod) -> Option<crate::Pod> { None }
pub fn policy(_n: &k8s_openapi::api::networking::v1::NetworkPolicy) -> Converted<crate::Policy> { unimplemented!() }
