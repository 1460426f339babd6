#include "gather_linear/error.hpp"

namespace gather_linear {

Error::Error(ErrorCode code, std::string argument, const std::string& message)
    : std::runtime_error(argument + ": " + message), code_(code), argument_(std::move(argument)) {}

}  // namespace gather_linear
