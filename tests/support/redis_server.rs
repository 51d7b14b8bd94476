//! A real `redis-server` for tests and benchmarks: started on a free
//! loopback port with a temporary directory and no persistence, ready once
//! it answers PING, killed on drop. It can be stopped and started again on
//! the same port, to test an outage.
//!
//! Used by the store tests and `benches/store.rs`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What to install when the server is missing.
pub const MISSING: &str = "`redis-server` is not installed: these tests need a real Redis. \
     Install the Debian package: apt-get install -y redis-server";

/// How long a starting server may take to answer PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A running (or stopped) `redis-server` owned by the test.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server, panicking with [`MISSING`] when `redis-server` is
    /// not installed.
    pub fn start() -> RedisServer {
        RedisServer::try_start().unwrap_or_else(|error| panic!("{error}"))
    }

    /// Starts a server, or says why it could not.
    pub fn try_start() -> Result<RedisServer, String> {
        let mut server = RedisServer {
            port: free_port()?,
            dir: temporary_dir()?,
            child: None,
        };
        server.restart()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the server (its data is lost: nothing is persisted).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        let port = self.port.to_string();
        let dir = self.dir.to_string_lossy().into_owned();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir", &dir])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| match error.kind() {
                std::io::ErrorKind::NotFound => MISSING.to_owned(),
                _ => format!("could not start redis-server: {error}"),
            })?;
        self.child = Some(child);
        self.wait_ready()
    }

    /// Sends one inline command and returns the raw reply (for checks that
    /// must not go through the code under test).
    pub fn command(&self, line: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("read timeout");
        stream
            .write_all(format!("{line}\r\n").as_bytes())
            .expect("write to redis");
        read_reply(&mut stream)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("redis-server exited at start: {status}"));
                }
            }
            if self.pings() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "redis-server did not answer PING within {READY_WITHIN:?}"
        ))
    }

    fn pings(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        stream.write_all(b"PING\r\n").is_ok() && read_reply(&mut stream).starts_with("+PONG")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads one reply: enough for the simple, integer and short bulk replies
/// the tests ask for (waits briefly for a bulk reply's second line).
fn read_reply(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buffer) {
        reply.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&reply);
        let lines = text.matches("\r\n").count();
        let complete = match text.chars().next() {
            Some('$') if !text.starts_with("$-1") => lines >= 2,
            Some('*') => multi_bulk_complete(&text),
            _ => lines >= 1,
        };
        if complete {
            break;
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}

/// Whether a multi-bulk reply of bulk strings has all its elements: a
/// header line, then a length line and a content line per element.
fn multi_bulk_complete(text: &str) -> bool {
    let header = text.split("\r\n").next().unwrap_or_default();
    let Ok(count) = header[1..].parse::<usize>() else {
        return false;
    };
    text.matches("\r\n").count() > 2 * count
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn temporary_dir() -> Result<PathBuf, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "refusal-guard-redis-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("temporary dir {}: {e}", dir.display()))?;
    Ok(dir)
}
