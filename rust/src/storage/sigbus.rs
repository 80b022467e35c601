//! The SIGBUS guard: a file shrunk under one of our maps (another process truncating a segment
//! being read or written, or the shared wake-up file) must not kill the process.
//!
//! A store or load through a `MAP_SHARED` map beyond the end of its file raises SIGBUS. Every
//! `MappedFile` registers its address range here; a process-wide handler, installed once,
//! looks up the faulting address and, when it lies in one of our maps, replaces that page
//! with an anonymous zero page (`mmap(MAP_FIXED | MAP_ANONYMOUS)`, async-signal-safe) and
//! marks the map damaged, so the faulting instruction completes. Readers then see zeros,
//! which fail the length/CRC checks as `CorruptRecordError`; a writer checks `is_damaged`
//! after its stores and before acknowledging, so bytes that went to the anonymous page are
//! never acknowledged (the append fails and poisons the log). Addresses that are not ours go
//! to the handler that was installed before (or the default action: the process dies, as it
//! should for a real bug).
//!
//! The registry is a fixed table of slots (start, end, damaged) read by the handler with
//! atomic loads only; registering a map is a scan for a free slot. Maps beyond `SLOTS` are
//! unguarded (a counter reports it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

const SLOTS: usize = 1 << 16;
/// `start` of a slot being filled: not yet visible to the handler.
const FILLING: usize = usize::MAX;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot { start: AtomicUsize::new(0), end: AtomicUsize::new(0), damaged: AtomicBool::new(false) };
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Where the next free-slot scan starts.
static HINT: AtomicUsize = AtomicUsize::new(0);
/// Maps that found no free slot (unguarded).
pub static UNGUARDED: AtomicUsize = AtomicUsize::new(0);
static INSTALL: Once = Once::new();
/// The page size, read at install (sysconf is not async-signal-safe).
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

/// A registered range; unregisters on drop (before the map itself is unmapped).
pub struct Guard {
    slot: Option<usize>,
}

impl Guard {
    /// Whether a page of this map was replaced after its file shrank.
    #[inline]
    pub fn is_damaged(&self) -> bool {
        self.slot.is_some_and(|i| TABLE[i].damaged.load(Ordering::Acquire))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            TABLE[i].start.store(0, Ordering::Release);
        }
    }
}

/// Guard `[start, start + len)`, installing the handler on first use.
pub fn register(start: *const u8, len: usize) -> Guard {
    INSTALL.call_once(install);
    let from = HINT.load(Ordering::Relaxed);
    for k in 0..SLOTS {
        let i = (from + k) % SLOTS;
        let slot = &TABLE[i];
        if slot.start.compare_exchange(0, FILLING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.damaged.store(false, Ordering::Relaxed);
            slot.end.store(start as usize + len, Ordering::Relaxed);
            slot.start.store(start as usize, Ordering::Release);
            HINT.store(i + 1, Ordering::Relaxed);
            return Guard { slot: Some(i) };
        }
    }
    UNGUARDED.fetch_add(1, Ordering::Relaxed);
    Guard { slot: None }
}

fn install() {
    // SAFETY: plain libc calls on zero-initialised, fully written sigaction structs; the
    // previous action is stored once, before the new handler can run, and only read after.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        PAGE.store(libc::sysconf(libc::_SC_PAGESIZE) as usize, Ordering::Relaxed);
        libc::sigemptyset(&mut action.sa_mask);
        let previous = &raw mut PREVIOUS;
        (*previous).write(std::mem::zeroed());
        libc::sigaction(libc::SIGBUS, &action, (*previous).as_mut_ptr());
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; `si_addr` is the
    // faulting address. Only atomics and mmap (async-signal-safe) are used. The page we
    // replace lies inside one of our live maps (registered before use, unregistered before
    // unmapping), so MAP_FIXED only ever replaces our own pages.
    unsafe {
        let addr = (*info).si_addr() as usize;
        for slot in TABLE.iter() {
            let start = slot.start.load(Ordering::Acquire);
            if start == 0 || start == FILLING || addr < start || addr >= slot.end.load(Ordering::Relaxed) {
                continue;
            }
            let page = PAGE.load(Ordering::Relaxed);
            let base = addr & !(page - 1);
            let p = libc::mmap(
                base as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                slot.damaged.store(true, Ordering::Release);
                return;
            }
            break;
        }
        // Not ours (or the page could not be replaced): what would have happened without us.
        let previous = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
        let chained = previous.sa_sigaction;
        if chained == libc::SIG_DFL || chained == libc::SIG_IGN {
            libc::signal(sig, libc::SIG_DFL);
            return; // the instruction faults again and the default action ends the process
        }
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(chained);
            f(sig, info, context);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(chained);
            f(sig);
        }
    }
}
