//! A rescue reservation's round trip: the shared Redis store next to the
//! in-process memory store.
//!
//! * `reserve_rescue/memory`: [`MemoryStore`], a mutex and a hash map.
//! * `reserve_rescue/redis`: [`RedisStore`], the Lua script on a local
//!   `redis-server` over loopback (one multiplexed connection).
//! * `reserve_rescue/redis_with_fallback`: the same through
//!   [`FailoverStore`] (its timeout and the memory mirror).
//!
//! Each iteration reserves for a fresh conversation, then once more for the
//! same one (which is refused), so both branches of the script are timed.
//!
//! The benchmark starts its own `redis-server` on a free loopback port; when
//! it is not installed the Redis cases are skipped with a message.
//!
//! Run with `cargo bench -p refusal-guard-proxy --features bedrock --bench store`.

use support::redis_server;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use redis_server::RedisServer;
use refusal_guard::store::failover::FailoverStore;
use refusal_guard::store::redis::RedisStore;
use refusal_guard::store::{ConversationKey, ConversationStore, MemoryStore};

/// A conversation not seen before.
fn fresh() -> ConversationKey {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    ConversationKey::from_bytes(&n.to_le_bytes())
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("reserve_rescue");

    let memory = MemoryStore::new();
    group.bench_function("memory", |b| {
        b.to_async(&runtime).iter(|| async {
            let key = fresh();
            black_box(memory.reserve_rescue(&key, 1).await);
            black_box(memory.reserve_rescue(&key, 1).await);
        })
    });

    let server = match RedisServer::try_start() {
        Ok(server) => server,
        Err(why) => {
            eprintln!("reserve_rescue/redis skipped: {why}");
            group.finish();
            return;
        }
    };
    let store = runtime.block_on(async { RedisStore::open(&server.url()) });
    let store = store.expect("redis url");
    group.bench_function("redis", |b| {
        b.to_async(&runtime).iter(|| async {
            let key = fresh();
            black_box(store.reserve_rescue(&key, 1).await.expect("reserve"));
            black_box(store.reserve_rescue(&key, 1).await.expect("reserve"));
        })
    });

    let guarded = FailoverStore::new(store.clone());
    group.bench_function("redis_with_fallback", |b| {
        b.to_async(&runtime).iter(|| async {
            let key = fresh();
            black_box(guarded.reserve_rescue(&key, 1).await);
            black_box(guarded.reserve_rescue(&key, 1).await);
        })
    });
    group.finish();
    assert_eq!(
        guarded.fallbacks(),
        0,
        "the local server failed during the benchmark"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
