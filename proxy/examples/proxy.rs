//! A standalone refusal-guard proxy of your own, over the library API: the
//! `refusal-guard` binary (`cargo install --path proxy`) is the
//! same `run`, plus its `report` subcommand.
//!
//! ```text
//! cargo run -p refusal-guard-proxy --example proxy -- --simulate   # no network, no key: see a rescue
//! cargo run -p refusal-guard-proxy --example proxy                 # in front of api.anthropic.com
//! ANTHROPIC_BASE_URL=http://127.0.0.1:8787 claude                  # Claude Code through it
//! cargo run -p refusal-guard-proxy --example proxy -- --help       # every flag and its variable
//! ```
//!
//! Every flag can also be set in the environment as `REFUSAL_GUARD_<NAME>`;
//! a flag wins over its variable. Bad values exit with status 2. The options
//! and the server live in the proxy crate's library: `refusal_guard_proxy`.

use std::process::ExitCode;

use refusal_guard_proxy::{run, Options};

fn main() -> ExitCode {
    run(Options::from_args())
}
