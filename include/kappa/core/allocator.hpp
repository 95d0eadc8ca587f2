// kappa/core/allocator.hpp - keeping the memory a forward pass frees for the
// next one.
//
// A prompt's forward pass allocates its activations layer by layer (a
// 128-token prompt through a 1024-wide LLaMA layer: 0.5-3 MB per product) and
// frees them before the next layer. glibc's malloc serves such sizes from its
// heap, and returns the free top of the heap to the kernel once it exceeds a
// trim threshold (128 KB until a freed mapping raises it). The next layer's
// allocations then get fresh pages, which the kernel clears on first touch:
// on a 246 M LLaMA in Q4_0 that was 120 000 page faults and half of a
// 128-token prefill (290 tokens/s against 660 with the memory kept;
// benchmarks/README.md, "Prefill and the allocator").
//
// retain_freed_memory() asks the allocator to keep it: allocations up to
// 32 MiB from the heap, and up to 64 MiB of free heap kept for reuse. It is
// the process's setting, so kappa never changes it on its own in the header
// library; runtime::Model::load does (runtime::LoadOptions::
// retain_freed_memory), as does kappa-generate. Elsewhere than glibc it does
// nothing and returns false.
#pragma once

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kappa {

/// Bytes up to which retain_freed_memory() has malloc serve allocations
/// from its heap (glibc's largest automatic value).
inline constexpr std::size_t kRetainedAllocationBytes = std::size_t{32} << 20;
/// Free heap that retain_freed_memory() has malloc keep rather than return.
inline constexpr std::size_t kRetainedFreeBytes = std::size_t{64} << 20;

/// Has the C library's allocator keep freed memory for reuse, so that each
/// layer of a forward pass reuses the pages the previous one freed instead
/// of faulting in fresh ones (see the file comment): glibc's
/// mallopt(M_MMAP_THRESHOLD, kRetainedAllocationBytes) and
/// mallopt(M_TRIM_THRESHOLD, kRetainedFreeBytes). A process-wide setting;
/// the process then holds up to kRetainedFreeBytes more than it uses.
/// \returns whether the allocator took both settings (false without glibc,
/// and under AddressSanitizer, whose allocator ignores them).
inline bool retain_freed_memory() noexcept {
#if defined(__GLIBC__)
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kRetainedAllocationBytes)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kRetainedFreeBytes)) == 1;
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace kappa
