//! A counting global allocator over the system's, for figures that do not move
//! with the machine's load: bytes and blocks allocated, bytes live and their
//! peak. The binary installs it with the `count-alloc` feature; then W2
//! reports `alloc_bytes_per_agent`, `allocs_per_agent` and
//! `live_peak_kib_per_agent` (the CI's regression guard reads the first).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The counting allocator (install with `#[global_allocator]`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counting;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static BLOCKS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocCounts {
    /// Bytes allocated so far (a reallocation counts its new size).
    pub allocated: u64,
    /// Blocks allocated so far (a reallocation counts one).
    pub blocks: u64,
    /// Bytes live now.
    pub live: u64,
    /// The most bytes live at once since the last [`reset_peak`].
    pub peak: u64,
}

fn grew(bytes: usize) {
    let bytes = bytes as u64;
    ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
    BLOCKS.fetch_add(1, Ordering::Relaxed);
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator with the caller's
// arguments; the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        new
    }
}

impl Counting {
    /// Marks the counters as fed; call once from `main` of a binary that
    /// installed this allocator.
    pub fn installed(&self) {
        INSTALLED.store(true, Ordering::SeqCst);
    }
}

/// The counters now; `None` unless this process's allocator is [`Counting`].
pub fn counts() -> Option<AllocCounts> {
    INSTALLED.load(Ordering::SeqCst).then(|| AllocCounts {
        allocated: ALLOCATED.load(Ordering::Relaxed),
        blocks: BLOCKS.load(Ordering::Relaxed),
        live: LIVE.load(Ordering::Relaxed),
        peak: PEAK.load(Ordering::Relaxed),
    })
}

/// Starts a new peak from the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters as the allocator moves them (called directly: the test
    /// binary's global allocator is the system's, so nothing else moves them).
    #[test]
    fn counts_what_is_allocated_live_and_at_peak() {
        let read = || AllocCounts {
            allocated: ALLOCATED.load(Ordering::Relaxed),
            blocks: BLOCKS.load(Ordering::Relaxed),
            live: LIVE.load(Ordering::Relaxed),
            peak: PEAK.load(Ordering::Relaxed),
        };
        reset_peak();
        let before = read();
        let small = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: layouts of non-zero size; each pointer is freed once with
        // the layout (and size) it was last allocated with.
        unsafe {
            let a = Counting.alloc(small);
            let b = Counting.realloc(a, small, 300);
            assert_eq!(read().live - before.live, 300);
            Counting.dealloc(b, Layout::from_size_align(300, 8).unwrap());
        }
        let after = read();
        assert_eq!(after.allocated - before.allocated, 400);
        assert_eq!(after.blocks - before.blocks, 2);
        assert_eq!(after.live, before.live);
        assert_eq!(after.peak - before.live, 300);
        assert_eq!(counts(), None, "not installed as this binary's allocator");
    }
}
