//! Seeded refusal rates per model and category: the same replies for the
//! same seed whatever order (and concurrency) the requests come in, the
//! shares exactly what the draws say, and what the guard makes of them
//! computable beforehand with `plan`.

use std::collections::{BTreeMap, HashMap};

use refusal_guard::refusal::WireApi;
use refusal_guard::RefusalGuardLayer;
use refusal_guard_testkit::{Call, Reply, ReplyKind, Simulator, When};
use support::wire::read;

use super::{ask, guarded};

/// 30 % of `cyber` refused empty and 20 % partially on `m`; 60 % of `bio`
/// blocked on `m`; `n` answers all.
fn rated(seed: u64) -> Simulator {
    Simulator::answering()
        .seed(seed)
        .keywords([("exploit", "cyber"), ("pathogen", "bio")])
        .when(
            When::any().model("m").category("cyber").rate(0.3),
            Reply::refusal(),
        )
        .when(
            When::any().model("m").category("cyber").rate(0.5),
            Reply::partial("Sure: "),
        )
        .when(
            When::any().model("m").category("bio").rate(0.6),
            Reply::blocked(),
        )
}

fn prompts() -> Vec<(String, &'static str)> {
    let mut prompts = Vec::new();
    for n in 0..40 {
        prompts.push((format!("exploit number {n}"), "m"));
        prompts.push((format!("pathogen number {n}"), "m"));
        prompts.push((format!("exploit number {n}"), "n"));
    }
    prompts
}

/// Sends every prompt to a fresh clone of `simulator` on loopback, all at
/// once (`reversed`: spawned in reverse order); what each got.
async fn replies(simulator: &Simulator, reversed: bool) -> BTreeMap<(String, String), ReplyKind> {
    let client = support::proxy::client();
    let simulator = simulator.clone();
    let server = simulator.serve().await;
    let mut prompts = prompts();
    if reversed {
        prompts.reverse();
    }
    let mut sent = tokio::task::JoinSet::new();
    for (prompt, model) in prompts {
        let (client, base) = (client.clone(), server.base_url());
        sent.spawn(async move {
            ask(
                &client,
                &base,
                (WireApi::AnthropicMessages, model),
                &prompt,
                true,
            )
            .await
        });
    }
    while let Some(got) = sent.join_next().await {
        // 200 for every reply but a block (Anthropic's is a 400).
        assert!([200, 400].contains(&got.unwrap().status));
    }
    simulator.assert_no_violations();
    simulator
        .received()
        .into_iter()
        .map(|r| {
            let key = (r.model.unwrap(), r.prompt.unwrap());
            (key, r.reply.unwrap().kind())
        })
        .collect()
}

#[tokio::test]
async fn the_same_seed_gives_the_same_replies_in_any_order() {
    let simulator = rated(7);
    let forward = replies(&simulator, false).await;
    let backward = replies(&simulator, true).await;
    assert_eq!(forward.len(), 120);
    assert_eq!(forward, backward);
    // Each is what the script plans, and the shares are the draws'.
    let mut bands = HashMap::<ReplyKind, usize>::new();
    for ((model, prompt), kind) in &forward {
        let planned = simulator.plan(&Call::new(model, prompt)).kind();
        assert_eq!(planned, *kind, "{model} {prompt}");
        *bands.entry(*kind).or_default() += 1;
    }
    let draws = |category: &str, below: f64| {
        (0..40)
            .map(|n| simulator.draw("m", &format!("{category} number {n}"), 1))
            .filter(|draw| *draw < below)
            .count()
    };
    let refused = draws("exploit", 0.3);
    let partial = draws("exploit", 0.5) - refused;
    let blocked = draws("pathogen", 0.6);
    assert_eq!(
        bands.get(&ReplyKind::Refusal).copied().unwrap_or(0),
        refused
    );
    assert_eq!(
        bands.get(&ReplyKind::Partial).copied().unwrap_or(0),
        partial
    );
    assert_eq!(
        bands.get(&ReplyKind::Blocked).copied().unwrap_or(0),
        blocked
    );
    assert_eq!(bands[&ReplyKind::Answer], 120 - refused - partial - blocked);
    assert!(refused > 0 && partial > 0 && blocked > 0, "{bands:?}");
    // Another seed, other draws.
    assert_ne!(replies(&rated(8), false).await, forward);
}

#[tokio::test]
async fn the_rescue_draws_apart_and_the_outcome_is_planned() {
    let client = support::proxy::client();
    // Half of every request to `m` refused, the rescue included.
    let simulator = Simulator::answering()
        .seed(11)
        .keywords([("exploit", "cyber")])
        .when(When::any().model("m").rate(0.5), Reply::refusal());
    let (_server, guard) = guarded(&simulator, &RefusalGuardLayer::new()).await;
    let mut outcomes = BTreeMap::<&str, usize>::new();
    for n in 0..24 {
        let prompt = format!("exploit number {n}");
        let original = simulator.plan(&Call::new("m", &prompt));
        let rescue = simulator.plan(&Call::new("m", &prompt).attempt(2).attempt_on_model(2));
        let got = ask(
            &client,
            &guard.base_url(),
            (WireApi::AnthropicMessages, "m"),
            &prompt,
            false,
        )
        .await;
        let seen = read(WireApi::AnthropicMessages, &got.body);
        let outcome = match (original.kind(), rescue.kind()) {
            (ReplyKind::Answer, _) => {
                assert_eq!(
                    (got.recovery.as_deref(), seen.stop.as_deref()),
                    (None, Some("end_turn"))
                );
                "answered"
            }
            (_, ReplyKind::Answer) => {
                let recovery = got.recovery.unwrap_or_default();
                assert!(
                    recovery.starts_with("rescued; category=cyber"),
                    "{recovery}"
                );
                "rescued"
            }
            _ => {
                // Refused again: the client gets the refusal as sent.
                assert_eq!(
                    (got.recovery.as_deref(), seen.stop.as_deref()),
                    (None, Some("refusal"))
                );
                "refused"
            }
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    assert_eq!(outcomes.len(), 3, "each outcome met: {outcomes:?}");
    simulator.assert_no_violations();
}
