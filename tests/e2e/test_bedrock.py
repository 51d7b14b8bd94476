"""Bedrock clients through the proxy in gateway mode (--bedrock-region): the
official SDK's AnthropicBedrock and boto3, against a mock Bedrock runtime on
loopback that checks every SigV4 signature with botocore's own signer,
holds every request to Bedrock's request contract (the crate's own rules,
through the `contract-check` tool) and frames its streams as AWS event
streams (CRCs by zlib). A request the contract rejects gets Bedrock's error
and fails the test."""

import base64
import json
import os
import queue
import struct
import subprocess
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import TARGET, refusal_guard_binary

KEY_ID = "AKIDPROXYEXAMPLE"
SECRET = "proxy/secret/EXAMPLEKEY"
REGION = "us-east-1"
OPUS = "us.anthropic.claude-opus-4-7-v1:0"
SONNET = "us.anthropic.claude-sonnet-4-5-v1:0"


class Contract:
    """The crate's request contract for a Bedrock upstream, through the
    `contract-check` tool (tools/src/bin/contract-check.rs): one process,
    one JSON line per request each way, so this mock keeps exactly the
    rules the Rust Bedrock runtime keeps."""

    def __init__(self):
        binary = Path(os.environ.get("REFUSAL_GUARD_E2E_CONTRACT") or TARGET / "debug" / "contract-check")
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: run `cargo build --workspace --all-features --bins` first")
        self.process = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()

    def check(self, method: str, path: str, headers: dict, body: bytes):
        """None when the request keeps the rules, else the contract's
        verdict: the rule, the violation, and Bedrock's answer (status,
        headers, body)."""
        line = json.dumps({"method": method, "path": path, "headers": [[k, v] for k, v in headers.items()],
                           "body": body.decode("utf-8", "replace"), "bedrock": True})
        with self.lock:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError("contract-check exited")
        verdict = json.loads(answer)
        return None if verdict["ok"] else verdict


CONTRACT = []


def contract() -> Contract:
    """The one contract checker of this process, started on first use."""
    if not CONTRACT:
        CONTRACT.append(Contract())
    return CONTRACT[0]


def frame(headers, payload: bytes) -> bytes:
    encoded = b"".join(
        bytes([len(n)]) + n.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode()
        for n, v in headers
    )
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event_frame(name: str, body: dict) -> bytes:
    headers = [(":event-type", name), (":content-type", "application/json"), (":message-type", "event")]
    return frame(headers, json.dumps(body).encode())


def chunk(event: dict) -> bytes:
    return event_frame("chunk", {"bytes": base64.b64encode(json.dumps(event).encode()).decode(), "p": "abcdef"})


