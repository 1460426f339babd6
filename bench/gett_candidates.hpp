// GETT configurations compiled only into the benchmark (bench/CMakeLists.txt lists them), so that
// tuning can compare them with the library's own without shipping them.
#pragma once

#include <vector>

#include "cuda/gett_kernel.hpp"

namespace gather_linear::bench {

std::vector<cuda::gett::Variant>& gett_candidates();
bool register_gett_candidate(const cuda::gett::Variant& variant);

}  // namespace gather_linear::bench
