//! What the built binary says about a tenants file that does not read: on
//! a reload, stderr says why and `/readyz` that the last good one is kept;
//! at start, it exits 2 saying why, before it listens.

use std::time::Duration;

use support::binary::{arg, run, Running, TempDir};
use support::proxy::{readyz, readyz_until};

use super::{two_tenants, BIN};

/// A policy step no policy has.
const BROKEN: &str = "policy = \"cyber=explode\"";

/// `refusal-guard` with the tenants file at `path`, looked at every 50 ms,
/// in front of `upstream`, with `--admin`.
fn proxy(path: &std::path::Path, upstream: &str) -> Running {
    Running::spawn(
        BIN,
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            upstream,
            "--log",
            "off",
            "--tenants",
            arg(path),
            "--tenants-poll",
            "0.05",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_on_reload_is_said_on_stderr_and_readyz_and_the_last_good_one_kept() {
    // `/readyz` asks only that the upstream accepts a connection.
    let upstream = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", upstream.local_addr().unwrap());
    let dir = TempDir::new("tenants-stderr");
    let path = dir.write("tenants.toml", &two_tenants(""));
    let running = proxy(&path, &upstream);
    let admin = running.announced("admin on http://");
    let (status, ready) = readyz(&admin).await;
    assert_eq!(status, 200, "{ready}");
    assert!(ready.contains("2 tenants, reloaded 0 times"), "{ready}");

    dir.write("tenants.toml", &two_tenants(BROKEN));
    let said = running.line_with("tenants file not reloaded", Duration::from_secs(10));
    assert!(said.contains("ERROR"), "{said}");
    assert!(said.contains("the last good one is kept"), "{said}");
    assert!(said.contains(&path.display().to_string()), "{said}");
    assert!(said.contains("tenant `red-team`: `policy`"), "why: {said}");
    assert!(said.contains("explode"), "why: {said}");
    let (status, ready) = readyz(&admin).await;
    assert_eq!(status, 200, "still ready: {ready}");
    assert!(
        ready.contains(
            "2 tenants, reloaded 0 times; the last reload FAILED, the last good file is kept"
        ),
        "{ready}"
    );
    assert!(ready.contains("tenant `red-team`: `policy`"), "{ready}");

    // Fixed: taken up, and /readyz clear again.
    dir.write(
        "tenants.toml",
        &two_tenants("recovery_attempts_per_hour = 5"),
    );
    readyz_until(&admin, |ready| {
        ready.contains("2 tenants, reloaded 1 times)")
    })
    .await;
}

#[test]
fn a_file_that_does_not_read_at_start_is_an_error_before_it_listens() {
    let dir = TempDir::new("tenants-start");
    let broken = dir.write("broken.toml", &two_tenants(BROKEN));
    let missing = dir.path().join("missing.toml");
    for (path, why) in [
        (&broken, "tenant `red-team`: `policy`"),
        (&missing, "cannot open"),
    ] {
        let (code, stderr) = proxy(path, "http://127.0.0.1:9").exited(Duration::from_secs(10));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.starts_with("proxy: --tenants: "), "{stderr}");
        let named = format!("{}: ", path.display());
        assert!(stderr.contains(&named), "`{named}` in {stderr}");
        assert!(stderr.contains(why), "`{why}` in {stderr}");
        assert!(!stderr.contains("listening on"), "{stderr}");
    }
}

#[test]
fn tenants_check_exits_0_for_a_good_file_and_1_naming_the_tenant_for_an_unknown_field() {
    let dir = TempDir::new("tenants-check");
    let good = dir.write("good.toml", &two_tenants(""));
    let checked = run(BIN, &["tenants", "check", arg(&good)]);
    assert_eq!(checked.status.code(), Some(0));
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(said.contains("2 tenants (red-team, blue-team)"), "{said}");

    let zed = format!(
        "{}\n[[tenant]]\nname = \"team-zed\"\nkey_sha256 = [\"{}\"]\ncolour = \"red\"\n",
        two_tenants(""),
        refusal_guard_proxy::hash_key("zed")
    );
    let bad = dir.write("bad.toml", &zed);
    let checked = run(BIN, &["tenants", "check", arg(&bad)]);
    assert_eq!(checked.status.code(), Some(1));
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(
        said.contains(&format!(
            "{}: tenant `team-zed`: unknown field `colour`",
            bad.display()
        )),
        "{said}"
    );
    let line = zed.lines().position(|l| l.starts_with("colour")).unwrap() + 1;
    assert!(
        said.contains(&format!("(line {line}, column 1: `colour = \"red\"`)")),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(checked.stdout.is_empty());

    let missing = dir.path().join("missing.toml");
    assert_eq!(
        run(BIN, &["tenants", "check", arg(&missing)]).status.code(),
        Some(1)
    );
    assert_eq!(
        run(BIN, &["tenants", "check"]).status.code(),
        Some(2),
        "no path: a usage error"
    );
}
