// The one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace gather_linear {

enum class ErrorCode {
  invalid_argument,  // a tensor's rank, shape, dtype, device, stride or pointer is wrong
  unsupported,       // valid input that no kernel handles (e.g. float64 on CUDA, a forced kernel)
  cuda_error,        // the CUDA runtime or a CUDA library reported a failure
};

// what() reads "<argument>: <message>", e.g. "weight: expected size(1) == R*H = 128, got 127".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, const std::string& message);

  ErrorCode code() const noexcept { return code_; }
  // The offending argument's name ("x", "weight", "bias", "y", "options.kernel", ...).
  const std::string& argument() const noexcept { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

}  // namespace gather_linear
