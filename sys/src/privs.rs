//! Dropping privileges: user and group look-ups, the file-system identity the store is
//! opened with, and the drop itself in every thread of the process.
//!
//! Linux keeps credentials per thread: the raw `setresuid`, `setgroups`, `capset` and
//! `prctl` calls change the calling thread only (glibc's `setresuid` wrapper broadcasts to
//! the other threads, but nothing does so for capabilities, the bounding set or
//! `no_new_privs`). By the time capture drops, the store's threads, the metrics listener
//! and others are already running, so [`drop_in_every_thread`] does what glibc does for
//! `setuid`: it runs the same sequence (`apply_here`, raw system calls only, so it is
//! async-signal-safe) in the calling thread, then in each other thread through a real-time
//! signal whose handler runs it there, one thread at a time, and then checks every thread's
//! `/proc/self/task/TID/status` against the calling thread's until all agree (a thread
//! started meanwhile is caught by the next round).

use std::io;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::error::{check, Ret, SysError};

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets as two 32-bit words.
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// A user's uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
}

/// Buffer size for the `get*nam_r` calls, doubled on ERANGE up to this.
const MAX_NSS_BUFFER: usize = 1 << 20;

/// The uid and primary gid of user `name` (passwd database, NSS included); `None` when
/// there is no such user.
pub fn user_by_name(name: &str) -> io::Result<Option<UserIds>> {
    by_name(libc::getpwnam_r, "getpwnam_r", "user", name, |pw| UserIds {
        uid: pw.pw_uid,
        gid: pw.pw_gid,
    })
}

/// The gid of group `name` (group database, NSS included); `None` when there is none.
pub fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    by_name(libc::getgrnam_r, "getgrnam_r", "group", name, |gr| {
        gr.gr_gid
    })
}

/// An entry of an NSS database as the `get*nam_r` calls fill it (`passwd`, `group`).
///
/// # Safety
/// Implement only for plain C data (integers and pointers), for which all-zero is a valid
/// value.
unsafe trait NssEntry: Sized {}
// SAFETY: `passwd` and `group` are `#[repr(C)]` structs of integers and pointers.
unsafe impl NssEntry for libc::passwd {}
// SAFETY: as above.
unsafe impl NssEntry for libc::group {}

/// The signature `getpwnam_r` and `getgrnam_r` share.
type ByNameCall<T> = unsafe extern "C" fn(
    *const libc::c_char,
    *mut T,
    *mut libc::c_char,
    usize,
    *mut *mut T,
) -> libc::c_int;

/// Looks `name` up with `call` (named `call_name` in the error) in the database of `what`
/// (`user`, `group`), growing the buffer for the entry's strings as the call asks, and
/// returns what `read` takes from the entry; `None` when there is no such entry.
fn by_name<T: NssEntry, R>(
    call: ByNameCall<T>,
    call_name: &'static str,
    what: &str,
    name: &str,
    read: impl Fn(&T) -> R,
) -> io::Result<Option<R>> {
    let cname = std::ffi::CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} name has a NUL byte"),
        )
    })?;
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: `T: NssEntry`, so all-zero is a valid `T`; the call fills it.
        let mut entry: T = unsafe { std::mem::zeroed() };
        let mut found: *mut T = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `entry`, `buf` (with its true length) and
        // `found` are live and writable for the call; the strings the call writes point into
        // `buf`, which outlives every read of `entry` (`read` takes integers from it).
        let ret = unsafe {
            call(
                cname.as_ptr(),
                &mut entry,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        // The return is the error number itself (0: none), not -1 and errno, so it does not
        // go through `check`.
        match ret {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(read(&entry))),
            libc::ERANGE if buf.len() < MAX_NSS_BUFFER => buf.resize(buf.len() * 2, 0),
            e => {
                let e = SysError::new(call_name, io::Error::from_raw_os_error(e));
                return Err(e.with_context(format!("for {what} {name:?}")).into());
            }
        }
    }
}

