// Host buffers for the CLI's and the benchmarks' CPU runs, aligned as PyTorch aligns its CPU
// tensors (64 bytes). A std::vector's heap block starts 16 or 48 bytes past a cache line, so that
// most 64-byte loads span two lines: 16 bytes past one, the seed problem took 1.125x the time,
// AMX's direct path against a weight whose rows lie 8 KB apart 1.07-1.13x, the packed paths
// 0.98-1.02x (cpu_kernel_ab --offset-b 16, 2-core AMX VM, fifty-second session).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace gather_linear {

inline constexpr std::size_t kHostBufferAlignment = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kHostBufferAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kHostBufferAlignment}); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using HostVector = std::vector<T, CacheLineAllocator<T>>;
using HostBytes = HostVector<std::byte>;

}  // namespace gather_linear
