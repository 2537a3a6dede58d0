//! The I/O seam of the store's durable writes: every call that changes what a power loss
//! leaves on disk goes through here.
//!
//! ```text
//! file data   append_all, write_vectored (buffered, O_APPEND), write_at and
//!             write_vectored_at (direct I/O),
//!             set_len, sync_data (fdatasync), sync_all (fsync)      <- segment/, fsx.rs
//! directory   create (O_CREAT), mkdir, rename, unlink, sync_dir     <- fsx.rs
//! ```
//!
//! Each function is the system call the store made before the seam existed, unchanged: in a
//! release build (and in every build but the store's own unit tests) it is exactly that call.
//! In the store's unit tests each call, once it has succeeded, is also reported to [`sim`],
//! whose recorder keeps an ordered log of the operations on a store directory and can build
//! from any prefix of that log the file system a power loss at that point would leave
//! (file data as of each file's last fdatasync or fsync plus a chosen subset of the 4 KiB
//! pages written since, directory entries as of the directory's last fsync plus a prefix of
//! what changed since). `crash_tests` opens such states with the real store and checks what
//! docs/format.md promises about syncs. Reads do not go through the seam: they cannot change
//! what survives.

use std::fs::File;
use std::io::{IoSlice, Write};
#[cfg(test)]
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};

#[cfg(test)]
mod crash_tests;
#[cfg(test)]
pub(crate) mod sim;

/// `write_all` on `file` (at its position; the end for a file opened with `O_APPEND`).
pub(crate) fn append_all(file: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    file.write_all(bytes)?;
    #[cfg(test)]
    sim::wrote_at_position(file, bytes);
    Ok(())
}

/// One `writev` on `file`; returns the bytes written.
pub(crate) fn write_vectored(file: &mut File, parts: &[IoSlice<'_>]) -> std::io::Result<usize> {
    let n = file.write_vectored(parts)?;
    #[cfg(test)]
    {
        let mut bytes: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        bytes.truncate(n);
        sim::wrote_at_position(file, &bytes);
    }
    Ok(n)
}

/// One `pwrite` of `buf` at `offset` (the direct-I/O writer's); returns the bytes written.
pub(crate) fn write_at(file: &File, buf: &[u8], offset: u64) -> std::io::Result<usize> {
    let n = file.write_at(buf, offset)?;
    #[cfg(test)]
    sim::wrote(file, offset, &buf[..n]);
    Ok(n)
}

/// One `pwritev` of `parts` at `offset` (the direct-I/O writer's, when framed blocks are
/// queued behind its window); returns the bytes written.
pub(crate) fn write_vectored_at(
    file: &File,
    parts: &[IoSlice<'_>],
    offset: u64,
) -> std::io::Result<usize> {
    let n = rustix::io::pwritev(file, parts, offset)?;
    #[cfg(test)]
    {
        let mut bytes: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        bytes.truncate(n);
        sim::wrote(file, offset, &bytes);
    }
    Ok(n)
}

/// `ftruncate`.
pub(crate) fn set_len(file: &File, len: u64) -> std::io::Result<()> {
    file.set_len(len)?;
    #[cfg(test)]
    sim::set_len(file, len);
    Ok(())
}

/// `fdatasync`: the file's data (and its length) survive a power loss from here on.
pub(crate) fn sync_data(file: &File) -> std::io::Result<()> {
    file.sync_data()?;
    #[cfg(test)]
    sim::synced(file);
    Ok(())
}

/// `fsync`.
pub(crate) fn sync_all(file: &File) -> std::io::Result<()> {
    file.sync_all()?;
    #[cfg(test)]
    sim::synced(file);
    Ok(())
}

/// `openat(dir, name, flags)`; `path` is `dir`/`name`, for the recorder. With `O_CREAT` the
/// file may be new: its directory entry then survives a power loss only once `dir` is
/// fsynced.
pub(crate) fn openat(
    dir: &OwnedFd,
    name: &Path,
    flags: OFlags,
    mode: Mode,
    path: &Path,
) -> rustix::io::Result<OwnedFd> {
    #[cfg(test)]
    let existed = flags.contains(OFlags::CREATE) && sim::exists(path);
    let fd = rfs::openat(dir, name, flags, mode)?;
    #[cfg(test)]
    if flags.contains(OFlags::CREATE) && !existed {
        sim::created(path, fd.as_fd());
    }
    #[cfg(not(test))]
    let _ = path;
    Ok(fd)
}

/// `mkdirat(dir, name)`; `path` is `dir`/`name`.
pub(crate) fn mkdirat(
    dir: &OwnedFd,
    name: &Path,
    mode: Mode,
    path: &Path,
) -> rustix::io::Result<()> {
    rfs::mkdirat(dir, name, mode)?;
    #[cfg(test)]
    sim::made_dir(path);
    #[cfg(not(test))]
    let _ = path;
    Ok(())
}

/// `renameat`; `from` and `to` are the full paths, for the recorder.
pub(crate) fn renameat(
    fdir: &OwnedFd,
    fname: &Path,
    tdir: &OwnedFd,
    tname: &Path,
    (from, to): (&Path, &Path),
) -> rustix::io::Result<()> {
    rfs::renameat(fdir, fname, tdir, tname)?;
    #[cfg(test)]
    sim::renamed(from, to);
    #[cfg(not(test))]
    let _ = (from, to);
    Ok(())
}

/// `unlinkat` of a file; `path` is `dir`/`name`.
pub(crate) fn unlinkat(dir: &OwnedFd, name: &Path, path: &Path) -> rustix::io::Result<()> {
    rfs::unlinkat(dir, name, AtFlags::empty())?;
    #[cfg(test)]
    sim::unlinked(path);
    #[cfg(not(test))]
    let _ = path;
    Ok(())
}

/// `fsync` of directory `dir` (at `path`): creations, renames and unlinks in it survive a
/// power loss from here on.
pub(crate) fn sync_dir(dir: &OwnedFd, path: &Path) -> rustix::io::Result<()> {
    rfs::fsync(dir)?;
    #[cfg(test)]
    sim::synced_dir(path);
    #[cfg(not(test))]
    let _ = path;
    Ok(())
}
