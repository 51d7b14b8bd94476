//! Throughput of the text refusal detector.
//!
//! * `detect/ordinary_answer`: a long ordinary answer (about 8 KiB of prose
//!   with a list); it is ruled out on its first sentence.
//! * `detect/refusal`: a prose refusal followed by a lecture and a
//!   referral, the slowest path (cue, pivot and substance checks).
//! * `detect/lecture`: a refusal found only by its condemnation of the act,
//!   which reads the whole opening window.
//! * `detect/sympathy_then_answer`: an answer opening with sympathy, which
//!   is a signal, so what follows is weighed for delivered content.
//! * `prefix_verdict/*`: what a streaming layer calls while holding back
//!   text, on the first 512 bytes of each.
//!
//! Run with `cargo bench -p refusal-guard-proxy --features bedrock --bench text`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use refusal_guard::text::{detect, prefix_verdict, DEFAULT_PREFIX_BYTES};

fn ordinary_answer() -> String {
    let mut s = String::from(
        "Rust's ownership model gives every value a single owner. When the owner goes out of \
         scope, the value is dropped and its resources are released. Borrowing lets other \
         code read or change a value without taking ownership of it.\n\n",
    );
    let para = "The borrow checker enforces two rules at compile time: any number of shared \
                references, or exactly one mutable reference, but never both at once. These \
                rules rule out data races in safe code, and they cost nothing at run time \
                because every check happens before the program is built.\n\n\
                1. Prefer borrowing over cloning when a function only reads its input.\n\
                2. Return owned values from constructors and builders.\n\
                3. Reach for `Rc` or `Arc` only when ownership is truly shared.\n\n";
    while s.len() < 8 * 1024 {
        s.push_str(para);
    }
    s
}

fn refusal() -> String {
    let mut s = String::from(
        "I'm sorry, but I can't help with that request. Breaking into someone else's account \
         is illegal and can cause real harm to the person whose privacy is violated. If you \
         have lost access to your own account, please contact the service's support team, \
         who can verify your identity and restore access safely. ",
    );
    while s.len() < 2 * 1024 {
        s.push_str(
            "It is important to respect the privacy and security of others online, and to \
             use only the recovery options that the provider offers. ",
        );
    }
    s
}

fn lecture() -> String {
    let mut s = String::from(
        "First, it's important to understand that violence towards anyone is never \
         acceptable. It's crucial to talk about your feelings in a calm and respectful way. \
         If you're feeling overwhelmed, consider speaking with a counselor. ",
    );
    while s.len() < 2 * 1024 {
        s.push_str("Remember that respect and safety matter in every relationship. ");
    }
    s
}

fn sympathy_then_answer() -> String {
    let mut s = String::from(
        "I'm sorry to hear your laptop keeps overheating, that sounds frustrating. \
         Clean the vents with compressed air, keep it on a hard surface, and check \
         the fan with `sensors` while it is under load. ",
    );
    while s.len() < 2 * 1024 {
        s.push_str("Replace the thermal paste if the CPU idles above 60 °C after cleaning. ");
    }
    s
}

fn prefix(s: &str) -> &str {
    let mut end = DEFAULT_PREFIX_BYTES.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn bench(c: &mut Criterion) {
    let texts = [
        ("ordinary_answer", ordinary_answer()),
        ("refusal", refusal()),
        ("lecture", lecture()),
        ("sympathy_then_answer", sympathy_then_answer()),
    ];
    assert!(!detect(&texts[0].1).is_refusal());
    assert!(detect(&texts[1].1).is_refusal());
    assert!(detect(&texts[2].1).is_refusal());
    assert!(!detect(&texts[3].1).is_refusal());

    let mut g = c.benchmark_group("detect");
    for (name, text) in &texts {
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(*name, |b| b.iter(|| detect(black_box(text))));
    }
    g.finish();

    let mut g = c.benchmark_group("prefix_verdict");
    for (name, text) in &texts {
        let p = prefix(text);
        g.throughput(Throughput::Bytes(p.len() as u64));
        g.bench_function(*name, |b| b.iter(|| prefix_verdict(black_box(p))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
