//! A tenant's recovery attempts over the last hour, counted by the minute: 60
//! counters, whatever the cap, instead of one timestamp per attempt.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

const MINUTE: Duration = Duration::from_secs(60);
const MINUTES: usize = 60;

/// Recovery attempts per minute for the last 60 minutes.
pub(crate) struct AttemptWindow {
    state: Mutex<Window>,
}

struct Window {
    /// When minute 0 began.
    origin: Instant,
    /// The latest minute counted, since `origin`.
    latest: u64,
    counts: [u32; MINUTES],
}

impl Default for AttemptWindow {
    fn default() -> Self {
        AttemptWindow {
            state: Mutex::new(Window {
                origin: Instant::now(),
                latest: 0,
                counts: [0; MINUTES],
            }),
        }
    }
}

impl Window {
    /// Moves to the current minute, clearing the minutes that went by.
    fn advance(&mut self) {
        let now = (Instant::now() - self.origin).as_secs() / MINUTE.as_secs();
        let passed = now.saturating_sub(self.latest).min(MINUTES as u64);
        for step in 1..=passed {
            self.counts[((self.latest + step) % MINUTES as u64) as usize] = 0;
        }
        self.latest = now.max(self.latest);
    }

    fn slot(&mut self) -> &mut u32 {
        &mut self.counts[(self.latest % MINUTES as u64) as usize]
    }
}

impl AttemptWindow {
    /// Counts one attempt if fewer than `cap` were counted in the last hour.
    pub(crate) fn take(&self, cap: u32) -> bool {
        let mut window = self.state.lock().unwrap_or_else(|p| p.into_inner());
        window.advance();
        let used: u64 = window.counts.iter().map(|&c| u64::from(c)).sum();
        if used >= u64::from(cap) {
            return false;
        }
        *window.slot() += 1;
        true
    }

    /// Uncounts an attempt this minute took and did not send.
    pub(crate) fn give_back(&self) {
        let mut window = self.state.lock().unwrap_or_else(|p| p.into_inner());
        window.advance();
        let slot = window.slot();
        *slot = slot.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_cap_holds_for_an_hour_and_frees_minute_by_minute() {
        let window = AttemptWindow::default();
        assert!(window.take(2));
        tokio::time::advance(Duration::from_secs(30 * 60)).await;
        assert!(window.take(2));
        assert!(!window.take(2), "two in the last hour");
        window.give_back();
        assert!(window.take(2), "an attempt given back is free again");
        assert!(!window.take(2));
        // The first attempt leaves the window an hour after its minute.
        tokio::time::advance(Duration::from_secs(30 * 60 + 1)).await;
        assert!(window.take(2));
        assert!(!window.take(2));
        tokio::time::advance(Duration::from_secs(3 * 3600)).await;
        assert!(window.take(2) && window.take(2) && !window.take(2));
    }
}
