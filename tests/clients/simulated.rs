//! The testkit's strict simulator on loopback: what a client crate that
//! needs a base URL is pointed at.

use refusal_guard::recovery::FallbackChains;
use refusal_guard_testkit::{SimulatedServer, Simulator};

/// `simulator` served on a free loopback port. Dropping it stops the server
/// and fails the test if the simulator answered a request that broke a
/// provider's documented rules.
pub struct Simulated {
    pub simulator: Simulator,
    server: SimulatedServer,
}

impl Simulated {
    /// The testkit's default script: the first request of every
    /// conversation refused, every later one answered.
    pub async fn start() -> Simulated {
        Simulated::scripted(Simulator::new()).await
    }

    pub async fn scripted(simulator: Simulator) -> Simulated {
        let server = simulator.serve().await;
        Simulated { simulator, server }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.server.base_url()
    }
}

impl Drop for Simulated {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.simulator.assert_no_violations();
        }
    }
}

/// The chains the recovery tests climb: one fallback per model refused.
pub fn chains() -> FallbackChains {
    FallbackChains::new()
        .chain("claude-opus-4-7", ["claude-sonnet-4-5"])
        .chain("gpt-4o", ["gpt-4o-mini"])
        .chain("gpt-5.5", ["gpt-5.4-mini"])
        .chain("gemini-2.5-pro", ["gemini-2.5-flash"])
}
