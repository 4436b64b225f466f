#pragma once
// Process-wide allocator settings for long runs (searches, training steps).

namespace dtsim::sim {

/// Keeps freed memory inside the process (Note [Freed memory stays]): glibc
/// otherwise returns large blocks to the kernel on every free and the next
/// use faults them in again. Call it once, early; a no-op without glibc.
void retain_freed_memory();

}  // namespace dtsim::sim
