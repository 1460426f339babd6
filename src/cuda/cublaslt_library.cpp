#include "cuda/cublaslt_library.hpp"

#include <dlfcn.h>

#include <string>

#include "gather_linear/error.hpp"

namespace gather_linear::cuda {
namespace {

// The library of the major version built against (its functions' signatures are that version's).
std::string cublaslt_soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

void* open_cublaslt() {
  const std::string soname = cublaslt_soname();
  if (void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  std::string why = dlerror();
  // Where the build found the toolkit, as the RUNPATH of a linked library would have it.
  const std::string in_toolkit = std::string(GATHER_LINEAR_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* library = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  why += "; " + std::string(dlerror());
  throw Error(ErrorCode::cuda_error, "cuBLASLt", "cannot load " + soname + ": " + why);
}

CublasLt load_cublaslt() {
  void* library = open_cublaslt();  // kept open for the process, as a linked library would be
  CublasLt functions;
  std::string missing;
#define GATHER_LINEAR_CUBLASLT_RESOLVE(name)                                         \
  functions.name = reinterpret_cast<decltype(functions.name)>(dlsym(library, #name)); \
  if (functions.name == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #name;
  GATHER_LINEAR_CUBLASLT_FUNCTIONS(GATHER_LINEAR_CUBLASLT_RESOLVE)
#undef GATHER_LINEAR_CUBLASLT_RESOLVE
  if (!missing.empty())
    throw Error(ErrorCode::cuda_error, "cuBLASLt", cublaslt_soname() + " lacks " + missing);
  return functions;
}

}  // namespace

const CublasLt& cublaslt() {
  // A throwing initialiser leaves it uninitialised: the next call tries again.
  static const CublasLt functions = load_cublaslt();
  return functions;
}

}  // namespace gather_linear::cuda
