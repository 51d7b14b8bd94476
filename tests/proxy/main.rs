//! The standalone proxy on loopback, driven from outside: its flags, its
//! server under attack, upstreams that misbehave, recovery end to end and
//! what refused attempts cost.
//!
//! Tests that install a process-wide recorder, subscriber or allocator of
//! their own, or change the process's environment, live in binaries of
//! their own: `proxy_metrics`, `proxy_logs`, `proxy_memory` and
//! `proxy_env`.

mod cli;
mod end_to_end;
mod faults_server;
mod faults_upstream;
mod in_process;
mod policy_flags;
mod raw_upstream;
mod routes;
mod simulate;
