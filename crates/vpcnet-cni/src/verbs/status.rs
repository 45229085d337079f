//! STATUS (CNI 1.1.0): ready when the agent answers Status with `ready`; otherwise error 50.

use super::Invocation;
use crate::agent_client::Agent;
use crate::cni::error::{code, CniError};

pub async fn status(inv: &Invocation) -> Result<(), CniError> {
    let not_available = |why: String| {
        CniError::new(
            code::NOT_AVAILABLE,
            "vpcnet-cni cannot set up pods now",
            why,
        )
    };
    let mut agent = Agent::connect(&inv.conf.agent_socket, inv.conf.agent_timeout)
        .await
        .map_err(|e| not_available(e.to_string()))?;
    let s = agent
        .status()
        .await
        .map_err(|e| not_available(e.to_string()))?;
    if s.ready {
        Ok(())
    } else {
        Err(not_available(format!(
            "vpcnet-agent is not ready ({}); {} addresses free",
            s.message, s.available_ips
        )))
    }
}
