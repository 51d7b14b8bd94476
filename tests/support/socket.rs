//! Reading a raw HTTP exchange off a socket, for tests that speak to the
//! proxy byte by byte.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Reads `socket` until the peer closes it (EOF or a reset), for at most
/// `within`: the bytes read, and whether the peer closed in time.
pub async fn read_until_closed(socket: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 8192];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (out, closed)
}