/// The calling thread's effective and permitted capability sets, as 64-bit masks.
pub fn capabilities() -> io::Result<(u64, u64)> {
    Ok(capget()?)
}

/// The calling thread's effective and permitted capability sets (raw `capget`). Allocates
/// nothing, on success or failure, so the signal handler's [`apply_here`] uses it too.
fn capget() -> Result<(u64, u64), SysError> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two `CapData` (version 3) into `data`, which is live and writable.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    check("capget", ret)?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
    ))
}

/// Makes files the calling thread creates from now on owned by `uid:gid`, and its file
/// access checks those of that user and group alone (setgroups to `gid`, setfsgid,
/// setfsuid). Per thread: threads started by this one afterwards inherit it. Needs
/// CAP_SETUID and CAP_SETGID.
pub fn set_fs_identity(uid: u32, gid: u32) -> io::Result<()> {
    let groups = [gid as libc::gid_t];
    // SAFETY: raw setgroups with a live one-element array; changes this thread only.
    let ret = unsafe { libc::syscall(libc::SYS_setgroups, 1usize, groups.as_ptr()) };
    check("setgroups", ret).map_err(|e| e.with_context(format!("to group {gid}")))?;
    // setfsuid/setfsgid report no error; they return the old id whether or not they changed
    // it, so read the id back (an invalid id, -1, changes nothing and returns the current).
    // SAFETY: plain system calls with integer arguments.
    let now_gid = unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsgid, u32::MAX)
    };
    // SAFETY: as above.
    let now_uid = unsafe {
        libc::syscall(libc::SYS_setfsuid, uid);
        libc::syscall(libc::SYS_setfsuid, u32::MAX)
    };
    if now_gid as u32 != gid || now_uid as u32 != uid {
        let e = SysError::new(
            "setfsuid/setfsgid",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        return Err(e.with_context(format!("to {uid}/{gid}")).into());
    }
    Ok(())
}

/// What every thread drops to. `u32::MAX` for `uid`/`gid`: unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropPlan {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// The capabilities kept (bit n: capability n) in the effective, permitted and
    /// bounding sets; every other capability is dropped from all of them, and ambient and
    /// inheritable are emptied.
    pub keep: u64,
}

// The plan as the signal handler reads it (set before any signal is sent).
static PLAN_UID: AtomicU32 = AtomicU32::new(u32::MAX);
static PLAN_GID: AtomicU32 = AtomicU32::new(u32::MAX);
static PLAN_KEEP: AtomicU64 = AtomicU64::new(0);
static PLAN_LAST_CAP: AtomicU32 = AtomicU32::new(40);
/// Threads that ran the plan in the handler.
static DONE: AtomicUsize = AtomicUsize::new(0);
/// The first failure in a handler: step << 32 | errno (0: none).
static FAILED: AtomicI64 = AtomicI64::new(0);

