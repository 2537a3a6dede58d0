//! What a connection's TCP socket knows that the response body does not: how many of the
//! bytes written to it the client's TCP acknowledged. A streamed answer cut by a client
//! that went away is audited with what reached the client, not with what the server handed
//! its send buffer (megabytes more on a fast link).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

tokio::task_local! {
    /// The connection a request arrived on: set around the connection's task, read by the
    /// routes that stream.
    pub(super) static CONN: Arc<ConnIo>;
}

/// One connection's byte counts at its socket.
#[derive(Debug)]
pub(super) struct ConnIo {
    /// Bytes written to the socket (TLS records: headers, bodies and their framing).
    written: AtomicU64,
    /// A duplicate of the socket's descriptor, to ask the kernel for the acknowledged count
    /// (also after the connection's own stream is dropped: it refers to the same socket).
    sock: Option<OwnedFd>,
}

impl ConnIo {
    /// Bytes the socket took that the client's TCP has not acknowledged (unsent or in
    /// flight, or lost with a reset): `None` when the kernel cannot say.
    pub(super) fn unreceived(&self) -> Option<u64> {
        let acked = capsule_sys::tcp_bytes_acked(self.sock.as_ref()?).ok()?;
        Some(self.written.load(Ordering::Acquire).saturating_sub(acked))
    }
}

/// A stream that counts what is written to it into its [`ConnIo`].
#[derive(Debug)]
pub(super) struct Counted<T> {
    inner: T,
    io: Arc<ConnIo>,
}

impl Counted<tokio::net::TcpStream> {
    pub(super) fn new(tcp: tokio::net::TcpStream) -> Self {
        let io = Arc::new(ConnIo {
            written: AtomicU64::new(0),
            sock: tcp.as_fd().try_clone_to_owned().ok(),
        });
        Counted { inner: tcp, io }
    }
}

impl<T> Counted<T> {
    pub(super) fn io(&self) -> Arc<ConnIo> {
        self.io.clone()
    }

    fn count(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r {
            self.io.written.fetch_add(*n as u64, Ordering::AcqRel);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counts_what_is_written_and_what_the_peer_acknowledged() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        let (s, _) = l.accept().await.unwrap();
        let mut s = Counted::new(s);
        let io = s.io();
        s.write_all(&[1u8; 50_000]).await.unwrap();
        let mut got = vec![0u8; 50_000];
        c.read_exact(&mut got).await.unwrap();
        let t0 = std::time::Instant::now();
        while io.unreceived() != Some(0) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{io:?}");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(io.written.load(Ordering::Acquire), 50_000);
    }
}
