//! The calling thread's CPU and I/O priority: background work (the tier's uploader) lowers
//! its own thread's, so that it takes the CPU and the disk only when capture leaves them.
//!
//! On Linux both are per thread: `setpriority(PRIO_PROCESS, tid)` sets one thread's nice
//! value, `ioprio_set(IOPRIO_WHO_PROCESS, tid)` one thread's I/O priority. A thread may
//! always lower its own priority; it needs no privilege.

use std::io;

use crate::error::check;

/// The nice value of background threads: the lowest CPU priority.
pub const BACKGROUND_NICE: i32 = 19;

/// The best-effort I/O scheduling class (linux/ioprio.h).
pub const IOPRIO_CLASS_BE: u8 = 2;
/// The lowest level of the best-effort class: background threads' I/O priority.
pub const BACKGROUND_IO_LEVEL: u8 = 7;

const IOPRIO_WHO_PROCESS: libc::c_long = 1;
const IOPRIO_CLASS_SHIFT: u32 = 13;

/// The calling thread's id.
fn tid() -> libc::c_long {
    // SAFETY: gettid takes no argument and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Lowers the calling thread to the background: nice
/// [`BACKGROUND_NICE`], and I/O in the best-effort class at its lowest level,
/// [`BACKGROUND_IO_LEVEL`] (not the idle class: a disk that capture keeps busy would starve
/// an idle-class thread for good, and the uploads must still drain). The I/O priority
/// counts only where the disk's scheduler honours it (BFQ; mq-deadline and none ignore it).
pub fn background_thread() -> io::Result<()> {
    let tid = tid();
    // SAFETY: setpriority takes plain integers; `tid` is this thread's id.
    let r = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            BACKGROUND_NICE as libc::c_int,
        )
    };
    check("setpriority", r).map_err(|e| e.with_context("of the background thread"))?;
    let value = (libc::c_long::from(IOPRIO_CLASS_BE) << IOPRIO_CLASS_SHIFT)
        | libc::c_long::from(BACKGROUND_IO_LEVEL);
    // SAFETY: ioprio_set takes three integers; `tid` is this thread's id.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, value) };
    check("ioprio_set", r).map_err(|e| e.with_context("of the background thread"))?;
    Ok(())
}

/// The calling thread's I/O priority: (class, level). Class 0 (none) means the thread
/// follows its CPU priority.
pub fn io_priority() -> io::Result<(u8, u8)> {
    io_priority_of(tid() as u32)
}

/// The I/O priority of thread `tid` (of any process): (class, level).
pub fn io_priority_of(tid: u32) -> io::Result<(u8, u8)> {
    // SAFETY: ioprio_get takes two integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_get,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
        )
    };
    let v = check("ioprio_get", r).map_err(|e| e.with_context(format!("of thread {tid}")))?;
    Ok(((v >> IOPRIO_CLASS_SHIFT) as u8, (v & 0xff) as u8))
}

/// The calling thread's nice value.
pub fn nice() -> io::Result<i32> {
    nice_of(tid() as u32)
}

/// The nice value of thread `tid` (of any process).
pub fn nice_of(tid: u32) -> io::Result<i32> {
    // The kernel's own call returns 20 - nice (never negative), unlike the C library's
    // wrapper, whose -1 may be a nice value or an error.
    // SAFETY: getpriority takes two integers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getpriority,
            libc::c_long::from(libc::PRIO_PROCESS),
            libc::c_long::from(tid),
        )
    };
    let v = check("getpriority", r).map_err(|e| e.with_context(format!("of thread {tid}")))?;
    Ok(20 - v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_at_the_lowest_priorities_and_others_do_not() {
        let before = (nice().unwrap(), io_priority().unwrap());
        let got = std::thread::spawn(|| {
            background_thread().unwrap();
            (nice().unwrap(), io_priority().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(
            got,
            (BACKGROUND_NICE, (IOPRIO_CLASS_BE, BACKGROUND_IO_LEVEL))
        );
        assert_eq!(
            (nice().unwrap(), io_priority().unwrap()),
            before,
            "the calling thread's own priorities are unchanged"
        );
    }
}
