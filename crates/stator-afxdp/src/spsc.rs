//! A bounded single-producer single-consumer queue: how descriptors move between the I/O
//! thread and a packet thread (the paper's per-thread receiving and transmission queues).
//!
//! The same protocol as the AF_XDP rings, in user space: a power-of-two array, a producer
//! index only the [`Producer`] writes and a consumer index only the [`Consumer`] writes, each
//! on its own cache line, each side caching the other's index and refreshing it only when the
//! cached value says full (or empty). Both halves are `Send`, neither is `Sync` or `Clone`:
//! exactly one thread pushes and one pops.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An index on a cache line of its own.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(AtomicUsize);

struct Shared<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Next slot to pop (written by the consumer).
    head: Padded,
    /// Next slot to push (written by the producer).
    tail: Padded,
}

// SAFETY: a slot is written only by the producer while it is outside [head, tail) and read
// only by the consumer while inside it; the release/acquire pairs on head and tail order those
// accesses. Values of T cross threads, hence T: Send.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let (mut h, t) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        while h != t {
            // SAFETY: slots in [head, tail) hold initialised values that nobody else can
            // reach any more (both halves are gone); each is dropped once.
            unsafe { self.slots[h & self.mask].get_mut().assume_init_drop() };
            h = h.wrapping_add(1);
        }
    }
}

/// The pushing half.
pub struct Producer<T> {
    s: Arc<Shared<T>>,
    tail: usize,
    head_cache: usize,
}

/// The popping half.
pub struct Consumer<T> {
    s: Arc<Shared<T>>,
    head: usize,
    tail_cache: usize,
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("tail", &self.tail)
            .finish()
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("head", &self.head)
            .finish()
    }
}

/// A queue of `capacity` entries (rounded up to a power of two, at least 2).
pub fn channel<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    let cap = capacity.max(2).next_power_of_two();
    let s = Arc::new(Shared {
        slots: (0..cap)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect(),
        mask: cap - 1,
        head: Padded::default(),
        tail: Padded::default(),
    });
    (
        Producer {
            s: Arc::clone(&s),
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            s,
            head: 0,
            tail_cache: 0,
        },
    )
}

impl<T: Send> Producer<T> {
    /// Appends `v`, or gives it back when the queue is full.
    #[inline]
    pub fn push(&mut self, v: T) -> Result<(), T> {
        let cap = self.s.mask + 1;
        if self.tail.wrapping_sub(self.head_cache) == cap {
            self.head_cache = self.s.head.0.load(Ordering::Acquire);
            if self.tail.wrapping_sub(self.head_cache) == cap {
                return Err(v);
            }
        }
        let slot = &self.s.slots[self.tail & self.s.mask];
        // SAFETY: the slot is outside [head, tail) (the check above), so the consumer does not
        // read it; only this (unique) producer writes slots.
        unsafe { (*slot.get()).write(v) };
        self.tail = self.tail.wrapping_add(1);
        self.s.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Whether a push would fail now (refreshing the consumer's index).
    pub fn is_full(&mut self) -> bool {
        self.head_cache = self.s.head.0.load(Ordering::Acquire);
        self.tail.wrapping_sub(self.head_cache) == self.s.mask + 1
    }

    /// Entries queued (as of the consumer's last published index).
    pub fn len(&self) -> usize {
        self.tail
            .wrapping_sub(self.s.head.0.load(Ordering::Acquire))
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.s.mask + 1
    }
}

impl<T: Send> Consumer<T> {
    /// Takes the oldest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.tail_cache {
            self.tail_cache = self.s.tail.0.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        let slot = &self.s.slots[self.head & self.s.mask];
        // SAFETY: the slot is inside [head, tail): the producer wrote it and published it
        // (release on tail, acquire above) and will not touch it until we move head past it.
        let v = unsafe { (*slot.get()).assume_init_read() };
        self.head = self.head.wrapping_add(1);
        self.s.head.0.store(self.head, Ordering::Release);
        Some(v)
    }

    /// Whether nothing is queued (refreshing the producer's index).
    pub fn is_empty(&mut self) -> bool {
        self.tail_cache = self.s.tail.0.load(Ordering::Acquire);
        self.head == self.tail_cache
    }

    /// Entries queued.
    pub fn queued(&self) -> usize {
        self.s
            .tail
            .0
            .load(Ordering::Acquire)
            .wrapping_sub(self.head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_and_wrapping() {
        let (mut p, mut c) = channel::<u32>(3);
        assert_eq!(p.capacity(), 4);
        for round in 0..50u32 {
            for i in 0..4 {
                p.push(round * 4 + i).unwrap();
            }
            assert_eq!(p.push(999), Err(999));
            assert!(p.is_full());
            for i in 0..4 {
                assert_eq!(c.pop(), Some(round * 4 + i));
            }
            assert!(c.pop().is_none() && c.is_empty());
        }
    }

    #[test]
    fn two_threads_see_every_value_once_in_order() {
        let (mut p, mut c) = channel::<u64>(64);
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                while let Err(back) = p.push(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0;
        while next < N {
            if let Some(v) = c.pop() {
                assert_eq!(v, next);
                next += 1;
            }
        }
        t.join().unwrap();
    }

    #[test]
    fn leftovers_are_dropped_once() {
        let item = Arc::new(());
        let (mut p, c) = channel::<Arc<()>>(8);
        for _ in 0..5 {
            p.push(Arc::clone(&item)).unwrap();
        }
        assert_eq!(Arc::strong_count(&item), 6);
        drop((p, c));
        assert_eq!(Arc::strong_count(&item), 1);
    }
}
