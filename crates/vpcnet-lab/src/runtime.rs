//! The lab's one tokio runtime for its host-side async work (the emulator API over its Unix
//! socket), started on first use and shared by every call of the process. Work that must stay
//! inside a lab namespace runs on a runtime of its own thread instead
//! ([`crate::spawn::in_netns_async`]).

use std::future::Future;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};
use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// Runs `f` to completion on the lab's runtime (from synchronous code; the future itself is
/// polled on the calling thread, its spawned tasks on the runtime's two workers).
pub fn block_on<F: Future>(f: F) -> Result<F::Output> {
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("vpcnet-lab")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match rt {
        Ok(rt) => Ok(rt.block_on(f)),
        Err(e) => Err(anyhow!("starting the lab's tokio runtime: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn calls_share_one_runtime() {
        let a = super::block_on(async { tokio::runtime::Handle::current().id() }).unwrap();
        let b = std::thread::spawn(|| {
            super::block_on(async { tokio::runtime::Handle::current().id() }).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(a, b);
    }
}
