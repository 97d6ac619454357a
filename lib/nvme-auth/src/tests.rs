//! Both state machines against each other: every hash with every group,
//! one way and both ways, and each bad input refused as the spec says.

use super::*;
use proptest::prelude::*;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
const SUBNQN: &str = "nqn.2016-06.io.bdevkit:cnode1";

struct Pair {
    host: Host,
    ctrl: Controller,
}

fn pair(
    host_key: &Secret,
    ctrl_key_host_side: Option<&Secret>,
    target_host_key: &Secret,
    target_ctrl_key: Option<&Secret>,
    hashes: (&[HashFn], &[HashFn]),
    groups: (&[DhGroup], &[DhGroup]),
) -> Pair {
    Pair {
        host: Host::new(
            HostConfig {
                hostnqn: HOSTNQN.into(),
                subnqn: SUBNQN.into(),
                key: host_key.clone(),
                ctrl_key: ctrl_key_host_side.cloned(),
                hashes: hashes.0.to_vec(),
                groups: groups.0.to_vec(),
            },
            9,
            4242,
        ),
        ctrl: Controller::new(
            CtrlConfig {
                hostnqn: HOSTNQN.into(),
                subnqn: SUBNQN.into(),
                key: target_host_key.clone(),
                ctrl_key: target_ctrl_key.cloned(),
                hashes: hashes.1.to_vec(),
                groups: groups.1.to_vec(),
            },
            31337,
        ),
    }
}

/// Runs the transaction; `Ok` when both sides say it succeeded.
fn run(p: &mut Pair) -> Result<(), String> {
    p.ctrl.on_send(&p.host.negotiate());
    let mut incoming = p.ctrl.on_receive().ok_or("no challenge")?;
    loop {
        match p.host.on_message(&incoming) {
            Ok(HostStep::SendThenReceive(m)) => {
                p.ctrl.on_send(&m);
                incoming = p.ctrl.on_receive().ok_or("nothing to receive")?;
            }
            Ok(HostStep::SendAndFinish(m)) => {
                p.ctrl.on_send(&m);
                break;
            }
            Ok(HostStep::Finished) => break,
            Err(f) => {
                if let Some(m) = f.failure2 {
                    p.ctrl.on_send(&m);
                }
                return Err(format!("host: {:?} {}", f.reason, f.why));
            }
        }
    }
    if p.ctrl.state() != CtrlState::Done {
        return Err(format!(
            "controller: {:?} {:?}",
            p.ctrl.state(),
            p.ctrl.failure()
        ));
    }
    if !p.host.is_done() {
        return Err("host not done".into());
    }
    Ok(())
}

#[test]
fn every_hash_and_group_one_way_and_both_ways() {
    // Every hash with the null group and ffdhe2048, both ways; every
    // larger group once (their arithmetic is the same code, only slower).
    let mut cases = Vec::new();
    for h in HashFn::ALL {
        for g in [DhGroup::Null, DhGroup::Ffdhe2048] {
            for bidir in [false, true] {
                cases.push((h, g, bidir));
            }
        }
    }
    for (i, g) in DhGroup::ALL.into_iter().skip(2).enumerate() {
        cases.push((HashFn::ALL[i % 3], g, i % 2 == 0));
    }
    for (h, g, bidir) in cases {
        {
            {
                let hk = Secret::generate(h.len(), Some(h)).unwrap();
                let ck = Secret::generate(32, None).unwrap();
                let mut p = pair(
                    &hk,
                    bidir.then_some(&ck),
                    &hk,
                    Some(&ck),
                    (&[h], &HashFn::ALL),
                    (&[g], &DhGroup::ALL),
                );
                run(&mut p).unwrap_or_else(|e| panic!("{h:?} {g:?} bidir={bidir}: {e}"));
                assert_eq!(p.ctrl.chosen(), (h, g));
            }
        }
    }
}

#[test]
fn the_strongest_common_pair_is_chosen() {
    let k = Secret::generate(32, None).unwrap();
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&HashFn::ALL, &[HashFn::Sha256, HashFn::Sha384]),
        (&[DhGroup::Null, DhGroup::Ffdhe2048], &DhGroup::ALL),
    );
    run(&mut p).unwrap();
    assert_eq!(p.ctrl.chosen(), (HashFn::Sha384, DhGroup::Ffdhe2048));
}

#[test]
fn a_wrong_key_fails_with_failure1() {
    let k = Secret::generate(32, None).unwrap();
    let other = Secret::generate(32, None).unwrap();
    let mut p = pair(
        &k,
        None,
        &other,
        None,
        (&HashFn::ALL, &HashFn::ALL),
        (&DhGroup::ALL, &DhGroup::ALL),
    );
    let e = run(&mut p).unwrap_err();
    assert!(e.contains("Failed"), "{e}");
    assert_eq!(p.ctrl.state(), CtrlState::Failed);
    assert_eq!(p.ctrl.failure().unwrap().0, Reason::Failed);
}

#[test]
fn a_controller_with_the_wrong_key_is_caught_by_the_host() {
    let k = Secret::generate(32, None).unwrap();
    let ck = Secret::generate(32, None).unwrap();
    let wrong = Secret::generate(32, None).unwrap();
    let mut p = pair(
        &k,
        Some(&ck),
        &k,
        Some(&wrong),
        (&HashFn::ALL, &HashFn::ALL),
        (&[DhGroup::Null], &DhGroup::ALL),
    );
    let e = run(&mut p).unwrap_err();
    assert!(e.contains("controller's response is wrong"), "{e}");
    assert_eq!(p.ctrl.state(), CtrlState::Failed, "Failure2 reached it");
}

