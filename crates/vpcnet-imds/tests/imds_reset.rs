//! An IMDS read whose connection is reset before any answer (a kept-alive connection the far
//! end dropped) is made again on a new connection instead of failing the caller.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vpcnet_imds::Imds;

/// Serves IMDSv2 (token on PUT, `i-reset` on GET) but resets the connection of the first
/// `resets` GETs (zero linger, then close: the peer sees ECONNRESET).
async fn serve(listener: TcpListener, resets: usize, gets: Arc<AtomicUsize>) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            return;
        };
        let gets = gets.clone();
        tokio::spawn(async move { connection(conn, resets, gets).await });
    }
}

async fn connection(mut conn: TcpStream, resets: usize, gets: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let Ok(n) = conn.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 4);
        let body = if head.starts_with("PUT") {
            "token"
        } else {
            if gets.fetch_add(1, Ordering::SeqCst) < resets {
                let _ = conn.set_zero_linger();
                return;
            }
            "i-reset"
        };
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-aws-ec2-metadata-token-ttl-seconds: 21600\r\n\r\n{body}",
            body.len()
        );
        if conn.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

async fn imds(resets: usize) -> (Imds, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let gets = Arc::new(AtomicUsize::new(0));
    tokio::spawn(serve(listener, resets, gets.clone()));
    (
        Imds::with_endpoint(&url, Some(Duration::from_secs(5))).unwrap(),
        gets,
    )
}

#[tokio::test]
async fn a_reset_connection_is_read_again() {
    let (imds, gets) = imds(1).await;
    assert_eq!(imds.instance_id().await.unwrap(), "i-reset");
    assert_eq!(gets.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_second_reset_is_reported() {
    let (imds, gets) = imds(2).await;
    let e = imds.instance_id().await.unwrap_err();
    assert!(format!("{e}").contains("instance-id"), "{e}");
    assert_eq!(gets.load(Ordering::SeqCst), 2);
}
