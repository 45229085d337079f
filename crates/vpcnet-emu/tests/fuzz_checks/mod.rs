//! What the fuzz target `emu_query` (fuzz/) checks for one input; shared by the target
//! (through `#[path]`) and by `fuzz_regressions.rs`, which feeds the seeds and every kept
//! reproducer in CI. Panics on a broken property.
#![allow(dead_code)]

use vpcnet_emu::{Emulator, RunInstance};

/// Query API parameters: each input line (at most 8) is one form-encoded request body
/// (`$ENI`, `$INSTANCE`, `$SUBNET`, `$ATTACH`, `$SG` stand for the fixture's IDs) sent in
/// order through `Emulator::query_call` to a fresh cloud with one m5.large instance. Every
/// answer has a status and a body, and the cloud's books balance after each call.
pub fn emu_query(data: &[u8]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let emu = Emulator::new(7);
        let vpc = emu.create_vpc("10.0.0.0/16".parse().unwrap(), &[]).unwrap();
        let subnet = emu
            .create_subnet(&vpc.vpc_id, "10.0.0.0/26".parse().unwrap(), "us-east-1a")
            .unwrap();
        let inst = emu
            .run_instance(RunInstance {
                instance_type: "m5.large".into(),
                subnet_id: subnet.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let eni = inst.primary_eni.clone().unwrap();
        let ids = [
            ("$ENI", eni.eni_id.clone()),
            ("$ATTACH", eni.attachment.unwrap().attachment_id),
            ("$INSTANCE", inst.instance_id.clone()),
            ("$SUBNET", subnet),
            ("$SG", vpc.default_security_group_id),
        ];
        for line in data.split(|b| *b == b'\n').take(8) {
            let mut body = String::from_utf8_lossy(line).into_owned();
            for (k, v) in &ids {
                body = body.replace(k, v);
            }
            let (status, xml) = emu
                .query_call(body.as_bytes(), None, None, Some(inst.private_ip.into()))
                .await;
            assert!((200..600).contains(&status) && !xml.is_empty());
            if let Err(e) = emu.with_cloud(|c| c.check_books()) {
                panic!("books do not balance after {body:?}: {e}");
            }
        }
    });
}
