//! One access-log line per request on stderr, written when the response has
//! ended (or the client left): time, method, path (never the query, which
//! may hold a key), status, outcome, latency and how it ended, and with
//! routing on the route the request took (`route=openai`; `"route"` in
//! JSON). Headers and bodies are never logged.
//!
//! A client that leaves before the response head gets a line too, with
//! status 499 (the code nginx uses for it) and outcome `client_gone`.

use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};

use refusal_guard::refusal::RefusalHandle;
use refusal_guard::BoxError;

/// How the proxy writes its own lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
#[non_exhaustive]
pub enum LogFormat {
    /// Plain text lines (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Where access-log lines go: on or off, the format and the writer (stderr
/// unless [`crate::Proxy::access_log_to`] gave one).
#[derive(Clone, Default)]
pub(crate) struct AccessLog {
    pub(crate) off: bool,
    pub(crate) format: LogFormat,
    pub(crate) writer: Option<Writer>,
}

/// A writer of access-log lines.
pub(crate) type Writer = Arc<dyn Fn(&str) + Send + Sync>;

impl AccessLog {
    fn emit(&self, line: &str) {
        match &self.writer {
            Some(writer) => writer(line),
            // A closed stderr must not take a request down with it.
            None => {
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }
}

/// The status written for a client that left before the response head.
const CLIENT_GONE: u16 = 499;

/// The access-log line of one request, written at most once.
pub(crate) struct LogLine {
    log: AccessLog,
    method: http::Method,
    path: String,
    route: Option<&'static str>,
    started: Instant,
    written: bool,
}

/// How a response body ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ending {
    Complete,
    Failed,
    ClientGone,
}

impl Ending {
    fn note(self) -> &'static str {
        match self {
            Ending::Complete => "",
            Ending::Failed => "stream failed",
            Ending::ClientGone => "client closed",
        }
    }
}

impl LogLine {
    pub(crate) fn new(log: AccessLog, method: http::Method, path: String) -> Self {
        LogLine {
            log,
            method,
            path,
            route: None,
            started: Instant::now(),
            written: false,
        }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Names the route the request took (routing on only: the line of a
    /// proxy with one upstream is unchanged).
    pub(crate) fn route(&mut self, route: super::Route) {
        self.route = Some(route.as_str());
    }

    /// Writes the line for a response that ended as `ending`: at once when
    /// the guard has settled (or does not guard this response), else from a
    /// task that waits, boundedly, for it to settle.
    fn after(mut self, ending: Ending, status: StatusCode, handle: Option<RefusalHandle>) {
        match handle {
            Some(handle) if !handle.is_settled() => {
                tokio::spawn(async move {
                    let settled =
                        tokio::time::timeout(Duration::from_secs(5), handle.settled()).await;
                    let outcome = match settled {
                        Ok(refusal) => outcome(refusal),
                        Err(_) => "unsettled".to_owned(),
                    };
                    self.write(status.as_u16(), &outcome, ending.note());
                });
            }
            Some(handle) => self.write(status.as_u16(), &outcome(handle.get()), ending.note()),
            None => self.write(status.as_u16(), "pass", ending.note()),
        }
    }

    /// Writes the line now (status, outcome and an optional note).
    pub(crate) fn write(&mut self, status: u16, outcome: &str, note: &str) {
        if self.log.off || self.written {
            return;
        }
        self.written = true;
        let ts = refusal_guard::telemetry::format_ts(SystemTime::now());
        let ms = self.started.elapsed().as_millis();
        let line = match self.log.format {
            LogFormat::Text => {
                let note = if note.is_empty() {
                    String::new()
                } else {
                    format!(" ({note})")
                };
                let route = self
                    .route
                    .map_or_else(String::new, |route| format!(" route={route}"));
                format!(
                    "{ts} {} {} {status} {outcome} {ms}ms{route}{note}\n",
                    self.method, self.path
                )
            }
            LogFormat::Json => {
                let mut object = serde_json::json!({
                    "timestamp": ts, "target": "refusal_guard::access",
                    "method": self.method.as_str(), "path": self.path,
                    "status": status, "outcome": outcome, "ms": ms,
                });
                if let Some(route) = self.route {
                    object["route"] = route.into();
                }
                if !note.is_empty() {
                    object["note"] = note.into();
                }
                format!("{object}\n")
            }
        };
        self.log.emit(&line);
    }
}

impl Drop for LogLine {
    /// A line dropped unwritten belongs to a request whose client left
    /// before the response head (hyper drops the request's future).
    fn drop(&mut self) {
        self.write(
            CLIENT_GONE,
            "client_gone",
            "client closed before the response head",
        );
    }
}

/// How a response came out, for its line: the line, status and handle.
struct Report {
    line: LogLine,
    status: StatusCode,
    handle: Option<RefusalHandle>,
}

/// A response body that writes its request's line once it has ended, failed
/// or been dropped (the client left). Written here, in the body's own poll
/// or drop, rather than by a task waiting on a channel: no task, channel or
/// wake-up per request unless the guard has yet to settle.
pub(crate) struct Tracked<B> {
    body: Option<Pin<Box<B>>>,
    report: Option<Report>,
}

impl<B> Tracked<B> {
    pub(crate) fn new(
        body: B,
        line: LogLine,
        status: StatusCode,
        handle: Option<RefusalHandle>,
    ) -> Self {
        Tracked {
            body: Some(Box::pin(body)),
            report: Some(Report {
                line,
                status,
                handle,
            }),
        }
    }

    fn finish(&mut self, ending: Ending) {
        if let Some(report) = self.report.take() {
            report.line.after(ending, report.status, report.handle);
        }
    }
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        // The guarded body settles its handle when dropped: drop it first,
        // so that the line can say how the response came out.
        self.body = None;
        self.finish(Ending::ClientGone);
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(body) = self.body.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = body.as_mut().poll_frame(cx);
        match polled {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.finish(Ending::Complete);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                self.finish(Ending::Failed);
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if body.is_end_stream() {
                    self.finish(Ending::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().map_or(true, |body| body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |body| body.size_hint())
    }
}

/// The outcome column: `ok`, or the refusal's outcome, code and reason.
fn outcome(refusal: Option<refusal_guard::refusal::Refusal>) -> String {
    let Some(refusal) = refusal else {
        return "ok".to_owned();
    };
    let mut outcome = format!("{}({})", refusal.outcome, refusal.code());
    if let Some(reason) = refusal.reason {
        outcome.push_str(&format!(":{reason}"));
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn capture(format: LogFormat) -> (AccessLog, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let writer: Writer = Arc::new(move |line: &str| sink.lock().unwrap().push(line.to_owned()));
        let log = AccessLog {
            off: false,
            format,
            writer: Some(writer),
        };
        (log, lines)
    }

    #[test]
    fn json_lines_are_one_object_each() {
        let (log, lines) = capture(LogFormat::Json);
        let mut line = LogLine::new(log, http::Method::POST, "/v1/messages".to_owned());
        line.write(200, "rescued(cyber)", "");
        drop(line);
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "written once, not again on drop");
        assert!(lines[0].ends_with('\n') && lines[0].matches('\n').count() == 1);
        let json: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(json["status"], 200);
        assert_eq!(json["outcome"], "rescued(cyber)");
        assert_eq!(json["path"], "/v1/messages");
        assert!(json.get("route").is_none(), "no route without routing");
    }

    #[test]
    fn a_routed_line_names_its_route() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let (log, lines) = capture(format);
            let path = "/v1/chat/completions".to_owned();
            let mut line = LogLine::new(log, http::Method::POST, path);
            line.route(super::super::Route::OpenAi);
            line.write(200, "ok", "");
            let lines = lines.lock().unwrap();
            match format {
                LogFormat::Text => assert!(lines[0].contains("ms route=openai\n"), "{lines:?}"),
                _ => {
                    let json: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
                    assert_eq!(json["route"], "openai");
                }
            }
        }
    }

    #[test]
    fn a_line_dropped_unwritten_says_the_client_left() {
        let (log, lines) = capture(LogFormat::Text);
        drop(LogLine::new(
            log,
            http::Method::GET,
            "/v1/models".to_owned(),
        ));
        let lines = lines.lock().unwrap();
        assert!(
            lines[0].contains(" GET /v1/models 499 client_gone "),
            "{lines:?}"
        );
    }
}