#[test]
fn no_common_hash_or_group_is_refused() {
    let k = Secret::generate(32, None).unwrap();
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&[HashFn::Sha256], &[HashFn::Sha512]),
        (&DhGroup::ALL, &DhGroup::ALL),
    );
    assert!(run(&mut p).unwrap_err().contains("HashUnusable"));
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&HashFn::ALL, &HashFn::ALL),
        (&[DhGroup::Ffdhe3072], &[DhGroup::Null]),
    );
    assert!(run(&mut p).unwrap_err().contains("DhGroupUnusable"));
}

#[test]
fn messages_out_of_sequence_are_refused() {
    let k = Secret::generate(32, None).unwrap();
    // A reply before any negotiate.
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&HashFn::ALL, &HashFn::ALL),
        (&DhGroup::ALL, &DhGroup::ALL),
    );
    p.ctrl.on_send(&Message::Success2 { tid: 0 }.encode());
    assert_eq!(p.ctrl.state(), CtrlState::Failure1);
    let f = Message::decode(&p.ctrl.on_receive().unwrap()).unwrap();
    assert!(matches!(
        f,
        Message::Failure {
            which: 1,
            reason: Reason::IncorrectProtocolMessage,
            ..
        }
    ));
    assert!(p.ctrl.on_receive().is_none(), "nothing after Failure1");
    // A receive before the negotiate.
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&HashFn::ALL, &HashFn::ALL),
        (&DhGroup::ALL, &DhGroup::ALL),
    );
    let f = Message::decode(&p.ctrl.on_receive().unwrap()).unwrap();
    assert!(matches!(f, Message::Failure { which: 1, .. }));
    // A replayed reply (a second one) after success.
    let mut p = pair(
        &k,
        None,
        &k,
        None,
        (&HashFn::ALL, &HashFn::ALL),
        (&[DhGroup::Null], &DhGroup::ALL),
    );
    p.ctrl.on_send(&p.host.negotiate());
    let ch = p.ctrl.on_receive().unwrap();
    let HostStep::SendThenReceive(reply) = p.host.on_message(&ch).unwrap() else {
        panic!()
    };
    p.ctrl.on_send(&reply);
    let _ = p.ctrl.on_receive().unwrap();
    assert_eq!(p.ctrl.state(), CtrlState::Done);
    p.ctrl.on_send(&reply);
    assert_ne!(
        p.ctrl.state(),
        CtrlState::Done,
        "a replay after the end is an error"
    );
}

#[test]
fn a_reply_with_another_tid_or_truncated_is_refused() {
    let k = Secret::generate(32, None).unwrap();
    for mutate in 0..3 {
        let mut p = pair(
            &k,
            None,
            &k,
            None,
            (&HashFn::ALL, &HashFn::ALL),
            (&[DhGroup::Ffdhe2048], &DhGroup::ALL),
        );
        p.ctrl.on_send(&p.host.negotiate());
        let ch = p.ctrl.on_receive().unwrap();
        let HostStep::SendThenReceive(mut reply) = p.host.on_message(&ch).unwrap() else {
            panic!()
        };
        match mutate {
            0 => reply[4] ^= 1, // tid
            1 => reply.truncate(reply.len() - 1),
            _ => {
                let n = reply.len();
                reply[n - 1] ^= 0x80; // the DH value
            }
        }
        p.ctrl.on_send(&reply);
        assert_eq!(p.ctrl.state(), CtrlState::Failure1, "mutation {mutate}");
    }
}

#[test]
fn a_challenge_the_host_did_not_allow_is_refused() {
    let k = Secret::generate(32, None).unwrap();
    let mut host = Host::new(
        HostConfig {
            hostnqn: HOSTNQN.into(),
            subnqn: SUBNQN.into(),
            key: k,
            ctrl_key: None,
            hashes: vec![HashFn::Sha256],
            groups: vec![DhGroup::Null],
        },
        5,
        1,
    );
    let _ = host.negotiate();
    let ch = Message::Challenge {
        tid: 5,
        hash: HashFn::Sha512,
        group: DhGroup::Null,
        seqnum: 3,
        cval: vec![0; 64],
        dhv: vec![],
    };
    let f = host.on_message(&ch.encode()).unwrap_err();
    assert_eq!(f.reason, Reason::HashUnusable);
    assert!(f.failure2.is_some());
}

proptest! {
    /// A controller fed arbitrary Authentication Send payloads never
    /// panics, and never ends up authenticated.
    #[test]
    fn arbitrary_sends_never_authenticate(msgs in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 0..300), 1..6)) {
        let k = Secret::generate(32, None).unwrap();
        let mut p = pair(&k, None, &k, None, (&HashFn::ALL, &HashFn::ALL), (&DhGroup::ALL, &DhGroup::ALL));
        for m in &msgs {
            p.ctrl.on_send(m);
            let _ = p.ctrl.on_receive();
        }
        prop_assert_ne!(p.ctrl.state(), CtrlState::Done);
    }
}
