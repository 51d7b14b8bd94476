//! Bedrock gateway mode's startup refusals, through the real binary: each
//! exits non-zero with a message naming what is wrong, before it listens (no
//! banner, nothing accepting on its port); the same flags with what was
//! missing start. Every child runs with a cleared environment (only the
//! variables each case sets) and is waited for boundedly, then killed.

use std::io::Read;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_refusal-guard");

const KEYS: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "AKIDSTARTUPEXAMPLE"),
    ("AWS_SECRET_ACCESS_KEY", "startup/secret/EXAMPLEKEY"),
];

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

fn spawn(host: &str, port: u16, args: &[&str], env: &[(&str, &str)]) -> Child {
    let listen = format!("{host}:{port}");
    // `=` so that a region starting with a dash is the flag's value.
    let region = format!("--bedrock-region={}", args[0]);
    Command::new(BIN)
        .args(["--listen", &listen, "--log", "off", &region])
        .args(&args[1..])
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most 10 s) for the child to exit; its status code and stderr.
fn exited(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the proxy did not exit within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), stderr_of(&mut child))
}

/// What an exited child wrote to stderr.
fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

/// Runs the binary with `--bedrock-region` and `args` (the region first)
/// under `env`; asserts
/// that it refused: status 2, `says` on stderr, no banner, nothing on its
/// port.
fn refuses(host: &str, args: &[&str], env: &[(&str, &str)], says: &str) {
    let port = free_port();
    let (code, stderr) = exited(spawn(host, port, args, env));
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{args:?}: expected `{says}` in {stderr}"
    );
    assert!(!stderr.contains("listening on"), "{stderr}");
    let connect = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_secs(1),
    );
    assert!(connect.is_err(), "something listens on {port}");
}

#[test]
fn without_credentials() {
    refuses(
        "127.0.0.1",
        &["us-east-1"],
        &[],
        "--bedrock-region needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    );
}

#[test]
fn with_half_a_key_pair() {
    refuses(
        "127.0.0.1",
        &["us-east-1"],
        &[("AWS_ACCESS_KEY_ID", "AKIDONLY")],
        "--bedrock-region: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together",
    );
    refuses(
        "127.0.0.1",
        &["us-east-1"],
        &[("AWS_SECRET_ACCESS_KEY", "secret-only")],
        "must be set together",
    );
}

#[test]
fn with_a_profile_that_cannot_be_read() {
    let dir = std::env::temp_dir().join(format!("rg-bedrock-startup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing-credentials");
    refuses(
        "127.0.0.1",
        &["us-east-1"],
        &[
            ("AWS_PROFILE", "work"),
            ("AWS_SHARED_CREDENTIALS_FILE", missing.to_str().unwrap()),
        ],
        "--bedrock-region: cannot read",
    );
    let file = dir.join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = A\naws_secret_access_key = B\n",
    )
    .unwrap();
    refuses(
        "127.0.0.1",
        &["us-east-1"],
        &[
            ("AWS_PROFILE", "work"),
            ("AWS_SHARED_CREDENTIALS_FILE", file.to_str().unwrap()),
        ],
        "profile `work`",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn beyond_loopback_without_a_client_key() {
    // Refused before binding: nothing listens on any interface.
    refuses(
        "0.0.0.0",
        &["us-east-1"],
        KEYS,
        "set --client-key (REFUSAL_GUARD_CLIENT_KEY) so that only your clients can spend them",
    );
    let bearer = [("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-example")];
    refuses("0.0.0.0", &["us-east-1"], &bearer, "set --client-key");
}

#[test]
fn with_a_name_that_is_not_a_region() {
    for region in [
        "us east 1",
        "US-EAST-1",
        "",
        "-us-east-1",
        "us-east-1.evil.example/x",
    ] {
        let says = "is not an AWS region name";
        refuses("127.0.0.1", &[region], KEYS, says);
    }
}

#[test]
fn with_provider_routes() {
    refuses(
        "127.0.0.1",
        &["us-east-1", "--upstream-openai", "http://127.0.0.1:9"],
        KEYS,
        "--upstream-openai cannot be combined with --bedrock-region",
    );
    refuses(
        "127.0.0.1",
        &["us-east-1", "--routes"],
        KEYS,
        "--routes cannot be combined with --bedrock-region",
    );
}

/// The control: with credentials on loopback the same command starts,
/// toward the region's runtime.
#[test]
fn with_credentials_on_loopback_it_listens() {
    let port = free_port();
    let mut child = spawn("127.0.0.1", port, &["us-east-1"], KEYS);
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("exited {status}: {}", stderr_of(&mut child));
        }
        assert!(Instant::now() < deadline, "did not listen within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    let (_, stderr) = exited(child);
    assert!(
        stderr.contains("-> https://bedrock-runtime.us-east-1.amazonaws.com"),
        "{stderr}"
    );
}
