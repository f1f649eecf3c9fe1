//! Memory budgets of script calls: one per call, and one for all calls at once.
//!
//! Every allocation of the process goes through [`Accounting`], which notes what a thread
//! allocates and frees while it runs a call: the script's own heap (Luau's allocator and Rhai's
//! values both come here), the conversion of its request and of its response. A call's net
//! allocation counts against its own limit (`limits.maxMemoryBytes`) and, beyond a small floor
//! every call has, against the operator-wide pool (`metascript run --script-memory`), drawn in
//! chunks so the pool's counter is touched rarely. The engines' progress callbacks stop a call
//! once either is exceeded, like any other budget: an allocation itself is never refused (Rust
//! aborts the process when one fails), so a call overshoots by at most one operation's worth.
//! Work that cannot be stopped midway draws its worst case from the pool before it starts
//! ([`Reservation`]).

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a call may allocate before it draws on the shared pool: small hooks never wait on (or
/// fail because of) other calls' memory.
pub(crate) const FLOOR_BYTES: usize = 4 * 1024 * 1024;
/// The default size of the shared pool: with 16 workers' floors, the caches of a thousand
/// targets and the hostile suite's scripts, the operator peaked under 200 MiB
/// (docs/performance.md, "Hostile neighbours"); responses being applied are not counted here
/// (docs/operations.md, "Sizing script memory").
pub(crate) const DEFAULT_SCRIPT_MEMORY: usize = 256 * 1024 * 1024;
/// The pool is drawn from and returned to in chunks of this size.
const CHUNK: usize = 256 * 1024;

/// A call's peak is recorded each time it grows by this much (`status.usage`): often enough to
/// tell a 100 KiB call from a 1 MiB one, rarely enough to stay off the allocator's fast path.
pub(crate) const PEAK_STEP: usize = 16 * 1024;

/// Unbounded until the operator sets it: offline commands run one call at a time, and a test
/// process runs many unrelated calls at once.
static POOL_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
static POOL_USED: AtomicUsize = AtomicUsize::new(0);

/// Sets the size of the pool every call beyond its floor draws from (`metascript run`).
pub(crate) fn set_pool_limit(bytes: usize) {
    POOL_LIMIT.store(bytes, Ordering::Relaxed);
}

pub(crate) fn pool_limit() -> usize {
    POOL_LIMIT.load(Ordering::Relaxed)
}

/// Bytes of the pool drawn by the calls running now.
pub(crate) fn pool_used() -> usize {
    POOL_USED.load(Ordering::Relaxed)
}

/// What a call whose own limit is `limit` may allocate if it starts now: its floor (the call
/// running on this thread's, if any) and what the pool has left, up to its limit.
pub(crate) fn allowance(limit: usize) -> usize {
    let left = pool_limit().saturating_sub(pool_used());
    let floor = CALL.with(|call| call.tracked.get().floor);
    limit.min(floor.saturating_add(left))
}

/// What the current call may still allocate before it goes over a budget, and which budget
/// that is; `None` outside a call. The progress checks stop a call only after an allocation,
/// so what is about to be copied into a script whole (a `list()` result) is weighed here first.
pub(crate) fn room() -> Option<(usize, Exceeded)> {
    CALL.with(|call| {
        if !call.active.get() {
            return None;
        }
        let tracked = call.tracked.get();
        let held = call.net.get().max(0) as usize;
        let own = tracked.limit.saturating_sub(held);
        let pool = tracked
            .floor
            .saturating_add(tracked.drawn)
            .saturating_add(pool_limit().saturating_sub(pool_used()))
            .saturating_sub(held);
        Some(if own <= pool {
            (own, Exceeded::Call)
        } else {
            (pool, Exceeded::Pool)
        })
    })
}

/// Which memory budget a call exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// Its own limit.
    Call,
    /// The pool all calls share.
    Pool,
}