def refusal() -> list:
    return [
        chunk({"type": "message_start", "message": {"id": "msg_r", "type": "message", "role": "assistant",
               "model": OPUS, "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 9, "output_tokens": 1}}}),
        chunk({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": None,
               "stop_details": {"type": "refusal", "category": "cyber", "explanation": None}},
               "usage": {"output_tokens": 2}}),
        chunk({"type": "message_stop"}),
    ]


def answer(text: str) -> list:
    return [
        chunk({"type": "message_start", "message": {"id": "msg_a", "type": "message", "role": "assistant",
               "model": SONNET, "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 9, "output_tokens": 1}}}),
        chunk({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        chunk({"type": "content_block_stop", "index": 0}),
        chunk({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
               "usage": {"output_tokens": 4}}),
        chunk({"type": "message_stop"}),
    ]


def verify(method: str, path: str, headers: dict, body: bytes) -> bool:
    """Recomputes the request's signature with botocore, from the headers
    it says it signed, at the time it says it was signed."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return False
    parts = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    signed = parts["SignedHeaders"].split(";")
    request = AWSRequest(method=method, url=f"http://{headers['host']}{path}",
                         headers={n: headers[n] for n in signed if n in headers}, data=body)
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials(KEY_ID, SECRET), "bedrock", REGION)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    return expected == parts["Signature"] and parts["Credential"].startswith(KEY_ID + "/")


def reject(handler, verdict: dict):
    """Answers a request the contract rejects as Bedrock does."""
    payload = verdict["body"].encode()
    handler.send_response(verdict["status"])
    for name, value in verdict["headers"]:
        handler.send_header(name, value)
    handler.send_header("content-length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


class MockBedrock(ThreadingHTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.replies = queue.Queue()
        self.seen = []
        self.violations = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.handle_request()

    def do_POST(self):
        self.handle_request()

    def handle_request(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        ok = verify(self.command, self.path, headers, body)
        self.server.seen.append({"method": self.command, "path": self.path, "verified": ok,
                                 "json": json.loads(body) if body else None, "headers": headers})
        if not ok:
            return self.send(403, "application/json", [json.dumps({"message": "signature mismatch"}).encode()])
        if (verdict := contract().check(self.command, self.path, headers, body)) is not None:
            self.server.seen[-1]["rejected"] = verdict["violation"]
            self.server.violations.append(verdict["violation"])
            return reject(self, verdict)
        if self.path.startswith("/inference-profiles"):
            return self.send(200, "application/json", [b'{"inferenceProfileSummaries":[]}'])
        try:
            chunks = self.server.replies.get_nowait()
        except queue.Empty:
            return self.send(500, "application/json", [b'{"message":"no reply scripted"}'])
        self.send(200, "application/vnd.amazon.eventstream", chunks)

    def send(self, status: int, content_type: str, chunks: list):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-amzn-requestid", "req-e2e")
        self.end_headers()
        for piece in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def gateway(tmp_path):
    binary = refusal_guard_binary()
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `cargo build --workspace --all-features --bins` first")
    mock = MockBedrock()
    threading.Thread(target=mock.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET})
    process = subprocess.Popen(
        [str(binary), "--bedrock-region", REGION, "--upstream", f"http://127.0.0.1:{mock.server_address[1]}",
         "--listen", "127.0.0.1:0", "--log", str(tmp_path / "refusals.jsonl"), "--chain", f"{OPUS}={SONNET}"],
        env=env, stderr=subprocess.PIPE, text=True)
    found = queue.Queue()

    def read():
        for line in process.stderr:
            if "listening on http://" in line:
                found.put(line.split("listening on ")[1].split()[0])

    threading.Thread(target=read, daemon=True).start()
    try:
        url = found.get(timeout=30)
    except queue.Empty:
        process.kill()
        pytest.fail("the proxy did not start")
    try:
        yield url, mock, tmp_path / "refusals.jsonl"
    finally:
        process.terminate()
        process.wait(timeout=10)
        mock.shutdown()
    if mock.violations:
        pytest.fail("the mock Bedrock rejected requests as Bedrock would:\n  " + "\n  ".join(mock.violations))


def test_anthropic_bedrock_stream_refusal_falls_back_every_attempt_signed(gateway):
    import anthropic

    url, mock, log = gateway
    mock.replies.put(refusal())
    mock.replies.put(answer("Recovered on Bedrock."))
    # The client signs for the proxy with keys of its own; the proxy re-signs.
    client = anthropic.AnthropicBedrock(aws_access_key="AKIDCLIENT", aws_secret_key="client-secret",
                                        aws_region=REGION, base_url=url, max_retries=0, timeout=30)
    text = ""
    # This SDK's Bedrock client defaults anthropic_version to the API version
    # 2026-10-21, which InvokeModel's ARN-versioned models do not take
    # (Anthropic's "Claude on Amazon Bedrock (Opus 4.6 and earlier)" warns of
    # a 400); the body's own value wins over the default, as the docs' boto3
    # examples set it.
    with client.messages.stream(model=OPUS, max_tokens=64,
                                messages=[{"role": "user", "content": "Audit this binary."}],
                                extra_body={"anthropic_version": "bedrock-2023-05-31"}) as stream:
        for piece in stream.text_stream:
            text += piece
    assert text == "Recovered on Bedrock."
    assert [s["verified"] for s in mock.seen] == [True, True]
    assert mock.seen[0]["path"] == f"/model/{OPUS}/invoke-with-response-stream"
    assert mock.seen[1]["path"] == f"/model/{SONNET}/invoke-with-response-stream"
    assert "model" not in mock.seen[1]["json"]
    assert [s["json"]["anthropic_version"] for s in mock.seen] == ["bedrock-2023-05-31"] * 2
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["outcome"] == "fallback" and record["wire_api"] == "bedrock_invoke_model"


def test_boto3_invoke_stream_and_converse_stream_through_the_gateway(gateway):
    import boto3
    from botocore.config import Config

    url, mock, _ = gateway
    client = boto3.client("bedrock-runtime", endpoint_url=url, region_name=REGION,
                          aws_access_key_id="AKIDCLIENT", aws_secret_access_key="client-secret",
                          config=Config(retries={"max_attempts": 1}, read_timeout=30))
    mock.replies.put(refusal())
    mock.replies.put(answer("boto3 recovered."))
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                       "messages": [{"role": "user", "content": "Audit this binary."}]})
    response = client.invoke_model_with_response_stream(modelId=OPUS, body=body)
    events = [json.loads(e["chunk"]["bytes"]) for e in response["body"] if "chunk" in e]
    text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert text == "boto3 recovered."
    assert mock.seen[0]["path"] == "/model/us.anthropic.claude-opus-4-7-v1%3A0/invoke-with-response-stream"
    assert mock.seen[1]["path"] == "/model/us.anthropic.claude-sonnet-4-5-v1%3A0/invoke-with-response-stream"

    mock.replies.put([
        event_frame("messageStart", {"role": "assistant"}),
        event_frame("messageStop", {"stopReason": "content_filtered"}),
        event_frame("metadata", {"usage": {"inputTokens": 5, "outputTokens": 0, "totalTokens": 5},
                                 "metrics": {"latencyMs": 10}}),
    ])
    mock.replies.put([
        event_frame("messageStart", {"role": "assistant"}),
        event_frame("contentBlockDelta", {"delta": {"text": "Converse rescued."}, "contentBlockIndex": 0}),
        event_frame("contentBlockStop", {"contentBlockIndex": 0}),
        event_frame("messageStop", {"stopReason": "end_turn"}),
        event_frame("metadata", {"usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
                                 "metrics": {"latencyMs": 10}}),
    ])
    response = client.converse_stream(modelId=SONNET, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    stream = list(response["stream"])
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in stream if "contentBlockDelta" in e)
    assert text == "Converse rescued."
    assert [e["messageStop"]["stopReason"] for e in stream if "messageStop" in e] == ["end_turn"]
    rescue = mock.seen[-1]["json"]
    assert len(rescue["messages"][0]["content"]) == 2
    assert all(s["verified"] for s in mock.seen)


def serve_for_claude_code():
    """`python test_bedrock.py`: the mock for .ci/e2e.sh's Claude Code step.
    Every call naming an Opus model is refused (a stream or a JSON body, as
    asked); every other model answers. Prints its port, serves until killed.
    `GET /__mock/violations` lists, as lines of text, every request it
    refused for a bad signature or for breaking Bedrock's rules (the
    check .ci/e2e.sh reads; stderr logs each request too)."""
    import sys

    failures = []

    class Scripted(Handler):
        def handle_request(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.command == "GET" and self.path == "/__mock/violations":
                return self.send(200, "application/json", [json.dumps(failures).encode()])
            headers = {k.lower(): v for k, v in self.headers.items()}
            ok = verify(self.command, self.path, headers, body)
            print(f"{self.command} {self.path} verified={ok}", file=sys.stderr, flush=True)
            if not ok:
                failures.append(f"unsigned or badly signed: {self.command} {self.path}")
                return self.send(403, "application/json", [b'{"message":"signature mismatch"}'])
            if (verdict := contract().check(self.command, self.path, headers, body)) is not None:
                failures.append(f"rejected: {verdict['violation']}")
                print(f"rejected: {verdict['violation']}", file=sys.stderr, flush=True)
                return reject(self, verdict)
            if not self.path.startswith("/model/"):
                return self.send(200, "application/json", [b'{"inferenceProfileSummaries":[]}'])
            refused = "opus" in self.path
            if self.path.endswith("-stream"):
                return self.send(200, "application/vnd.amazon.eventstream",
                                 refusal() if refused else answer("Bedrock answer via the fallback."))
            message = {"id": "msg_j", "type": "message", "role": "assistant", "model": SONNET,
                       "content": [] if refused else [{"type": "text", "text": "Bedrock answer via the fallback."}],
                       "stop_reason": "refusal" if refused else "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 5, "output_tokens": 4}}
            self.send(200, "application/json", [json.dumps(message).encode()])

    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve_for_claude_code()
