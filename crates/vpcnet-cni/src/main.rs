//! `vpcnet-cni`: executed by the container runtime per pod (CNI_COMMAND in the environment, the
//! network configuration on stdin, the result or error JSON on stdout).

use std::io::{Read, Write};

fn main() {
    let mut stdin = Vec::new();
    // VERSION may come without stdin; a read error is treated as empty input (decoded later).
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let get = |k: &str| std::env::var(k).ok();
    let (out, status) = vpcnet_cni::run_plugin(&get, &stdin);
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(out.as_bytes());
    let _ = o.flush();
    std::process::exit(status);
}
