//! The compiler against the reference semantics: on generated worlds, for every local pod,
//! both directions, both modes and many packets, the compiled ruleset allows exactly what
//! the reference evaluator allows. The ruleset is well formed and compiling is
//! deterministic (and independent of the order of the local pods).

mod support;

use proptest::prelude::*;
use vpcnet_policy::{compile, Direction, LocalPod, Mode, PeerMatch, PortMatch, World};

use support::{evaluate, generate, reference, Packet, Way};

fn reference_allows(world: &World, mode: Mode, lp: &LocalPod, way: Way, p: Packet) -> bool {
    let pod = (lp.namespace.as_str(), lp.name.as_str());
    match way {
        Way::Ingress => reference::allowed_ingress(world, mode, pod, p.peer, p.protocol, p.port),
        Way::Egress => reference::allowed_egress(world, mode, pod, p.peer, p.protocol, p.port),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn compiled_rules_agree_with_the_reference(case in generate::case()) {
        for mode in [Mode::Standard, Mode::Strict] {
            let rs = compile(&case.world, &case.local, mode);
            if let Err(e) = evaluate::check(&rs) {
                prop_assert!(false, "{mode:?}: {e}\n{rs:#?}");
            }
            prop_assert_eq!(&rs, &compile(&case.world, &case.local, mode));
            let mut reversed = case.local.clone();
            reversed.reverse();
            prop_assert_eq!(&rs, &compile(&case.world, &reversed, mode));
            for lp in &case.local {
                for &packet in &case.packets {
                    for way in [Way::Ingress, Way::Egress] {
                        let want = reference_allows(&case.world, mode, lp, way, packet);
                        let got = evaluate::allowed(&rs, &lp.interface, way, packet);
                        prop_assert_eq!(
                            got, want,
                            "{:?} {:?} {}/{} {:?}\n{:#?}",
                            mode, way, lp.namespace, lp.name, packet, rs.pods[&lp.interface]
                        );
                    }
                }
            }
        }
    }
}

/// The generator reaches the cases that matter (else the agreement above could pass by
/// testing little): packets allowed and packets denied by pods isolated with some allows,
/// allows of every peer kind, port ranges.
#[test]
fn generated_cases_exercise_the_semantics() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = generate::case();
    let (mut allowed, mut denied) = (0, 0);
    let (mut any, mut sets, mut addr_ports, mut ranges) = (0, 0, 0, 0);
    for _ in 0..300 {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        let rs = compile(&case.world, &case.local, Mode::Standard);
        for lp in &case.local {
            let rules = &rs.pods[&lp.interface];
            for (way, direction) in [(Way::Ingress, &rules.ingress), (Way::Egress, &rules.egress)] {
                let Direction::Isolated(allows) = direction else {
                    continue;
                };
                if allows.is_empty() {
                    continue;
                }
                for a in allows {
                    match a.peer {
                        PeerMatch::Any => any += 1,
                        PeerMatch::Set(_) => sets += 1,
                        PeerMatch::AddrPorts(_) => addr_ports += 1,
                    }
                    if matches!(a.ports, PortMatch::Ports { first, last, .. } if first < last) {
                        ranges += 1;
                    }
                }
                for &packet in &case.packets {
                    if reference_allows(&case.world, Mode::Standard, lp, way, packet) {
                        allowed += 1;
                    } else {
                        denied += 1;
                    }
                }
            }
        }
    }
    let counts = [allowed, denied, any, sets, addr_ports, ranges];
    assert!(counts.iter().all(|&c| c > 20), "{counts:?}");
}
