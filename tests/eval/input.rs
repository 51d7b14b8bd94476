//! Bad input is refused before any call, with status 2 and what is wrong:
//! a prompt line, a variant's flag, a script's rule, an argument.

use super::{prompts, Eval};

#[test]
fn bad_input_exits_2_naming_what_is_wrong_before_any_call() {
    let eval = Eval::new("input");
    let good = eval.file("prompts.jsonl", &prompts(2, "cyber"));
    let bad_prompts = eval.file(
        "bad.jsonl",
        "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"a\"}\n",
    );
    let bad_variant = eval.file(
        "variants.toml",
        "[[variant]]\nname = \"a\"\nflags = [\"--policy\", \"cyber=leap\"]\n",
    );
    let bad_script = eval.file("script.toml", "[[rule]]\nreply = \"error\"\n");
    for (args, says) in [
        (
            vec!["--simulate", "--prompts", &bad_prompts],
            "bad.jsonl: line 2: give `prompt`",
        ),
        (
            vec!["--simulate", "--prompts", &good, "--variants", &bad_variant],
            "variant `a`",
        ),
        (
            vec!["--simulate", "--prompts", &good, "--script", &bad_script],
            "rule 1",
        ),
        (
            vec!["--simulate", "--prompts", &good, "--compare", "rescue,nope"],
            "--compare rescue,nope",
        ),
        (
            vec!["--simulate", "--prompts", &good, "--send", "claude"],
            "--send claude",
        ),
        (
            vec!["--prompts", &good, "--script", &bad_script],
            "--simulate",
        ),
        (vec!["--simulate", "--stream", "maybe"], "--stream"),
    ] {
        let ended = eval.run(&args, &[]);
        assert_eq!(ended.status, Some(2), "{args:?}: {}", ended.stderr);
        assert!(ended.stderr.contains(says), "{args:?}: {}", ended.stderr);
        assert!(
            !eval.out().join("results.jsonl").exists(),
            "{args:?}: a call was made"
        );
    }
}
