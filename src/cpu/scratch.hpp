// Grow-only, 64-byte aligned host scratch for the CPU engines; each thread keeps its own
// (thread_local instances), so concurrent callers never share one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

namespace gather_linear::cpu {

class Scratch {
 public:
  void* bytes(std::size_t n) {
    if (n > capacity_) {
      capacity_ = std::max(n, capacity_ * 2);
      data_.reset(static_cast<std::byte*>(::operator new(capacity_, std::align_val_t{64})));
    }
    return data_.get();
  }

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, AlignedDelete> data_;
  std::size_t capacity_ = 0;
};

}  // namespace gather_linear::cpu
