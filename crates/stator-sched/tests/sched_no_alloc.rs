//! A pick never allocates: a counting global allocator watches 10,000 picks of every scheduler
//! with every kind of view (all usable, some down, tried peers, connection counts, atomics).
//! Only allocations made by the thread that is counting are counted (libtest's own threads
//! allocate now and then while a test runs).
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use stator_sched::{
    Algorithm, AllUsable, AtomicPeerSet, Peer, PeerSet, Picker, Request, Scheduler, Tried,
    WithConns, client_key,
};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (const-initialized: no allocation).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counter is only an atomic increment.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same layout as the caller gave, forwarded to System.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr was allocated by System.alloc with this layout (through `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; ptr and layout come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn picks_do_not_allocate() {
    // The counter sees this thread's allocations (so a zero below means something).
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    let boxed = std::hint::black_box(Box::new(17u64));
    COUNTING.with(|c| c.set(false));
    drop(boxed);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed) - before, 1);

    let n = 500usize;
    let peers: Vec<Peer> = (0..n as u32)
        .map(|i| Peer::new(i, format!("peer-{i}"), 1 + i % 10))
        .collect();
    let mut some_down = PeerSet::new(n, true);
    for i in (0..n).step_by(3) {
        some_down.set(i, false);
    }
    let atomic = AtomicPeerSet::new(n, true);
    atomic.set(7, false);
    let active: Vec<u32> = (0..n as u32).map(|i| i % 13).collect();
    let shared_active: Vec<AtomicU32> = (0..n as u32).map(|i| AtomicU32::new(i % 5)).collect();
    let mut tried = Tried::new();
    for i in [1, 2, 4, 5, 8] {
        tried.insert(i);
    }
    let mostly_down = {
        let mut s = PeerSet::new(n, false);
        s.set(n - 1, true);
        s
    };
    let keys: Vec<u32> = (0..64u32)
        .map(|i| client_key(std::net::Ipv4Addr::from(0xc0a8_0000 + i).into()))
        .collect();

    for algorithm in Algorithm::ALL {
        let sched = Arc::new(Scheduler::new(algorithm, &peers).unwrap());
        let mut worker = Picker::new(Arc::clone(&sched), 1);
        let with_conns = WithConns {
            usable: &some_down,
            active: &active,
        };
        let with_shared = WithConns {
            usable: &atomic,
            active: &shared_active,
        };
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
        let mut found = 0usize;
        for i in 0..10_000usize {
            let key = keys[i % keys.len()];
            let r = match i % 6 {
                0 => worker.pick(&Request::new(&AllUsable).with_key(key)),
                1 => worker.pick(&Request::new(&some_down).with_key(key)),
                2 => worker.pick(&Request::new(&with_conns).with_tried(&tried)),
                3 => worker.pick(&Request::new(&with_shared).with_key(key)),
                4 => worker.pick(&Request::new(&mostly_down)),
                _ => worker.pick(&Request::new(&|i: usize| i.is_multiple_of(2))),
            };
            found += usize::from(r.is_ok());
            worker.sync(&sched);
        }
        COUNTING.with(|c| c.set(false));
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocations, 0,
            "{algorithm}: {allocations} allocations in 10,000 picks"
        );
        assert_eq!(
            found, 10_000,
            "{algorithm}: every request had a usable peer"
        );
    }
}
