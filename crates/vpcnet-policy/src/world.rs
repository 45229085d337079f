//! TEMP STUB
use crate::model::{Namespace, Pod, Policy};
#[derive(Debug, Clone, Default)]
pub struct World {}
impl World {
    pub fn upsert_namespace(&mut self, _n: Namespace) -> bool { false }
    pub fn remove_namespace(&mut self, _n: &str) -> bool { false }
    pub fn upsert_pod(&mut self, _n: Pod) -> bool { false }
    pub fn remove_pod(&mut self, _a: &str, _n: &str) -> bool { false }
    pub fn upsert_policy(&mut self, _n: Policy) -> bool { false }
    pub fn remove_policy(&mut self, _a: &str, _n: &str) -> bool { false }
    pub fn pod(&self, _a: &str, _n: &str) -> Option<&Pod> { None }
    pub fn pods(&self) -> impl Iterator<Item = &Pod> { std::iter::empty() }
    pub fn policies(&self) -> impl Iterator<Item = &Policy> { std::iter::empty() }
    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> { std::iter::empty() }
}
