// One copy of the CPU engine for cpu_engine_ab.sh: compiled with -Dgather_linear=<namespace>
// beside that copy's gather_gemm.cpp, bf16_gemm.cpp and error.cpp, so that two copies (two source
// trees) link into one program. ENGINE_ENTRY names the C entry point the timing program calls; the
// environment's KERNEL picks what it runs: the SIMD engine (engine, the default; avx2 or portable:
// its build for that instruction set), or for bfloat16 AMX (amx) or the AVX512-BF16 dot products
// (dot).
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/problem.hpp"
#include "cpu/cpu_kernels.hpp"

extern "C" std::size_t cpu_engine_ab_dtype_size(int dtype);

namespace gather_linear {
// The one library function the engine needs beyond its own file and error.cpp: the timing
// program's (the two copies' DType enumerations are the same).
std::size_t dtype_size(DType dtype) { return cpu_engine_ab_dtype_size(static_cast<int>(dtype)); }
}  // namespace gather_linear

extern "C" void ENGINE_ENTRY(const void* problem) {
  gather_linear::Problem p;
  std::memcpy(&p, problem, sizeof p);  // the same layout in both copies
  static const char* const kernel_variable = std::getenv("KERNEL");
  static const std::string_view kernel = kernel_variable ? kernel_variable : "engine";
  if (kernel == "amx")
    gather_linear::cpu::run_amx_bf16(p);
  else if (kernel == "dot")
    gather_linear::cpu::run_bf16_dot(p);
  else if (kernel == "avx2")
    gather_linear::cpu::run_gather_gemm(p, gather_linear::cpu::SimdLevel::avx2);
  else if (kernel == "portable")
    gather_linear::cpu::run_gather_gemm(p, gather_linear::cpu::SimdLevel::portable);
  else
    gather_linear::cpu::run_gather_gemm(p);
}
