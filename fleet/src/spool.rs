//! A node's packets on their way into the merge: written to a file as they arrive (the pull
//! never waits on the merge, so a node's `serve` is never held back by a slower node), and
//! read from it by the merge as soon as they are there (the merge never waits for a node's
//! last byte, only for the bytes it needs next).
//!
//! ```text
//! pull thread --write--> SpoolWriter --append--> file (unlinked) <--read_at-- SpoolReader --> merge
//!                            | written += n, notify                  | waits while pos == written
//!                            | finish / drop: done, notify           | and not done; EOF when done
//! ```
//!
//! The reader reads at its own offset (`read_at`), so the two never share a file position.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    /// Bytes written so far.
    written: u64,
    /// The writer is finished: no more bytes will come.
    done: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writing end: what the pull writes a node's answer into.
#[derive(Debug)]
pub struct SpoolWriter {
    file: File,
    shared: Arc<Shared>,
}

/// The reading end: a node's packets for the merge, as they arrive.
#[derive(Debug)]
pub struct SpoolReader {
    file: File,
    pos: u64,
    shared: Arc<Shared>,
}

/// A spool over `file` (empty, read and write; typically unlinked): its two ends.
pub fn spool(file: File) -> std::io::Result<(SpoolWriter, SpoolReader)> {
    let shared = Arc::new(Shared::default());
    let reader = SpoolReader {
        file: file.try_clone()?,
        pos: 0,
        shared: shared.clone(),
    };
    Ok((SpoolWriter { file, shared }, reader))
}

impl SpoolWriter {
    /// Marks the spool finished (also done when the writer is dropped).
    pub fn finish(self) {}
}

impl Write for SpoolWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        let mut s = self.shared.lock();
        s.written += n as u64;
        self.shared.cv.notify_all();
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SpoolWriter {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.done = true;
        self.shared.cv.notify_all();
    }
}

impl Read for SpoolReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let avail = {
            let mut s = self.shared.lock();
            while s.written == self.pos && !s.done {
                s = self.shared.cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            s.written - self.pos
        };
        if avail == 0 {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(avail).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reader_gets_bytes_as_they_are_written_and_ends_when_the_writer_does() {
        let f = tempfile::tempfile().unwrap();
        let (mut w, mut r) = spool(f).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 3];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
                tx.send(got.len()).unwrap();
            }
            got
        });
        w.write_all(b"abcd").unwrap();
        // The first bytes are read before the writer is done.
        let mut seen = 0;
        while seen < 4 {
            seen = rx.recv().unwrap();
        }
        w.write_all(b"ef").unwrap();
        w.finish();
        assert_eq!(t.join().unwrap(), b"abcdef");
    }
}
