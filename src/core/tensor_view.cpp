#include "gather_linear/tensor_view.hpp"

#include <string>

#include "gather_linear/error.hpp"

namespace gather_linear {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::uint8: return "uint8";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::float16:
    case DType::bfloat16: return 2;
    case DType::float64:
    case DType::int64: return 8;
    case DType::uint8: return 1;
    default: return 4;
  }
}

std::string to_string(Device device) {
  return device.type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(device.index);
}

TensorView TensorView::strided(const void* data, DType dtype, Device device,
                               std::initializer_list<std::int64_t> sizes,
                               std::initializer_list<std::int64_t> strides) {
  if (sizes.size() != strides.size())
    throw Error(ErrorCode::invalid_argument, "strides",
                "expected as many strides as sizes (" + std::to_string(sizes.size()) + "), got " +
                    std::to_string(strides.size()));
  if (sizes.size() > static_cast<std::size_t>(kMaxRank))
    throw Error(ErrorCode::invalid_argument, "sizes",
                "expected rank <= " + std::to_string(kMaxRank) + ", got " + std::to_string(sizes.size()));
  TensorView view;
  view.data = const_cast<void*>(data);  // a view of an input is never written through
  view.dtype = dtype;
  view.device = device;
  view.rank = static_cast<int>(sizes.size());
  std::size_t d = 0;
  for (auto s : sizes) view.sizes[d++] = s;
  d = 0;
  for (auto s : strides) view.strides[d++] = s;
  return view;
}

TensorView TensorView::contiguous(const void* data, DType dtype, Device device,
                                  std::initializer_list<std::int64_t> sizes) {
  TensorView view = strided(data, dtype, device, sizes, sizes);
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.strides[static_cast<std::size_t>(d)] = stride;
    stride *= view.sizes[static_cast<std::size_t>(d)];
  }
  return view;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= size(d);
  return n;
}

}  // namespace gather_linear