/// The steps of [`apply_here`], for the error.
const STEPS: [&str; 9] = [
    "capget",
    "prctl(PR_SET_KEEPCAPS, 1)",
    "prctl(PR_CAPBSET_DROP)",
    "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
    "setgroups",
    "setresgid",
    "setresuid",
    "capset",
    "prctl(PR_SET_NO_NEW_PRIVS)",
];

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Runs the plan in the calling thread with raw system calls only (no allocation, no lock:
/// safe in a signal handler). Returns the failed step and errno.
fn apply_here(uid: u32, gid: u32, keep: u64, last_cap: u32) -> Result<(), (usize, i32)> {
    let (effective, permitted) = capget().map_err(|e| (0, e.raw_os_error().unwrap_or(0)))?;
    let changes_ids = uid != u32::MAX;
    if changes_ids {
        // SAFETY: prctl with integer arguments; this thread only.
        step(1, unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) })?;
    }
    // The bounding set can shrink only with CAP_SETPCAP; without it (an unprivileged user
    // given capabilities by its service manager) it stays as that manager set it.
    const CAP_SETPCAP: u32 = 8;
    if effective & (1 << CAP_SETPCAP) != 0 {
        for cap in 0..=last_cap.min(63) {
            if keep & (1 << cap) != 0 {
                continue;
            }
            // SAFETY: prctl with integer arguments.
            let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
            step_unless_einval(2, ret)?;
        }
    }
    // SAFETY: prctl with integer arguments.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    step_unless_einval(3, ret)?;
    if gid != u32::MAX {
        let groups = [gid as libc::gid_t];
        // SAFETY: raw setgroups with a live one-element array.
        step(4, unsafe {
            libc::syscall(libc::SYS_setgroups, 1usize, groups.as_ptr())
        })?;
        // SAFETY: raw setresgid with integer arguments; this thread only.
        step(5, unsafe {
            libc::syscall(libc::SYS_setresgid, gid, gid, gid)
        })?;
    }
    if changes_ids {
        // SAFETY: raw setresuid with integer arguments; this thread only.
        step(6, unsafe {
            libc::syscall(libc::SYS_setresuid, uid, uid, uid)
        })?;
    }
    // Only what is still permitted can be kept: a capability never held stays absent.
    let kept = keep & permitted;
    let data = [
        CapData {
            effective: kept as u32,
            permitted: kept as u32,
            inheritable: 0,
        },
        CapData {
            effective: (kept >> 32) as u32,
            permitted: (kept >> 32) as u32,
            inheritable: 0,
        },
    ];
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads two `CapData` from the live `data`; pid 0 is this thread.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    step(7, ret)?;
    if changes_ids {
        // SAFETY: prctl with integer arguments. Clearing KEEPCAPS after the drop only tidies
        // up (the capabilities are set already), so its return is not checked.
        unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0) };
    }
    // SAFETY: prctl with integer arguments.
    step(8, unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    })?;
    Ok(())
}

/// Step `n` of [`STEPS`] returned `ret`: through the door, its errno kept with the step's
/// number for the handler's atomic (the door allocates nothing).
fn step<R: Ret>(n: usize, ret: R) -> Result<R, (usize, i32)> {
    check(STEPS[n], ret).map_err(|e| (n, e.raw_os_error().unwrap_or(0)))
}

/// As [`step`], with EINVAL no failure (a capability or an operation this kernel does not
/// know of).
fn step_unless_einval<R: Ret>(n: usize, ret: R) -> Result<(), (usize, i32)> {
    match step(n, ret) {
        Err((_, libc::EINVAL)) | Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

extern "C" fn on_drop_signal(_sig: libc::c_int) {
    let saved = errno();
    let r = apply_here(
        PLAN_UID.load(Ordering::SeqCst),
        PLAN_GID.load(Ordering::SeqCst),
        PLAN_KEEP.load(Ordering::SeqCst),
        PLAN_LAST_CAP.load(Ordering::SeqCst),
    );
    if let Err((step, e)) = r {
        let code = ((step as i64) << 32) | i64::from(e.max(1));
        let _ = FAILED.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst);
    }
    DONE.fetch_add(1, Ordering::SeqCst);
    // SAFETY: restores this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() = saved };
}

/// The highest capability number the kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The credential lines of a thread's status: what every thread must agree on.
fn credentials(tid: &str) -> io::Result<String> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))?;
    let keys = [
        "Uid:",
        "Gid:",
        "Groups:",
        "CapInh:",
        "CapPrm:",
        "CapEff:",
        "CapBnd:",
        "CapAmb:",
        "NoNewPrivs:",
    ];
    Ok(text
        .lines()
        .filter(|l| keys.iter().any(|k| l.starts_with(k)))
        .collect::<Vec<_>>()
        .join("\n"))
}

