//! A variant is the proxy's options, a tenants file included: each variant
//! presents its tenant's client key (from the variable it names) and gets
//! that tenant's ladder, as a client of the proxy would.

use refusal_guard_proxy::hash_key;

use super::{cell, prompts, refusing_first, Eval};

const RED: &str = "red-team-eval-client-key-01";
const BLUE: &str = "blue-team-eval-client-key-02";

#[test]
fn each_variant_gets_its_tenants_ladder() {
    let eval = Eval::new("tenants");
    let tenants = format!(
        r#"
[[tenant]]
name = "red"
key_sha256 = ["{red}"]
chains = {{ "claude-sonnet-4-5" = ["claude-opus-4-8"] }}
rescue = false

[[tenant]]
name = "blue"
key_sha256 = ["{blue}"]
"#,
        red = hash_key(RED),
        blue = hash_key(BLUE)
    );
    let tenants = eval.file("tenants.toml", &tenants);
    let variants = format!(
        r#"
[[variant]]
name = "red"
flags = ["--tenants", "{tenants}"]
client_key_env = "EVAL_RED_KEY"

[[variant]]
name = "blue"
flags = ["--tenants", "{tenants}"]
client_key_env = "EVAL_BLUE_KEY"
"#
    );
    let variants = eval.file("variants.toml", &variants);
    let prompts = eval.file("prompts.jsonl", &prompts(4, "cyber"));
    let script = eval.file("script.toml", &refusing_first(&["claude-sonnet-4-5"]));
    let args = [
        "--simulate",
        "--script",
        &script,
        "--prompts",
        &prompts,
        "--variants",
        &variants,
        "--send",
        "anthropic=claude-sonnet-4-5",
    ];
    let ended = eval.run(&args, &[("EVAL_RED_KEY", RED), ("EVAL_BLUE_KEY", BLUE)]);
    assert_eq!(ended.status, Some(0), "{}", ended.stderr);
    let report = eval.report();
    let red = cell(&report, "red", "cyber", "anthropic");
    assert_eq!(red["recovered_by_step"]["chain"]["count"], 4, "{red:#}");
    assert_eq!(red["served_by"]["claude-opus-4-8"], 4, "{red:#}");
    let blue = cell(&report, "blue", "cyber", "anthropic");
    assert_eq!(blue["recovered_by_step"]["rescue"]["count"], 4, "{blue:#}");
    // The keys went nowhere near the files.
    for file in ["results.jsonl", "report.json", "report.md", "report.html"] {
        let text = std::fs::read_to_string(eval.out().join(file)).unwrap();
        assert!(
            !text.contains(RED) && !text.contains(BLUE),
            "{file} holds a key"
        );
    }

    let unknown = eval.run(
        &args,
        &[
            ("EVAL_RED_KEY", "not-a-tenant-key-at-all"),
            ("EVAL_BLUE_KEY", BLUE),
        ],
    );
    assert_eq!(unknown.status, Some(2), "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains(
            "variant `red`: the client key client_key_env names is not in the tenants file"
        ),
        "{}",
        unknown.stderr
    );
}
