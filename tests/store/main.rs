//! The shared conversation store: the Redis store against a real
//! `redis-server` the tests start (and stop, for an outage), the failover
//! to memory, and three proxy replicas sharing one server.

mod redis_replicas;
mod redis_store;
mod routing_replicas;
