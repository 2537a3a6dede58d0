//! The one door every call into the C library goes out through: [`check`] (and
//! [`check_map`] for `mmap`) turns a call's return into its value or a [`SysError`] that
//! names the call.
//!
//! Calls whose failure is not an error for capsule do not go through it (a refused
//! `madvise` hint, `munmap` in a destructor, `clock_gettime` of a clock that always exists,
//! clearing `PR_SET_KEEPCAPS` after the drop), and neither do the few that report failure
//! another way: `if_nametoindex` (0: no such interface, said as such), the `get*nam_r` look-ups
//! (the error number is the return value; the `SysError` is made from it), `setfsuid` and
//! `setfsgid` (no error at all: the id is read back). Each says so where it is called.

use std::io;

/// A call into the kernel or the C library that failed: the call (`bind`, `mmap`,
/// `PACKET_RX_RING`, `getpwnam_r`), what it was for where that varies (`to eth1`, `of the
/// 268435456-byte ring`), and the OS error as its [source](std::error::Error::source).
///
/// Its message is the call and what it was for, so an error chain printed with `: ` between
/// causes (anyhow's `{:#}`) reads `bind to eth1: No such device (os error 19)`. Turned into
/// an [`io::Error`] (the `?` of a function returning [`io::Result`] does it) it keeps the OS
/// error's [kind](io::Error::kind) and stays reachable with
/// [`get_ref`](io::Error::get_ref) and a downcast.
#[derive(Debug, thiserror::Error)]
#[error("{call}{}", .context.as_deref().map(|c| format!(" {c}")).unwrap_or_default())]
pub struct SysError {
    call: &'static str,
    context: Option<String>,
    #[source]
    source: io::Error,
}

impl SysError {
    /// `call` failed with `source`.
    pub(crate) fn new(call: &'static str, source: io::Error) -> SysError {
        SysError {
            call,
            context: None,
            source,
        }
    }

    /// `call` failed just now: the error is the calling thread's `errno`. Allocates nothing
    /// (the global allocator uses it).
    pub(crate) fn last(call: &'static str) -> SysError {
        SysError::new(call, io::Error::last_os_error())
    }

    /// Adds what the call was for (`to eth1`), said after the call's name.
    pub(crate) fn with_context(mut self, context: impl Into<String>) -> SysError {
        self.context = Some(context.into());
        self
    }

    /// The call that failed, as named in the message (`bind`, `PACKET_RX_RING`).
    pub fn call(&self) -> &'static str {
        self.call
    }

    /// The OS error the call failed with.
    pub fn os_error(&self) -> &io::Error {
        &self.source
    }

    /// The error number (`errno`) the call failed with.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The kind of the OS error (`NotFound`, `PermissionDenied`, ...).
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

impl From<SysError> for io::Error {
    /// An `io::Error` of the OS error's kind carrying the `SysError`.
    fn from(e: SysError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// What a C call returns when it reports failure as a negative number with the reason in
/// `errno`: `int`, `long` (`syscall(2)`), `ssize_t`.
pub(crate) trait Ret: Copy {
    fn failed(self) -> bool;
}

impl Ret for i32 {
    fn failed(self) -> bool {
        self < 0
    }
}

impl Ret for i64 {
    fn failed(self) -> bool {
        self < 0
    }
}

impl Ret for isize {
    fn failed(self) -> bool {
        self < 0
    }
}

/// The door: `ret`, what `call` just returned, or the error naming it with the calling
/// thread's `errno`. Call it straight after the call, before anything else can change
/// `errno`. Allocates nothing, on success or failure.
#[inline]
pub(crate) fn check<R: Ret>(call: &'static str, ret: R) -> Result<R, SysError> {
    if ret.failed() {
        return Err(SysError::last(call));
    }
    Ok(ret)
}

/// The door for `mmap`, which reports failure as `MAP_FAILED`: the address of the new
/// mapping, or the error naming the call. Allocates nothing.
#[inline]
pub(crate) fn check_map(call: &'static str, ret: *mut libc::c_void) -> Result<*mut u8, SysError> {
    if ret == libc::MAP_FAILED {
        return Err(SysError::last(call));
    }
    Ok(ret.cast())
}

/// An error and its causes, joined by `: ` (as anyhow's `{:#}` prints them).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(e), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_is_named_and_keeps_its_os_error_and_kind() {
        // SAFETY: a system call with plain integer arguments; -1 is no address family.
        let ret = unsafe { libc::socket(-1, libc::SOCK_RAW, 0) };
        let e = check("socket", ret).unwrap_err().with_context("for a test");
        assert_eq!(e.to_string(), "socket for a test");
        assert_eq!(e.call(), "socket");
        assert_eq!(e.raw_os_error(), Some(libc::EAFNOSUPPORT));
        let os = io::Error::from_raw_os_error(libc::EAFNOSUPPORT);
        assert_eq!(chain(&e), format!("socket for a test: {os}"));
        // As an io::Error: the same kind, the same chain, the SysError still inside.
        let io_error = io::Error::from(e);
        assert_eq!(io_error.kind(), os.kind());
        assert_eq!(chain(&io_error), format!("socket for a test: {os}"));
        let inner = io_error
            .get_ref()
            .and_then(|e| e.downcast_ref::<SysError>());
        assert_eq!(inner.map(SysError::call), Some("socket"));
    }

    #[test]
    fn only_a_negative_return_is_a_failure() {
        assert_eq!(check("close", 0i32).unwrap(), 0);
        assert_eq!(check("syscall", 7i64).unwrap(), 7);
        assert_eq!(check("send", 1500isize).unwrap(), 1500);
        assert!(check("send", -1isize).is_err());
        assert!(check_map("mmap", libc::MAP_FAILED).is_err());
        let e = SysError::new("getpwnam_r", io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(e.to_string(), "getpwnam_r");
    }
}
