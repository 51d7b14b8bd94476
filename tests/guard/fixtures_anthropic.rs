//! Every Anthropic fixture gets its verdict (from the README of the shared
//! fixtures), streaming and JSON, under every single split point of
//! its bytes and under random chunkings; what is not recovered comes out
//! byte-identical.
//!
//! Fixtures: `tests/fixtures/anthropic/` (copied from the shared fixture set;
//! sources and licences in its `SOURCES.md` and `LICENSES/`).

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use support::fixtures::{cassette, json_lines_as_sse, Framing, Recorded};
use support::judge::{judge_every_chunking, Expected, Refused, Verdict};
use support::*;
use Verdict::{Error, None, Partial, ServerFallback};

const P: &str = "anthropic/anthropic-sdk-python/";
const C: &str = "anthropic/anthropic-sdk-python/cassettes/";
const T: &str = "anthropic/anthropic-sdk-typescript/";
const G: &str = "anthropic/anthropic-sdk-go/";
const V: &str = "anthropic/vercel-ai/";

const EMPTY_CYBER: Verdict = Verdict::Empty(Refused::category(Some("cyber")));
const PARTIAL: Verdict = Partial(Refused::ANY);

/// How a fixture file is recorded.
#[derive(Clone, Copy)]
enum Format {
    /// The SSE body as sent.
    Sse,
    /// The JSON body as sent.
    Json,
    /// vercel/ai JSON lines.
    Lines,
}

/// (directory, file, format, verdict) for the single-response fixtures.
#[rustfmt::skip]
const FIXTURES: &[(&str, &str, Format, Verdict)] = &[
    (P, "stream-a-refusal.sse", Format::Sse, PARTIAL),
    (P, "stream-a-toolrefusal.sse", Format::Sse, PARTIAL),
    (P, "stream-b-fallback.sse", Format::Sse, None),
    (P, "basic_response.txt", Format::Sse, None),
    (P, "compaction_response.txt", Format::Sse, None),
    (P, "fallback_credit_response.txt", Format::Sse, None),
    (P, "fallback_response.txt", Format::Sse, ServerFallback),
    (P, "incomplete_partial_json_response.txt", Format::Sse, None),
    (P, "refusal_response.txt", Format::Sse, EMPTY_CYBER),
    (P, "tool_use_response.txt", Format::Sse, None),
    (T, "basic_response.txt", Format::Sse, None),
    (T, "incomplete_partial_json_response.txt", Format::Sse, None),
    (T, "tool_use_response.txt", Format::Sse, None),
    (G, "fallback-end.sse", Format::Sse, None),
    (G, "fallback-tooluse.sse", Format::Sse, None),
    (G, "refusal.sse", Format::Sse, PARTIAL),
    // The go-vcr cassettes' response bodies, extracted verbatim.
    (G, "tool_runner_next_streaming.0.sse", Format::Sse, None),
    (G, "tool_runner_streaming_all.0.sse", Format::Sse, None),
    (G, "tool_runner_streaming_all.1.sse", Format::Sse, None),
    (V, "anthropic-refusal.chunks.txt", Format::Lines, EMPTY_CYBER),
    (V, "anthropic-fallback.chunks.txt", Format::Lines, ServerFallback),
    (V, "anthropic-text.chunks.txt", Format::Lines, None),
    (V, "anthropic-tool-no-args.chunks.txt", Format::Lines, None),
    (V, "anthropic-clear-thinking.1.chunks.txt", Format::Lines, None),
    (V, "anthropic-mcp.1.chunks.txt", Format::Lines, None),
    (V, "anthropic-message-delta-input-tokens.chunks.txt", Format::Lines, None),
    (V, "duplicate-message-start.chunks.txt", Format::Lines, None),
    (V, "spliced-message-start.chunks.txt", Format::Lines, None),
    (V, "anthropic-refusal.json", Format::Json, EMPTY_CYBER),
    (V, "anthropic-refusal-no-details.json", Format::Json, Verdict::Empty(Refused::category(Option::None))),
    (V, "anthropic-fallback.json", Format::Json, ServerFallback),
    (V, "anthropic-text.json", Format::Json, None),
    (V, "anthropic-tool-no-args.json", Format::Json, None),
    (V, "anthropic-clear-thinking.1.json", Format::Json, None),
    (V, "anthropic-web-fetch-tool.error.json", Format::Json, None),
];