fn thread_name(tid: &str) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Applies `plan` in every thread of the process (see the module docs), then checks that
/// every thread's credentials are the caller's. The error names the step and the thread.
pub fn drop_in_every_thread(plan: DropPlan) -> io::Result<()> {
    let uid = plan.uid.unwrap_or(u32::MAX);
    let gid = plan.gid.unwrap_or(u32::MAX);
    PLAN_UID.store(uid, Ordering::SeqCst);
    PLAN_GID.store(gid, Ordering::SeqCst);
    PLAN_KEEP.store(plan.keep, Ordering::SeqCst);
    let last = last_cap();
    PLAN_LAST_CAP.store(last, Ordering::SeqCst);
    let sig = libc::SIGRTMIN() + 6;
    // SAFETY: `sigaction` is plain C data; all-zero is an empty mask and no flags.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_drop_signal as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: installs a handler that calls only async-signal-safe code (raw system calls
    // and atomics); `action` is live for the call and the old action is not wanted.
    let ret = unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) };
    check("sigaction", ret).map_err(|e| e.with_context("for the privilege drop"))?;
    apply_here(uid, gid, plan.keep, last).map_err(|(step, e)| step_error(step, e))?;
    // SAFETY: plain system calls without arguments.
    let (pid, me) = unsafe {
        (
            libc::getpid(),
            libc::syscall(libc::SYS_gettid) as libc::pid_t,
        )
    };
    let me = me.to_string();
    let want = credentials(&me)?;
    for _round in 0..10 {
        let mut all_agree = true;
        for entry in std::fs::read_dir("/proc/self/task")? {
            let tid = entry?.file_name().to_string_lossy().into_owned();
            if tid == me {
                continue;
            }
            match credentials(&tid) {
                Ok(c) if c == want => continue,
                Ok(_) => {}
                // The thread ended meanwhile.
                Err(_) => continue,
            }
            all_agree = false;
            let Ok(t) = tid.parse::<libc::pid_t>() else {
                continue;
            };
            let before = DONE.load(Ordering::SeqCst);
            // SAFETY: tgkill with integer arguments, to a thread of this process.
            let ret = unsafe { libc::syscall(libc::SYS_tgkill, pid, t, sig) };
            if ret < 0 {
                continue; // ESRCH: it ended.
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while DONE.load(Ordering::SeqCst) == before {
                if Instant::now() > deadline {
                    let e = io::Error::from_raw_os_error(libc::ETIMEDOUT);
                    let e = SysError::new("privilege drop", e).with_context(format!(
                        "in thread {tid} ({}): it did not take the signal within 2 s",
                        thread_name(&tid)
                    ));
                    return Err(e.into());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let failed = FAILED.load(Ordering::SeqCst);
            if failed != 0 {
                let e = step_error((failed >> 32) as usize, (failed & 0xffff_ffff) as i32);
                let e = e.with_context(format!("in thread {tid} ({})", thread_name(&tid)));
                return Err(e.into());
            }
        }
        if all_agree {
            return Ok(());
        }
    }
    let e = SysError::new("privilege drop", io::Error::from_raw_os_error(libc::EAGAIN));
    Err(e
        .with_context("(threads kept starting with other credentials after 10 rounds)")
        .into())
}

/// The error of step `step` of [`apply_here`], which failed with `errno`. The handler that
/// runs it cannot allocate, so it records the two numbers and the error is made here.
fn step_error(step: usize, errno: i32) -> SysError {
    let call = STEPS.get(step).copied().unwrap_or("privilege drop step");
    SysError::new(call, io::Error::from_raw_os_error(errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_found_and_a_missing_user_is_none() {
        assert_eq!(
            user_by_name("root").unwrap(),
            Some(UserIds { uid: 0, gid: 0 })
        );
        assert_eq!(group_by_name("root").unwrap(), Some(0));
        assert_eq!(user_by_name("capsule-no-such-user-x").unwrap(), None);
        assert_eq!(group_by_name("capsule-no-such-group-x").unwrap(), None);
        assert!(user_by_name("a\0b").is_err());
    }

    #[test]
    fn capabilities_of_this_thread_are_read() {
        let (eff, prm) = capabilities().unwrap();
        assert_eq!(eff & !prm, 0, "effective is a subset of permitted");
    }
}
