//! The proxy's options read from the real process environment: a flag wins
//! over its variable, `REFUSAL_GUARD_` over `OMP_REFUSAL_` over
//! `PI_REFUSAL_`. One test, because it changes this process's environment.

use clap::Parser;
use refusal_guard::env::LogSetting;
use refusal_guard_proxy::Options;

fn parse(args: &[&str]) -> Result<Options, clap::Error> {
    let args = std::iter::once("proxy").chain(args.iter().copied());
    Options::try_parse_from(args).and_then(|o| o.with_compat_env(|key| std::env::var(key).ok()))
}

#[test]
fn flags_then_refusal_guard_then_omp_then_pi() {
    std::env::set_var("PI_REFUSAL_RESCUE", "on");
    std::env::set_var("OMP_REFUSAL_RESCUE", "off");
    assert_eq!(parse(&[]).unwrap().rescue, Some(false), "OMP_ over PI_");
    std::env::set_var("REFUSAL_GUARD_RESCUE", "yes");
    assert_eq!(
        parse(&[]).unwrap().rescue,
        Some(true),
        "REFUSAL_GUARD_ over OMP_"
    );
    assert_eq!(
        parse(&["--rescue", "0"]).unwrap().rescue,
        Some(false),
        "flag over all"
    );

    std::env::set_var("PI_REFUSAL_FALLBACKS", "p1");
    std::env::set_var("REFUSAL_GUARD_FALLBACKS", "f1,f2");
    assert_eq!(parse(&[]).unwrap().retarget.unwrap(), ["f1", "f2"]);
    std::env::set_var("REFUSAL_GUARD_RETARGET", "r1");
    assert_eq!(
        parse(&[]).unwrap().retarget.unwrap(),
        ["r1"],
        "RETARGET over FALLBACKS"
    );

    std::env::set_var(
        "REFUSAL_GUARD_ALLOW_FALLBACKS",
        "claude-fable-5=claude-opus-4-8; claude-sonnet-5=",
    );
    let allowed = parse(&[]).unwrap().allowed_fallbacks();
    assert_eq!(
        allowed.for_model("claude-fable-5"),
        Some(&["claude-opus-4-8".to_owned()][..])
    );
    assert_eq!(allowed.for_model("claude-sonnet-5"), Some(&[][..]));
    let flagged = parse(&["--allow-fallbacks", "claude-opus-5=claude-opus-4-8"]).unwrap();
    assert_eq!(
        flagged.allowed_fallbacks().for_model("claude-fable-5"),
        None,
        "flag over variable"
    );
    std::env::remove_var("REFUSAL_GUARD_ALLOW_FALLBACKS");

    std::env::set_var("REFUSAL_GUARD_LISTEN", "127.0.0.1:7001");
    std::env::set_var("REFUSAL_GUARD_IDLE_TIMEOUT", "2.5");
    std::env::set_var("REFUSAL_GUARD_MAX_CONNECTIONS", "10");
    std::env::set_var("REFUSAL_GUARD_CHAIN", "a=b;c=d,e");
    std::env::set_var("OMP_REFUSAL_LOG", "off");
    let o = parse(&["--listen", "127.0.0.1:7002"]).unwrap();
    assert_eq!(o.listen.port(), 7002, "flag over variable");
    assert_eq!(o.idle_timeout.as_millis(), 2500);
    assert_eq!(o.max_connections, 10);
    assert_eq!(o.fallback_chains().for_model("c"), ["d", "e"]);
    assert_eq!(o.log_setting(), LogSetting::Off);

    assert!(!parse(&[]).unwrap().continue_partial);
    std::env::set_var("REFUSAL_GUARD_CONTINUE_PARTIAL", "on");
    assert!(parse(&[]).unwrap().continue_partial);
    assert!(
        !parse(&["--continue-partial", "off"])
            .unwrap()
            .continue_partial,
        "flag over variable"
    );
    std::env::remove_var("REFUSAL_GUARD_CONTINUE_PARTIAL");

    std::env::set_var("REFUSAL_GUARD_DRAIN_TIMEOUT", "never");
    let error = parse(&[]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(
        parse(&["--drain-timeout", "3"]).is_ok(),
        "a flag hides a bad variable"
    );
    std::env::remove_var("REFUSAL_GUARD_DRAIN_TIMEOUT");

    std::env::set_var("REFUSAL_GUARD_POLICY", "bio=stop;*=fallback");
    std::env::set_var("REFUSAL_GUARD_FALLBACK_CREDIT", "off");
    let o = parse(&[]).unwrap();
    assert_eq!(o.policy.unwrap().to_string(), "bio=stop;*=fallback");
    assert!(!o.fallback_credit);
    let o = parse(&["--policy", "cyber=rescue", "--fallback-credit", "on"]).unwrap();
    assert_eq!(
        o.policy.unwrap().to_string(),
        "cyber=rescue",
        "flag over variable"
    );
    assert!(o.fallback_credit);
    std::env::set_var("REFUSAL_GUARD_POLICY", "bio=stop,fallback");
    let error = parse(&[]).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    let message = error.to_string();
    assert!(message.contains("`stop` combined"), "{message}");
    assert!(message.contains("REFUSAL_GUARD_POLICY") || message.contains("--policy"));
    assert!(
        parse(&["--policy", "bio=stop"]).is_ok(),
        "a flag hides a bad variable"
    );
    std::env::remove_var("REFUSAL_GUARD_POLICY");
    std::env::remove_var("REFUSAL_GUARD_FALLBACK_CREDIT");

    // The strict simulator: its variable too, and only with the simulator.
    std::env::set_var("REFUSAL_GUARD_STRICT", "on");
    let error = parse(&[]).unwrap_err().to_string();
    assert!(error.contains("needs --simulate"), "{error}");
    assert!(parse(&["--simulate"]).unwrap().strict);
    std::env::set_var("REFUSAL_GUARD_STRICT", "off");
    assert!(!parse(&["--simulate"]).unwrap().strict);
    std::env::remove_var("REFUSAL_GUARD_STRICT");

    // Routes: each provider's variable turns routing on; a flag wins.
    use refusal_guard_proxy::Route;
    assert!(!parse(&[]).unwrap().routes().is_routed());
    std::env::set_var(
        "REFUSAL_GUARD_UPSTREAM_OPENAI",
        "http://127.0.0.1:7101/v1-gateway",
    );
    let routes = parse(&[]).unwrap().routes();
    assert_eq!(
        routes.base_for(Route::OpenAi).to_string(),
        "http://127.0.0.1:7101/v1-gateway"
    );
    assert_eq!(
        routes.base_for(Route::Anthropic).to_string(),
        "https://api.anthropic.com"
    );
    let routes = parse(&["--upstream-openai", "http://127.0.0.1:7102"])
        .unwrap()
        .routes();
    assert_eq!(
        routes.base_for(Route::OpenAi).to_string(),
        "http://127.0.0.1:7102",
        "flag over variable"
    );
    std::env::set_var("REFUSAL_GUARD_ROUTES", "off");
    let error = parse(&[]).unwrap_err().to_string();
    assert!(error.contains("--routes is off"), "{error}");
    std::env::remove_var("REFUSAL_GUARD_UPSTREAM_OPENAI");
    assert!(!parse(&[]).unwrap().routes().is_routed());
    std::env::set_var("REFUSAL_GUARD_ROUTES", "on");
    std::env::set_var(
        "REFUSAL_GUARD_UPSTREAM_GEMINI",
        "generativelanguage.googleapis.com",
    );
    let error = parse(&[]).unwrap_err().to_string();
    assert!(error.contains("it needs a scheme"), "{error}");
    std::env::remove_var("REFUSAL_GUARD_UPSTREAM_GEMINI");
    assert!(parse(&[]).unwrap().routes().is_routed());
    std::env::remove_var("REFUSAL_GUARD_ROUTES");

    std::env::set_var("REFUSAL_GUARD_RESCUE", "maybe");
    let error = parse(&[]).unwrap_err().to_string();
    assert!(error.contains("maybe"), "{error}");
}