/// Python inline-snapshot cassettes: one verdict per recorded exchange.
#[rustfmt::skip]
const CASSETTES: &[(&str, &[Verdict])] = &[
    ("9381e2b7-7fa1-46f7-9f78-46dc8431ea9d.json", &[None]),
    ("d7092a7d-b723-4470-8fb0-da138cd103a1.json", &[None]),
    ("924cfccc-c863-44ed-9838-c36b37416eaf.json", &[None]),
    ("d743d628-16aa-4c9f-ae78-51deb578f746.json", &[Error, Error, None]),
    ("a8b7dbb8-2321-4624-abdb-7ba2136b5c38.json", &[Error, Error, None]),
    ("bd7029d5-d8d4-4e06-be3a-2ac9c60803a6.json", &[None]),
    ("c11eefc7-fff0-4466-8453-42eef73b8876.json", &[None]),
    ("092be1de-d3f8-4c22-a4ea-a7ad54689836.json", &[None, None]),
    ("10e53c1d-51be-4c64-b5bf-99adb3fa4719.json", &[None, None]),
    ("32da0815-2270-4d29-87be-3b5b63ab42e2.json", &[None]),
    ("555fb399-a54c-455b-9ac5-2c9673f18e12.json", &[None, None]),
    ("771c64ff-a0af-4cd9-8080-a5a539da7cb9.json", &[None, None]),
    ("956fa2fe-8752-4f7c-8f9a-33735e62b898.json", &[None, None]),
    ("a8ac789b-f856-48cd-9ff3-d5f36799e432.json", &[None, None]),
    ("b38bbf6c-9a76-40ca-b09d-7a3911776e0f.json", &[None, None]),
    ("e075a6c2-de4d-4125-9709-f0e178058190.json", &[None, None]),
    ("f59a9391-643b-422c-96dc-1f28bc7ea4d7.json", &[None, Error]),
    ("64fe7974-681a-4023-9848-b32ba39c8664.json", &[None, None]),
];

fn recorded(dir: &str, file: &str, format: Format) -> Recorded {
    let raw = fixture(&format!("{dir}{file}"));
    let (json, body) = match format {
        Format::Sse => (false, raw),
        Format::Json => (true, raw),
        Format::Lines => (false, json_lines_as_sse(&raw, Framing::Named, false)),
    };
    Recorded {
        status: 200,
        json,
        body,
    }
}

/// Every recorded exchange with its verdict.
fn table() -> Vec<(String, Recorded, Verdict)> {
    let mut rows = Vec::new();
    for &(dir, file, format, verdict) in FIXTURES {
        rows.push((format!("{dir}{file}"), recorded(dir, file, format), verdict));
    }
    for &(file, verdicts) in CASSETTES {
        let exchanges = cassette(&format!("{C}{file}"));
        assert_eq!(exchanges.len(), verdicts.len(), "{file}");
        for (i, (exchange, &verdict)) in exchanges.into_iter().zip(verdicts).enumerate() {
            rows.push((format!("{C}{file} #{i}"), exchange, verdict));
        }
    }
    rows
}

fn request(stream: bool) -> Request<Full<Bytes>> {
    messages("claude-opus-4-7", stream, "hi")
}

/// Judges the rows whose name starts with `prefix`.
async fn judge_table(prefix: &str) {
    let mut judged = 0;
    for (name, recorded, verdict) in table() {
        if !name.starts_with(prefix) || (prefix == P && name.starts_with(C)) {
            continue;
        }
        let expected = Expected::ok(recorded.json, verdict).with_status(recorded.status);
        let stream = !recorded.json;
        judge_every_chunking(&name, &|| request(stream), &recorded.body, &expected).await;
        judged += 1;
    }
    assert!(judged > 0, "{prefix}");
}

#[test]
fn the_table_has_every_exchange() {
    let rows: std::collections::HashSet<String> = FIXTURES
        .iter()
        .map(|(dir, file, _, _)| format!("{dir}{file}"))
        .chain(CASSETTES.iter().map(|(file, _)| format!("{C}{file}")))
        .collect();
    let mut files = Vec::new();
    for dir in [P, C, T, G, V] {
        let entries = std::fs::read_dir(mock_upstream::fixtures_dir().join(dir)).unwrap();
        for entry in entries.map(Result::unwrap) {
            if entry.file_type().unwrap().is_file() {
                files.push(format!("{dir}{}", entry.file_name().to_string_lossy()));
            }
        }
    }
    for file in &files {
        // A go-vcr cassette is judged through the response bodies taken
        // from it verbatim (`NAME.0.sse`, ...).
        let judged = match file.strip_suffix(".yaml") {
            Some(cassette) => rows.contains(&format!("{cassette}.0.sse")),
            Option::None => rows.contains(file),
        };
        assert!(judged, "{file} has no verdict in the table");
    }
    for row in &rows {
        assert!(files.contains(row), "{row} is in the table but not on disk");
    }
    // Each cassette holds as many exchanges as it has verdicts.
    assert!(table().len() > rows.len());
}

// Split by source so the test harness can run them in parallel.

#[tokio::test]
async fn python_sdk_streams_get_their_verdicts_under_every_chunking() {
    judge_table(P).await;
}

#[tokio::test]
async fn python_sdk_cassettes_get_their_verdicts_under_every_chunking() {
    judge_table(C).await;
}

#[tokio::test]
async fn typescript_and_go_sdk_streams_get_their_verdicts_under_every_chunking() {
    judge_table(T).await;
    judge_table(G).await;
}

#[tokio::test]
async fn vercel_fixtures_get_their_verdicts_under_every_chunking() {
    judge_table(V).await;
}
