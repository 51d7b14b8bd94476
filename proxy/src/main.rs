//! The `refusal-guard` binary: the proxy and its report (see
//! [`refusal_guard_proxy::cli`]).
//!
//! ```text
//! cargo install refusal-guard-proxy
//! refusal-guard --simulate          # no network, no key: see a rescue
//! refusal-guard --help              # every flag and its variable
//! ```

fn main() -> std::process::ExitCode {
    refusal_guard_proxy::cli::main()
}
