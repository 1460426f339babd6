// Framework-free description of a strided tensor in host or CUDA memory (in the spirit of DLPack).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace gather_linear {

// Every dtype a framework may hand us; the operator supports the floating ones it lists in
// docs (float32/float16/bfloat16 everywhere, float64 on the CPU) and rejects the rest by name.
enum class DType : std::uint8_t { float32, float16, bfloat16, float64, int32, int64, uint8 };

std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; ignored on the CPU

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && (a.type == DeviceType::cpu || a.index == b.index);
  }
};

std::string to_string(Device device);

// Ranks beyond this cannot be described (the operator itself needs at most 3).
inline constexpr int kMaxRank = 8;

// A view does not own its memory. Sizes and strides are in elements; strides may be any
// non-negative value (a permuted or sliced framework tensor maps onto a view without a copy).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::float32;
  Device device{};
  int rank = 0;
  std::array<std::int64_t, kMaxRank> sizes{};
  std::array<std::int64_t, kMaxRank> strides{};

  // Throws gather_linear::Error if the two lists differ in length or exceed kMaxRank.
  static TensorView strided(const void* data, DType dtype, Device device,
                            std::initializer_list<std::int64_t> sizes,
                            std::initializer_list<std::int64_t> strides);
  // Row-major (C-contiguous) strides.
  static TensorView contiguous(const void* data, DType dtype, Device device,
                               std::initializer_list<std::int64_t> sizes);

  std::int64_t size(int dim) const { return sizes[static_cast<std::size_t>(dim)]; }
  std::int64_t stride(int dim) const { return strides[static_cast<std::size_t>(dim)]; }
  // Product of sizes; only meaningful once validation has ruled out overflow.
  std::int64_t numel() const;
};

}  // namespace gather_linear
