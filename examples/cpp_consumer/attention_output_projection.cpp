// An attention block's output projection, as a program outside the project writes it against the
// installed library: the heads' outputs sit head-major, (B, R, H) for B tokens, R heads of H
// values, and y = W · concat_r(x[r]) + bias reads them in place through an (R, B, H) view.
// Runs on the CPU, then on the first GPU if there is one; checks each result against a sum in
// double, shows the error a wrong argument gets, and exits non-zero on any mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gather_linear/gather_linear.hpp>

namespace gl = gather_linear;

namespace {

constexpr std::int64_t R = 8, B = 40, H = 64, K = 256;  // heads, tokens, head width, outputs

// The largest difference from y = W · concat + bias, summed in double, relative to the largest |y|.
double relative_error(const std::vector<float>& y, const std::vector<float>& heads, const std::vector<float>& weight,
                      const std::vector<float>& bias) {
  double worst = 0, largest = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t k = 0; k < K; ++k) {
      double sum = bias[k];
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t h = 0; h < H; ++h)
          sum += double(heads[(b * R + r) * H + h]) * weight[k * R * H + r * H + h];
      worst = std::fmax(worst, std::fabs(sum - y[b * K + k]));
      largest = std::fmax(largest, std::fabs(sum));
    }
  return worst / largest;
}

// The views forward() takes: x (R, B, H) over head-major memory (b's stride R·H, r's H), weight
// (K, R·H), bias (K), y (B, K).
struct Views {
  gl::TensorView x, weight, y;
  std::optional<gl::TensorView> bias;
};
Views views_over(const float* heads, const float* weight, const float* bias, float* y, gl::Device device) {
  return {gl::TensorView::strided(heads, gl::DType::float32, device, {R, B, H}, {H, R * H, 1}),
          gl::TensorView::contiguous(weight, gl::DType::float32, device, {K, R * H}),
          gl::TensorView::contiguous(y, gl::DType::float32, device, {B, K}),
          gl::TensorView::contiguous(bias, gl::DType::float32, device, {K})};
}

bool check(const char* where, std::string_view kernel, double error) {
  const bool ok = error <= 1e-5;  // float32 accuracy
  std::printf("%-4s %-22s relative error %.2e %s\n", where, std::string(kernel).c_str(), error, ok ? "ok" : "TOO LARGE");
  return ok;
}

// A device copy of `host`, or nullptr where the allocation or the copy failed.
template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, host.size() * sizeof(T)) != cudaSuccess) return nullptr;
  if (cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) {
    cudaFree(p);
    return nullptr;
  }
  return static_cast<T*>(p);
}

}  // namespace

int main() {
  std::vector<float> heads(B * R * H), weight(K * R * H), bias(K), y(B * K);
  std::uint32_t state = 1;
  for (auto* v : {&heads, &weight, &bias})
    for (float& e : *v) e = float((state = state * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;

  bool ok = true;
  const Views cpu = views_over(heads.data(), weight.data(), bias.data(), y.data(), gl::Device::cpu());
  gl::forward(cpu.x, cpu.weight, cpu.bias, cpu.y);
  ok &= check("cpu", gl::select_kernel(cpu.x, cpu.weight, cpu.bias, cpu.y), relative_error(y, heads, weight, bias));

  // A wrong argument: an Error naming it, and y left as it was.
  try {
    Views wrong = cpu;
    wrong.weight = gl::TensorView::contiguous(weight.data(), gl::DType::float32, gl::Device::cpu(), {K, R * H - 1});
    gl::forward(wrong.x, wrong.weight, wrong.bias, wrong.y);
    std::printf("a wrong weight was accepted\n");
    ok = false;
  } catch (const gl::Error& e) {
    std::printf("wrong weight -> gather_linear::Error, argument \"%s\": %s\n", e.argument().c_str(), e.what());
    ok &= e.argument() == "weight";
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda (no GPU here)\n");
    return ok ? 0 : 1;
  }
  float* d_heads = device_copy(heads);
  float* d_weight = device_copy(weight);
  float* d_bias = device_copy(bias);
  float* d_y = device_copy(std::vector<float>(B * K, NAN));
  if (!d_heads || !d_weight || !d_bias || !d_y) {
    std::printf("cuda: could not copy the operands to the GPU\n");
    return 1;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const Views gpu = views_over(d_heads, d_weight, d_bias, d_y, gl::Device::cuda(0));
  try {
    gl::forward(gpu.x, gpu.weight, gpu.bias, gpu.y, gl::Options{}, stream);  // enqueued on `stream`
  } catch (const gl::Error& e) {  // a GPU older than compute capability 8.0, for one
    std::printf("cuda: %s\n", e.what());
    return 1;
  }
  std::fill(y.begin(), y.end(), NAN);
  cudaMemcpyAsync(y.data(), d_y, y.size() * sizeof(float), cudaMemcpyDeviceToHost, stream);
  const cudaError_t status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) {
    std::printf("cuda: %s\n", cudaGetErrorString(status));
    return 1;
  }
  ok &= check("cuda", gl::select_kernel(gpu.x, gpu.weight, gpu.bias, gpu.y), relative_error(y, heads, weight, bias));
  cudaStreamDestroy(stream);
  for (float* p : {d_heads, d_weight, d_bias, d_y}) cudaFree(p);
  return ok ? 0 : 1;
}
