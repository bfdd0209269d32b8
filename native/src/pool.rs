//! Recycled value-column buffers.
//!
//! Why: every `getmany_arrow` chunk used to write its values into freshly allocated
//! memory - at 16 MiB a chunk (the Spark reader's size), first-touch page faults and
//! the copies of a doubling `Vec` were about a tenth of a Spark executor's Python
//! worker.  A reader's chunks are of similar size, and a chunk's buffers are released
//! (Spark took its Arrow batch) while later ones are built, so the next chunk writes
//! into memory that is mapped already and big enough.
//!
//! Bounded: buffers of 1 MiB to 64 MiB are kept, at most `MAX_POOLED_BYTES` of
//! capacity in all; anything else is freed as before.

use std::sync::Mutex;

const MIN_BYTES: usize = 1 << 20;
const MAX_BYTES: usize = 64 << 20;
/// Capacity the pool holds at most, over all its buffers.
pub(crate) const MAX_POOLED_BYTES: usize = 64 << 20;

static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer, with the capacity of a released one when there is one.
pub(crate) fn take() -> Vec<u8> {
    let pooled = POOL.lock().ok().and_then(|mut pool| pool.pop());
    match pooled {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::new(),
    }
}

/// Keep `buffer` for a later `take` if it is worth keeping and there is room.
pub(crate) fn give(buffer: Vec<u8>) {
    let cap = buffer.capacity();
    if !(MIN_BYTES..=MAX_BYTES).contains(&cap) {
        return;
    }
    if let Ok(mut pool) = POOL.lock() {
        let held: usize = pool.iter().map(Vec::capacity).sum();
        if held + cap <= MAX_POOLED_BYTES {
            pool.push(buffer);
        }
    }
}

/// Capacity held by the pool now (for tests).
pub(crate) fn pooled_bytes() -> usize {
    POOL.lock().map(|pool| pool.iter().map(Vec::capacity).sum()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_recycled() {
        // one test touches the global pool, so no other test races it
        give(vec![0u8; 100]); // too small: freed
        assert_eq!(pooled_bytes(), 0);
        give(Vec::with_capacity(MAX_BYTES + 1)); // too big: freed
        assert_eq!(pooled_bytes(), 0);
        for _ in 0..10 {
            give(Vec::with_capacity(16 << 20));
        }
        assert_eq!(pooled_bytes(), MAX_POOLED_BYTES);
        let mut v = take();
        assert!(v.is_empty() && v.capacity() >= 16 << 20);
        v.extend_from_slice(b"stale");
        give(v);
        assert!(take().is_empty(), "a recycled buffer comes back empty");
        while pooled_bytes() > 0 {
            take();
        }
        assert_eq!(take().capacity(), 0);
    }
}
