//! The HTTP engine allocates nothing per kept-alive request once a connection's buffers have
//! grown: a counting global allocator over the whole process, a client and a backend that
//! allocate nothing while they run (raw sockets, fixed buffers, no formatting), so that what
//! the allocator counts during the measured requests is the proxy's. Its own binary: the
//! allocator counts every thread of the process, and no other test may run beside it.
//! Unprivileged.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use stator_proxy::{Protocol, Proxy, UpstreamSpec};

/// Counts allocations (and reallocations, which may move) of the whole process.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counter is an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-backend: raw\r\n\r\nok";

/// Reads one head and its `content-length: 2` body (or a bodyless request) into `buf`; false
/// at the end of the stream.
fn read_message(s: &mut TcpStream, buf: &mut [u8; 4096], body: usize) -> bool {
    let mut n = 0;
    loop {
        if let Some(end) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n")
            && n >= end + 4 + body
        {
            return true;
        }
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return false,
            Ok(k) => n += k,
        }
    }
}

/// A kept-alive backend that answers every request with [`RESPONSE`], allocating nothing per
/// request.
fn backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while read_message(&mut s, &mut buf, 0) {
                    if s.write_all(RESPONSE).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_kept_alive_request_allocates_nothing_in_the_proxy() {
    let mut spec = stator_proxy::ListenerSpec::new(
        "alloc",
        "127.0.0.1:0".parse().unwrap(),
        Protocol::Http,
        vec![UpstreamSpec {
            name: "b".into(),
            addr: backend(),
            weight: 1,
        }],
    );
    spec.workers = 1;
    let mut p = Proxy::new("test", None);
    p.apply(vec![spec]).unwrap();
    let addr = p.local_addr("alloc").unwrap();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.set_nodelay(true).unwrap();
    let request = b"GET /p?q=1 HTTP/1.1\r\nHost: a.example\r\nUser-Agent: t\r\n\r\n";
    let mut buf = [0u8; 4096];
    let mut exchange = |c: &mut TcpStream| {
        c.write_all(request).unwrap();
        assert!(read_message(c, &mut buf, 2), "a response");
    };
    // the buffers grow, the upstream connection is opened and pooled
    for _ in 0..200 {
        exchange(&mut c);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    const N: u64 = 2000;
    for _ in 0..N {
        exchange(&mut c);
    }
    let during = ALLOCATIONS.load(Ordering::Relaxed) - before;
    eprintln!("{during} allocations in {N} kept-alive requests");
    // Not per request: at most what the once-a-second housekeeping of a worker might take if
    // a second passes (the pool sweep, the access log's flush), far below one per request.
    assert!(
        during < N / 100,
        "{during} allocations in {N} kept-alive requests"
    );
    drop(c);
    p.shutdown(Duration::from_secs(5));
}
