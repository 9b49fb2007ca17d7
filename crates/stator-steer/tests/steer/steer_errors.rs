//! Misuse gets a clear error that says what to do, and leaves the group working.
//!
//! tier: root (BPF, namespaces or BIRD; scripts/test-tier.sh)
//!
//! Sockets are made in a namespace of the test's own; nothing touches the host's network.
#[allow(unused_imports)]
use crate::common;

use std::net::SocketAddr;
use std::os::fd::AsFd;

use crate::common::{Family, Lab, Proto, reuseport_socket};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use stator_steer::{ReuseportSteering, RssKey, SteerError, SteeringOptions};

fn plain_socket(lab: &Lab, ty: Type, addr: SocketAddr, listen: bool) -> Socket {
    lab.server
        .run_in(move || {
            let p = if ty == Type::STREAM {
                Protocol::TCP
            } else {
                Protocol::UDP
            };
            let s = Socket::new(Domain::IPV4, ty, Some(p)).expect("socket");
            s.bind(&SockAddr::from(addr)).expect("bind");
            if listen {
                s.listen(16).expect("listen");
            }
            s
        })
        .expect("namespace")
}

#[test]
fn misuse_is_refused_with_a_reason() {
    let lab = Lab::new("e");
    let server = Lab::server_addr(Family::V4);

    // options are checked before anything is loaded
    let e = ReuseportSteering::load(&SteeringOptions {
        table_size: Some(1000),
        ..SteeringOptions::new(2)
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            SteerError::InvalidOption {
                field: "table_size",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("not a prime"), "{e}");
    let e = ReuseportSteering::load(&SteeringOptions::new(0)).unwrap_err();
    assert!(e.to_string().contains("`workers`"), "{e}");

    let mut steering = ReuseportSteering::load(&SteeringOptions {
        key: Some(RssKey::microsoft()),
        ..SteeringOptions::new(2)
    })
    .expect("load");

    // a worker id beyond the capacity
    let good = reuseport_socket(&lab.server, Proto::Tcp, server);
    let e = steering.set_socket(2, good.as_fd()).unwrap_err();
    assert!(
        matches!(
            e,
            SteerError::UnknownWorker {
                worker: 2,
                workers: 2
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("loaded for 2 workers"), "{e}");

    // a TCP socket that is bound but not listening
    let idle = plain_socket(&lab, Type::STREAM, "10.77.0.1:9001".parse().unwrap(), false);
    let e = steering.set_socket(0, idle.as_fd()).unwrap_err();
    assert!(matches!(e, SteerError::Map { .. }), "{e}");
    assert!(e.to_string().contains("listening"), "{e}");
    println!("{e}");

    // a UDP socket without SO_REUSEPORT
    let lone = plain_socket(&lab, Type::DGRAM, "10.77.0.1:9002".parse().unwrap(), false);
    let e = steering.set_socket(0, lone.as_fd()).unwrap_err();
    assert!(e.to_string().contains("SO_REUSEPORT"), "{e}");
    println!("{e}");

    // attaching to a socket that has no reuseport group
    let e = steering.attach(lone.as_fd()).unwrap_err();
    assert!(matches!(e, SteerError::Attach { .. }), "{e}");
    assert!(e.to_string().contains("SO_REUSEPORT"), "{e}");
    println!("{e}");

    // clearing an empty slot is not an error; the group still works after all this
    steering.clear_socket(1).expect("clear an empty slot");
    steering.set_socket(0, good.as_fd()).expect("set_socket");
    steering.attach(good.as_fd()).expect("attach");
    let e = steering.set_workers(&[0, 7]).unwrap_err();
    assert!(
        matches!(e, SteerError::UnknownWorker { worker: 7, .. }),
        "{e}"
    );
    assert_eq!(
        steering.table().live(),
        &[0, 1],
        "a refused change changes nothing"
    );
    println!("errors as users see them: {e}");
}
