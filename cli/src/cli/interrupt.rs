//! Removing the temporary output file when ibp is stopped part-way: by
//! Ctrl-C (SIGINT), `kill` (SIGTERM), a closed terminal (SIGHUP), or a
//! memory-mapped input that shrank under it (SIGBUS).
//!
//! Q: why a thread that waits for the signals instead of a handler?
//! A: removing a file list under a lock is not async-signal-safe. The three
//! stop signals are blocked in every thread (they inherit the mask of the
//! main thread, which blocks them before any other thread exists), and one
//! thread takes them with `sigwait`, where ordinary code may run. SIGBUS
//! cannot wait: it is raised in the thread that touched the missing page, so
//! its handler does only what is async-signal-safe (atomic loads, `unlink`,
//! `write`, `_exit`).

use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Exit code of a run stopped by SIGBUS: an I/O error
/// ([`ibp::ErrorKind::exit_code`] of `Io`).
const EXIT_IO: i32 = 3;

/// Temporary files to remove, as leaked C strings (null: free slot).
///
/// Q: why leak the paths instead of freeing them when unregistered?
/// A: the signal thread or the SIGBUS handler may be reading a pointer at
/// the moment it is unregistered; a path that is never freed cannot dangle.
/// A run registers one or two.
static PARTIAL: [AtomicPtr<libc::c_char>; 8] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 8];

/// Start removing registered files on SIGINT, SIGTERM, SIGHUP and SIGBUS.
/// Call first thing in `main`, before any thread is started.
pub fn install() {
    // SAFETY: a zeroed sigset_t is a valid argument for sigemptyset, which
    // initialises it; the calls only read and write the local set and this
    // thread's mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let waiter = std::thread::Builder::new()
        .name("ibp-signals".into())
        .spawn(move || wait_and_clean(set));
    if waiter.is_err() {
        // No thread to take the signals: leave them to their default action
        // rather than ignoring Ctrl-C.
        // SAFETY: as above, on this thread's mask only.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
    // SAFETY: `on_sigbus` is an `extern "C" fn(c_int)` that only makes
    // async-signal-safe calls; the sigaction struct is fully initialised.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}

fn wait_and_clean(set: libc::sigset_t) {
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is an initialised signal set and `sig` a valid out
        // pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        remove_registered();
        // Die of the same signal, so that the parent (a shell, a job
        // runner) sees how the run ended.
        // SAFETY: resets one signal's disposition, unblocks it in this
        // thread and raises it here; the default action ends the process.
        unsafe {
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            libc::signal(sig, libc::SIG_DFL);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::raise(sig);
        }
        std::process::exit(128 + sig);
    }
}

extern "C" fn on_sigbus(_: libc::c_int) {
    const MSG: &[u8] = b"ibp: I/O: a file ibp had mapped into memory became shorter while it was read (SIGBUS); was it changed during the run? Nothing was written; run again once the file is complete\n";
    // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG is a valid
    // buffer of its length.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
    }
    remove_registered();
    // SAFETY: as above.
    unsafe { libc::_exit(EXIT_IO) }
}

/// Unlink every registered path. Async-signal-safe: atomic loads and
/// `unlink` only.
fn remove_registered() {
    for slot in &PARTIAL {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a non-null slot holds a leaked, NUL-terminated C
            // string that is never freed.
            unsafe { libc::unlink(p) };
        }
    }
}

/// A registered temporary file; dropping it unregisters it (the file itself
/// is left alone).
pub struct Registration(Option<usize>);

/// Remove `path` if the process is stopped by a signal before the
/// registration is dropped. Best effort: with every slot taken, or a path
/// with a NUL byte, nothing is registered.
pub fn register(path: &Path) -> Registration {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Registration(None);
    };
    let raw = c.into_raw();
    for (i, slot) in PARTIAL.iter().enumerate() {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            return Registration(Some(i));
        }
    }
    Registration(None)
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            // Leaked on purpose, see PARTIAL.
            PARTIAL[i].store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}
