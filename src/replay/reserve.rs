//! The layer-wide bound on held bytes: every stream held back and every
//! guarded request body buffered by the services of one layer draw on one
//! pool, so that many large holds at once cannot exhaust memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes held across all services of one layer, and the most allowed.
#[derive(Debug)]
pub(crate) struct BytePool {
    /// Shared with the held-bytes gauges, which read it when published.
    used: Arc<AtomicUsize>,
    limit: usize,
}

impl BytePool {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        let used = Arc::new(AtomicUsize::new(0));
        crate::telemetry::metrics::watch_held_bytes(&used, limit);
        Arc::new(BytePool { used, limit })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// An empty share of the pool.
    pub(crate) fn share(self: &Arc<Self>) -> Share {
        Share {
            pool: self.clone(),
            bytes: 0,
        }
    }
}

/// One holder's part of a [`BytePool`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Share {
    pool: Arc<BytePool>,
    bytes: usize,
}

impl Share {
    /// Takes `n` more bytes from the pool; `false` (taking nothing) when the
    /// pool would go past its limit.
    pub(crate) fn grow(&mut self, n: usize) -> bool {
        let pool = &self.pool;
        let taken = pool
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= pool.limit)
            })
            .is_ok();
        if taken {
            self.bytes += n;
        }
        taken
    }

    /// Gives `n` bytes back (at most what this share holds).
    pub(crate) fn shrink(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.bytes -= n;
        self.pool.used.fetch_sub(n, Ordering::AcqRel);
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.shrink(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_draw_on_one_limit_and_give_back_on_drop() {
        let pool = BytePool::new(10);
        let mut a = pool.share();
        let mut b = pool.share();
        assert!(a.grow(6));
        assert!(!b.grow(5));
        assert!(b.grow(4));
        assert_eq!(pool.used(), 10);
        a.shrink(2);
        assert!(b.grow(2));
        drop(a);
        assert_eq!(pool.used(), 6);
        drop(b);
        assert_eq!(pool.used(), 0);
    }
}
