//! A cache prefetch hint, the one piece of `unsafe` the simulator's hot loop uses.

/// Hints the CPU to load the cache line at `p` (no effect on results; never dereferences:
/// any address is harmless, dangling or past the end of an allocation included).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is a hint that never
        // faults nor reads into the program, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
