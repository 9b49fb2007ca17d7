//! UDP echo backends and clients for the UDP listener's tests.
#![allow(dead_code)] // each test file uses a different part

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use stator_proxy::UpstreamSpec;
use stator_proxy::udp::ppv2;

/// A UDP echo backend on its own thread: answers every datagram with `"<name>|<payload>"`,
/// or `"<name>|<client>|<payload>"` when the datagram starts with a PROXY v2 header (the
/// client it names).
#[derive(Debug)]
pub struct Echo {
    pub name: String,
    pub addr: SocketAddr,
    /// Datagrams received.
    pub datagrams: Arc<AtomicU64>,
    /// Distinct source ports seen (the proxy's sessions).
    pub peers: Arc<std::sync::Mutex<std::collections::BTreeSet<SocketAddr>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Echo {
    /// Binds `bind` (e.g. `127.0.0.1:0`) from the calling thread's namespace.
    pub fn start(name: &str, bind: &str) -> Self {
        let sock = UdpSocket::bind(bind).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let datagrams = Arc::new(AtomicU64::new(0));
        let peers = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (d, p, s, n) = (
            Arc::clone(&datagrams),
            Arc::clone(&peers),
            Arc::clone(&stop),
            name.to_string(),
        );
        std::thread::spawn(move || {
            let mut buf = [0u8; 65_536];
            let p: Arc<std::sync::Mutex<std::collections::BTreeSet<SocketAddr>>> = p;
            while !s.load(Ordering::SeqCst) {
                let Ok((len, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                d.fetch_add(1, Ordering::SeqCst);
                p.lock().unwrap().insert(from);
                let data = &buf[..len];
                let reply = match ppv2::decode(data) {
                    Some((client, _dst, rest)) => {
                        let mut r = format!("{n}|{client}|").into_bytes();
                        r.extend_from_slice(rest);
                        r
                    }
                    None => {
                        let mut r = format!("{n}|").into_bytes();
                        r.extend_from_slice(data);
                        r
                    }
                };
                let _ = sock.send_to(&reply, from);
            }
        });
        Self {
            name: name.to_string(),
            addr,
            datagrams,
            peers,
            stop,
        }
    }

    /// Stops answering (the socket closes: datagrams to it are refused).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    pub fn upstream(&self) -> UpstreamSpec {
        UpstreamSpec {
            name: self.name.clone(),
            addr: self.addr,
            weight: 1,
        }
    }

    pub fn count(&self) -> u64 {
        self.datagrams.load(Ordering::SeqCst)
    }
}

/// Sends `payload` from `sock` to `to` and waits up to `wait` for a reply: `Some(reply)`.
pub fn ask(sock: &UdpSocket, to: SocketAddr, payload: &[u8], wait: Duration) -> Option<Vec<u8>> {
    sock.set_read_timeout(Some(wait)).unwrap();
    sock.send_to(payload, to).unwrap();
    let mut buf = [0u8; 65_536];
    let (n, _) = sock.recv_from(&mut buf).ok()?;
    Some(buf[..n].to_vec())
}

/// Polls `cond` every 10 ms for up to `limit`; whether it became true.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
