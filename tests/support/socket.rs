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

/// A loopback port nothing listens on, reserved for as long as this value
/// lives: the socket is bound but never listens, so a connection to it is
/// refused, and no listener bound later (by this test or another) can be
/// handed the same port, as it could if the port were merely freed.
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    addr: std::net::SocketAddr,
}

impl ClosedPort {
    /// Reserves a fresh loopback port.
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind("127.0.0.1:0".parse().unwrap())
            .expect("bind a loopback port");
        let addr = socket.local_addr().expect("the bound address");
        Self {
            _socket: socket,
            addr,
        }
    }

    /// The reserved address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// `http://` and the reserved address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}
