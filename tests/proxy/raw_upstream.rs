//! The raw scripted upstream that the fault tests rely on: it must record
//! truncated requests as incomplete and see its peer close, or the fault
//! tests built on it would pass for the wrong reason.

use std::time::Duration;

use support::contract::Contract;
use support::raw_upstream::{chunk, head, last_chunk, Act, RawUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Opens a connection to `addr` and sends `request` on it.
async fn send(addr: std::net::SocketAddr, request: &[u8]) -> TcpStream {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    socket
}

#[tokio::test]
async fn serves_a_script_and_records_complete_requests() {
    let upstream = RawUpstream::start_keeping(Contract::new().serving("/v1/x"), |_, _| {
        vec![
            Act::Write(head(200, "text/plain")),
            Act::Write(chunk(b"hello")),
            Act::Write(last_chunk()),
        ]
    })
    .await;
    let mut socket = send(
        upstream.addr(),
        b"POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbody",
    )
    .await;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), socket.read_to_string(&mut answer))
        .await
        .expect("the script ends")
        .ok();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("5\r\nhello\r\n0\r\n\r\n"), "{answer}");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].complete);
    assert_eq!(seen[0].body, b"body");
    assert_eq!(seen[0].path(), "/v1/x");
}

#[tokio::test]
async fn records_an_aborted_chunked_request_as_incomplete() {
    let upstream = RawUpstream::start(|_, _| vec![Act::Hang]).await;
    let socket = send(
        upstream.addr(),
        b"POST /v1/x HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\n",
    )
    .await;
    drop(socket);
    assert!(
        upstream
            .wait_until(Duration::from_secs(5), |u| u.requests().len() == 1)
            .await
    );
    let seen = upstream.requests();
    assert!(!seen[0].complete);
    assert_eq!(seen[0].body, b"abcd");
    assert!(upstream.wait_all_closed(Duration::from_secs(5)).await);
    assert_eq!(upstream.closed_by_peer(), 1);
}

#[tokio::test]
async fn a_hang_ends_when_the_peer_leaves() {
    let upstream =
        RawUpstream::start(|_, _| vec![Act::Write(head(200, "text/event-stream")), Act::Hang])
            .await;
    let mut socket = send(upstream.addr(), b"GET / HTTP/1.1\r\nhost: a\r\n\r\n").await;
    let mut first = [0u8; 12];
    socket.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert_eq!(upstream.open(), 1);
    drop(socket);
    assert!(upstream.wait_all_closed(Duration::from_secs(5)).await);
    assert_eq!(upstream.closed_by_peer(), 1);
}