/// What the pool logic keeps of a call ([`account`]); touched only when the call crosses a
/// threshold, not on every allocation.
#[derive(Clone, Copy)]
struct Tracked {
    /// Bytes allocated minus bytes freed since the call began.
    net: isize,
    /// The call's own limit.
    limit: usize,
    /// Bytes drawn from the pool (in chunks), beyond the floor.
    drawn: usize,
    /// What the call holds before it draws on the pool: [`FLOOR_BYTES`], or its whole limit
    /// for a call apart from the pool ([`CallMemory::enter_apart`]).
    floor: usize,
    /// The most the call held at once (as seen at the thresholds).
    peak: isize,
    exceeded: Option<Exceeded>,
}

const IDLE: Tracked = Tracked {
    net: 0,
    limit: usize::MAX,
    floor: FLOOR_BYTES,
    drawn: 0,
    peak: 0,
    exceeded: None,
};

/// The call the current thread runs, as the allocator sees it. The allocator's path is a flag,
/// an addition and two comparisons; the pool is touched only when the call's net allocation
/// crosses `high` (its limit, or the end of what it drew) or `low` (chunks to give back).
struct CallCell {
    active: Cell<bool>,
    net: Cell<isize>,
    high: Cell<isize>,
    low: Cell<isize>,
    exceeded: Cell<Option<Exceeded>>,
    tracked: Cell<Tracked>,
}

thread_local! {
    // Const-initialized and without a destructor: the allocator may read it at any time, even
    // while the thread is being torn down.
    static CALL: CallCell = const {
        CallCell {
            active: Cell::new(false),
            net: Cell::new(0),
            high: Cell::new(isize::MAX),
            low: Cell::new(isize::MIN),
            exceeded: Cell::new(None),
            tracked: Cell::new(IDLE),
        }
    };
}

#[inline]
fn track(delta: isize) {
    CALL.with(|call| {
        if !call.active.get() {
            return;
        }
        let net = call.net.get() + delta;
        call.net.set(net);
        if net > call.high.get() || net <= call.low.get() {
            crossed(call, net);
        }
    });
}

/// The slow path: the call crossed a threshold.
#[cold]
fn crossed(call: &CallCell, net: isize) {
    let mut tracked = call.tracked.get();
    tracked.net = net;
    account(
        &mut tracked,
        0,
        &POOL_USED,
        POOL_LIMIT.load(Ordering::Relaxed),
    );
    call.tracked.set(tracked);
    call.exceeded.set(tracked.exceeded);
    set_thresholds(call, &tracked);
}

/// Counts `delta` bytes against a call and, beyond its floor, against the pool.
fn account(call: &mut Tracked, delta: isize, pool: &AtomicUsize, pool_limit: usize) {
    call.net += delta;
    call.peak = call.peak.max(call.net);
    if call.net > 0 && call.net as usize > call.limit {
        call.exceeded.get_or_insert(Exceeded::Call);
    }
    // Past its own limit a call is stopped already: what it holds beyond that is not drawn.
    let held = call
        .net
        .min(isize::try_from(call.limit).unwrap_or(isize::MAX));
    let beyond_floor = (held - call.floor as isize).max(0) as usize;
    while beyond_floor > call.drawn {
        let used = pool.fetch_add(CHUNK, Ordering::Relaxed) + CHUNK;
        call.drawn += CHUNK;
        if used > pool_limit {
            call.exceeded.get_or_insert(Exceeded::Pool);
            break;
        }
    }
    // Chunks go back with some slack, so a call hovering at a boundary does not draw and
    // return the same chunk on every allocation.
    while call.drawn >= beyond_floor + 2 * CHUNK {
        pool.fetch_sub(CHUNK, Ordering::Relaxed);
        call.drawn -= CHUNK;
    }
}

fn set_thresholds(call: &CallCell, tracked: &Tracked) {
    let high = match tracked.exceeded {
        // Stopped already: only giving chunks back is left to do.
        Some(_) => isize::MAX,
        // Growing past the peak by a step crosses too, so the peak is known to a step.
        None => (tracked.floor + tracked.drawn)
            .min(tracked.limit)
            .min(tracked.peak.max(0) as usize + PEAK_STEP) as isize,
    };
    let low = match tracked.drawn.checked_sub(2 * CHUNK) {
        Some(kept) => (tracked.floor + kept) as isize,
        None => isize::MIN,
    };
    call.high.set(high);
    call.low.set(low);
}

