//! The `refusal-guard` binary as a user runs it: a scratch directory for
//! its files, a command run to its end, and the proxy running until
//! dropped, with what it says on stderr. The binary's path is the test's
//! (`env!("CARGO_BIN_EXE_refusal-guard")`: only a test of the package
//! knows it). Every wait is bounded.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A directory of its own under the system's temporary one, removed on
/// drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory whose name starts with `name`.
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "refusal-guard-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes the file `name` whole, as an operator's deploy does (a new
    /// file renamed over the old), so that no reader sees half of it; its
    /// path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        let next = self.0.join(format!("{name}.next"));
        std::fs::write(&next, text).unwrap();
        std::fs::rename(&next, &path).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `bin` with `args` to its end (no input, no refusal log from the
/// environment).
pub fn run(bin: &str, args: &[&str]) -> Output {
    run_env(bin, args, &[])
}

/// [`run`] with these variables set in its environment.
pub fn run_env(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin)
        .args(args)
        .env_remove("REFUSAL_GUARD_LOG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The path as an argument.
pub fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The binary running, killed when dropped however the test ends, and the
/// lines it has written to stderr so far.
pub struct Running {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    /// Starts `bin` with `args`; its stderr is read line by line from now on.
    pub fn spawn(bin: &str, args: &[&str]) -> Running {
        Running::spawn_env(bin, args, &[])
    }

    /// [`Running::spawn`] with these variables set in its environment, and
    /// none of the providers' keys (`*_API_KEY`) or `RUST_LOG` of the
    /// test's own environment.
    pub fn spawn_env(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut command = Command::new(bin);
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.ends_with("_API_KEY") || name == "RUST_LOG" {
                command.env_remove(&*name);
            }
        }
        let mut child = command
            .args(args)
            .env_remove("REFUSAL_GUARD_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Running { child, lines }
    }

    /// Sends it the signal `name` (`INT`, `TERM`, `HUP`, `KILL`), as
    /// `kill -s` from a shell does.
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -s {name} failed");
    }

    /// What it has written to stderr so far, a line each.
    pub fn logged(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// The first line on stderr that contains `text`, waited for at most
    /// `within`.
    pub fn line_with(&self, text: &str, within: Duration) -> String {
        let what = format!("no line with `{text}` on stderr");
        wait_for(&what, within, &self.lines, || {
            self.logged().into_iter().find(|l| l.contains(text))
        })
    }

    /// `http://` and the address after `marker` in the line that announces
    /// it (`listening on http://`, `admin on http://`), waited for at most
    /// 20 s.
    pub fn announced(&self, marker: &str) -> String {
        let line = self.line_with(marker, Duration::from_secs(20));
        let rest = line.split(marker).nth(1).unwrap();
        let addr = rest.split_whitespace().next().unwrap();
        format!("http://{}", addr.trim_end_matches(':'))
    }

    /// Sends it SIGTERM (a deploy's stop) and waits (at most `within`) for
    /// it to exit: its status code and all it wrote to stderr.
    pub fn terminated(self, within: Duration) -> (Option<i32>, String) {
        self.signal("TERM");
        self.exited(within)
    }

    /// Waits (at most `within`) for it to exit by itself: its status code
    /// and all it wrote to stderr.
    pub fn exited(mut self, within: Duration) -> (Option<i32>, String) {
        let child = &mut self.child;
        let status = wait_for("still running", within, &self.lines, || {
            child.try_wait().unwrap()
        });
        // Its stderr closed with it: what is left is read at once.
        let read_by = Instant::now() + Duration::from_secs(2);
        while Arc::strong_count(&self.lines) > 1 && Instant::now() < read_by {
            std::thread::sleep(Duration::from_millis(10));
        }
        (status.code(), self.logged().join("\n"))
    }
}

/// What `found` finds, asked every 20 ms for at most `within` (past it,
/// panics saying `what`, and what was written on stderr, `lines`).
fn wait_for<T>(
    what: &str,
    within: Duration,
    lines: &Mutex<Vec<String>>,
    mut found: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = found() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?}: {:#?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