/// The process's allocator: mimalloc (glibc's per-thread arenas fragment the caches' many
/// small JSON maps), with the accounting above.
pub(crate) struct Accounting;

// SAFETY: every method forwards to `MiMalloc` unchanged; `track` only reads and writes a
// thread-local `Cell` and atomics, and never allocates.
unsafe impl GlobalAlloc for Accounting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { MiMalloc.alloc(layout) };
        if !ptr.is_null() {
            track(layout.size() as isize);
        }
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { MiMalloc.alloc_zeroed(layout) };
        if !ptr.is_null() {
            track(layout.size() as isize);
        }
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(ptr, layout) };
        track(-(layout.size() as isize));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { MiMalloc.realloc(ptr, layout, new_size) };
        if !moved.is_null() {
            track(new_size as isize - layout.size() as isize);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Accounting = Accounting;

/// `mi_option_purge_delay` in mimalloc 3's option enum (its header, `mimalloc.h`; the sys crate
/// names only some of the options). A test pins it by the option's documented default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// mimalloc 3's default purge delay, in milliseconds (its `options.c`).
#[cfg(test)]
const DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// The environment variables mimalloc reads the purge delay from (the second is its old name).
const PURGE_DELAY_VARIABLES: [&str; 2] = ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"];

/// Has pages freed by the allocator returned to the OS at once rather than a second later. A sync
/// pass frees response bodies and plans in bursts, and with the delay they pile up on top of
/// the caches: 10,000 map pairs peak at 179 MiB RSS with it and 163 MiB without, for no CPU
/// that the map benchmark can tell apart. A delay set in the environment is kept (mimalloc has
/// read it at load, so this is the only place that can honour it).
pub(crate) fn return_freed_pages_promptly() {
    if PURGE_DELAY_VARIABLES
        .iter()
        .any(|variable| std::env::var_os(variable).is_some())
    {
        return;
    }
    // SAFETY: an in-range integer option, which mimalloc's API lets a program set at run time.
    // Its purge code may read it on another thread meanwhile; an aligned word is read whole, so
    // that reader sees the old delay or the new one.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
}

/// Counts the current thread's allocations against a call's budgets until dropped.
pub(crate) struct CallMemory {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CallMemory {
    /// Starts counting for a call whose own limit is `limit` bytes.
    pub(crate) fn enter(limit: usize) -> CallMemory {
        CallMemory::start(Tracked { limit, ..IDLE })
    }

    /// [`CallMemory::enter`] for a call that never draws on the shared pool: what holds its
    /// kind of call bounds it already (the admission webhook's tests: a small limit each, a
    /// few at once), and it must neither wait for production hooks' memory nor take theirs.
    pub(crate) fn enter_apart(limit: usize) -> CallMemory {
        CallMemory::start(Tracked {
            limit,
            // Counted as an isize by the allocator's thresholds.
            floor: limit.min(isize::MAX as usize),
            ..IDLE
        })
    }

    fn start(tracked: Tracked) -> CallMemory {
        CALL.with(|call| {
            call.tracked.set(tracked);
            call.net.set(0);
            call.exceeded.set(None);
            set_thresholds(call, &tracked);
            call.active.set(true);
        });
        CallMemory {
            _not_send: std::marker::PhantomData,
        }
    }

    /// The budget the call exceeded, if any. Read on every script operation: one byte.
    pub(crate) fn exceeded() -> Option<Exceeded> {
        CALL.with(|call| call.exceeded.get())
    }

    /// The most the call held at once, in bytes (as seen when it crossed its thresholds).
    pub(crate) fn peak() -> usize {
        CALL.with(|call| call.tracked.get().peak.max(call.net.get()).max(0) as usize)
    }
}

impl Drop for CallMemory {
    fn drop(&mut self) {
        let drawn = CALL.with(|call| {
            call.active.set(false);
            let drawn = call.tracked.get().drawn;
            call.tracked.set(IDLE);
            call.exceeded.set(None);
            call.high.set(isize::MAX);
            call.low.set(isize::MIN);
            drawn
        });
        POOL_USED.fetch_sub(drawn, Ordering::Relaxed);
    }
}

/// Pool memory drawn whole before work the allocator's accounting cannot stop midway (parsing
/// a webhook's answer: the parser cannot be interrupted, and its result may be many times the
/// size of its input), and given back when dropped.
#[must_use = "the bytes go back to the pool when the reservation is dropped"]
#[derive(Debug)]
pub(crate) struct Reservation {
    drawn: usize,
}

/// Why a [`Reservation`] could not be drawn: what it wanted from the pool beyond the floor,
/// what the pool had free then, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShort {
    pub wanted: usize,
    pub free: usize,
    pub limit: usize,
}

impl Reservation {
    /// Draws what work needing at most `bytes` takes beyond the floor every call has, all or
    /// nothing. On a thread running a call ([`CallMemory`]) it draws nothing: the allocator
    /// counts that call's work already, and counting it twice would stop it at half its budget.
    pub(crate) fn draw(bytes: usize) -> Result<Reservation, PoolShort> {
        if CALL.with(|call| call.active.get()) {
            return Ok(Reservation { drawn: 0 });
        }
        reserve(&POOL_USED, pool_limit(), bytes.saturating_sub(FLOOR_BYTES))
            .map(|drawn| Reservation { drawn })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        POOL_USED.fetch_sub(self.drawn, Ordering::Relaxed);
    }
}

/// Adds `wanted` to `pool` if it stays within `limit`. Unlike a call's chunks, which may
/// overshoot by one allocation, a reservation is never granted in part.
fn reserve(pool: &AtomicUsize, limit: usize, wanted: usize) -> Result<usize, PoolShort> {
    pool.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
        used.checked_add(wanted).filter(|&total| total <= limit)
    })
    .map(|_| wanted)
    .map_err(|used| PoolShort {
        wanted,
        free: limit.saturating_sub(used),
        limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_is_the_one_named() {
        // A delay from the environment is what mimalloc holds then.
        let expected = PURGE_DELAY_VARIABLES
            .iter()
            .find_map(|variable| std::env::var(variable).ok()?.parse().ok())
            .unwrap_or(DEFAULT_PURGE_DELAY_MS);
        // SAFETY: reads an integer option.
        let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(
            delay, expected,
            "option {PURGE_DELAY} is not mimalloc 3's purge delay (a new mimalloc, or its v2 \
             feature, moved the enum or the default)"
        );
    }

    #[test]
    fn a_call_over_its_own_limit_is_noticed_and_outside_a_call_nothing_is_counted() {
        let kept: Vec<u8> = Vec::with_capacity(8 * 1024 * 1024);
        assert_eq!(CallMemory::exceeded(), None, "no call, nothing counted");
        let call = CallMemory::enter(1024 * 1024);
        let small = vec![0u8; 1000];
        assert_eq!(CallMemory::exceeded(), None);
        let big = vec![0u8; 2 * 1024 * 1024];
        assert_eq!(CallMemory::exceeded(), Some(Exceeded::Call));
        assert!(CallMemory::peak() >= 2 * 1024 * 1024);
        drop((small, big, call));
        assert_eq!(CallMemory::exceeded(), None, "the next call starts afresh");
        drop(kept);
    }

    /// A call apart from the pool (admission's tests) is held to its own limit and draws
    /// nothing, however full the pool is.
    #[test]
    fn a_call_apart_from_the_pool_draws_nothing_and_is_held_to_its_limit() {
        let pool = AtomicUsize::new(0);
        let full = 0;
        let limit = 16 * 1024 * 1024;
        let mut apart = Tracked {
            limit,
            floor: limit,
            ..IDLE
        };
        account(&mut apart, limit as isize, &pool, full);
        assert_eq!((pool.load(Ordering::Relaxed), apart.exceeded), (0, None));
        account(&mut apart, 1, &pool, full);
        assert_eq!(apart.exceeded, Some(Exceeded::Call));
        assert_eq!(pool.load(Ordering::Relaxed), 0);
        let call = CallMemory::enter_apart(limit);
        assert_eq!(allowance(limit), limit, "its floor is its limit");
        drop(call);
    }

    #[test]
    fn room_is_what_the_call_may_still_allocate_under_its_own_limit() {
        assert_eq!(room(), None, "outside a call");
        let call = CallMemory::enter(1024 * 1024);
        let (before, binding) = room().expect("in a call");
        assert_eq!(binding, Exceeded::Call, "its own limit is below the floor");
        assert!(before <= 1024 * 1024 && before > 1000 * 1024, "{before}");
        let held = vec![0u8; 512 * 1024];
        let (after, _) = room().expect("in a call");
        assert!(
            before - after >= 512 * 1024 && before - after < 520 * 1024,
            "{before} -> {after}"
        );
        drop((held, call));
        assert_eq!(room(), None);
    }

    /// The pool's logic on a pool of its own (the process's is shared by every test running).
    #[test]
    fn calls_beyond_their_floor_share_the_pool_and_the_one_that_overfills_it_is_stopped() {
        let pool = AtomicUsize::new(0);
        let limit = 8 * CHUNK;
        let fresh = || Tracked {
            limit: usize::MAX,
            ..IDLE
        };
        let (mut small, mut big) = (fresh(), fresh());
        account(&mut small, FLOOR_BYTES as isize - 1000, &pool, limit);
        assert_eq!(
            pool.load(Ordering::Relaxed),
            0,
            "within its floor, a call draws nothing"
        );
        account(&mut big, (FLOOR_BYTES + 6 * CHUNK) as isize, &pool, limit);
        assert_eq!(pool.load(Ordering::Relaxed), 6 * CHUNK);
        assert_eq!(big.exceeded, None);
        account(&mut big, (3 * CHUNK) as isize, &pool, limit);
        assert_eq!(
            big.exceeded,
            Some(Exceeded::Pool),
            "the call that overfills it"
        );
        account(&mut small, 100, &pool, limit);
        assert_eq!(
            small.exceeded, None,
            "a call within its floor is never stopped"
        );
        // Freeing gives chunks back, keeping one as slack.
        let drawn = big.drawn;
        account(&mut big, -((4 * CHUNK) as isize), &pool, limit);
        assert!(big.drawn < drawn && big.drawn >= drawn - 4 * CHUNK);
        assert_eq!(pool.load(Ordering::Relaxed), big.drawn + small.drawn);
    }

    #[test]
    fn a_call_draws_on_the_process_pool_and_gives_it_back_when_it_ends() {
        let call = CallMemory::enter(usize::MAX);
        let held = vec![1u8; FLOOR_BYTES + 4 * CHUNK];
        let drawn = CALL.with(|call| call.tracked.get().drawn);
        assert!(drawn >= 3 * CHUNK, "drawn beyond the floor: {drawn}");
        drop(held);
        drop(call);
        assert_eq!(CALL.with(|call| call.tracked.get().drawn), 0);
    }

    #[test]
    fn a_reservation_is_drawn_whole_or_not_at_all() {
        let pool = AtomicUsize::new(0);
        assert_eq!(reserve(&pool, 10 * CHUNK, 6 * CHUNK), Ok(6 * CHUNK));
        assert_eq!(
            reserve(&pool, 10 * CHUNK, 5 * CHUNK),
            Err(PoolShort {
                wanted: 5 * CHUNK,
                free: 4 * CHUNK,
                limit: 10 * CHUNK
            })
        );
        assert_eq!(
            pool.load(Ordering::Relaxed),
            6 * CHUNK,
            "nothing drawn in part"
        );
        assert_eq!(reserve(&pool, 10 * CHUNK, 4 * CHUNK), Ok(4 * CHUNK));
    }

    #[test]
    fn a_reservation_draws_beyond_the_floor_and_nothing_inside_a_call() {
        let within = Reservation::draw(FLOOR_BYTES).unwrap();
        assert_eq!(within.drawn, 0, "within the floor, nothing is drawn");
        let beyond = Reservation::draw(FLOOR_BYTES + CHUNK).unwrap();
        assert_eq!(beyond.drawn, CHUNK);
        drop((within, beyond));
        let call = CallMemory::enter(usize::MAX);
        let inside = Reservation::draw(FLOOR_BYTES + 64 * CHUNK).unwrap();
        assert_eq!(inside.drawn, 0, "the call's own accounting counts it");
        drop((inside, call));
    }
}
