// The CPU kernels' innermost SIMD loops keep their vectors in registers. Whether they do is the
// compiler's register allocation, which a change elsewhere in a function can tip: at 6077838 the
// float64 micro-kernel that stores its tiles straight to y had the store's two bias vectors loaded
// before its reduction loop, and the loop then reloaded its weight vectors from the stack every
// step (14 stack operands among 24 multiply-adds), at 0.73x the speed of the same loop without
// them. No functional test notices such a loop; this one reads the library's own disassembly
// (objdump) and names the loops that touch the stack.
//
// A loop is a backward jump within one function whose body holds no other jump and no call, and
// it counts where it holds at least kMinMultiplyAdds 512-bit or 256-bit FMAs (or AVX512-BF16 pair
// dot products). AVX2's direct tiles are left out: with 16 registers their 4 x 4 tile spills by
// design, and the 4 x 3 one that fits in float32 spills a little for 16-bit inputs, which need
// registers to widen them (Tiling's comment on kDirectFittedWeightRows).
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace {

constexpr int kMinMultiplyAdds = 8;

struct Instruction {
  unsigned long long address = 0;
  std::string text;      // mnemonic and operands
  std::size_t function;  // index into the function names
};

struct Disassembly {
  std::vector<std::string> functions;
  std::vector<Instruction> instructions;
};

Disassembly disassemble(const std::string& objdump, const std::string& library) {
  const std::string command = objdump + " -d --no-show-raw-insn -C '" + library + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  Disassembly d;
  if (!pipe) return d;
  static const std::regex function_line(R"(^([0-9a-f]+) <(.*)>:$)");
  static const std::regex instruction_line(R"(^\s*([0-9a-f]+):\s+(.*)$)");
  std::string line;
  char buffer[4096];
  std::smatch m;
  while (std::fgets(buffer, sizeof buffer, pipe.get())) {
    line.assign(buffer);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (std::regex_match(line, m, function_line)) {
      d.functions.push_back(m[2]);
    } else if (!d.functions.empty() && std::regex_match(line, m, instruction_line)) {
      d.instructions.push_back({std::stoull(m[1], nullptr, 16), m[2], d.functions.size() - 1});
    }
  }
  return d;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A jump's target where it is a direct one ("jne    1010f0 <...>"), else 0.
unsigned long long jump_target(const std::string& text) {
  if (text.empty() || text[0] != 'j') return 0;
  const auto space = text.find_first_of(" \t");
  if (space == std::string::npos) return 0;
  const auto start = text.find_first_not_of(" \t", space);
  if (start == std::string::npos || !std::isxdigit(static_cast<unsigned char>(text[start]))) return 0;
  return std::stoull(text.substr(start), nullptr, 16);
}

bool avx2_direct_tile(const std::string& function) {
  return function.find("avx2::direct_tile<") != std::string::npos;
}

TEST(CpuCodegen, InnerLoopsKeepTheirVectorsInRegisters) {
  const Disassembly d = disassemble(GATHER_LINEAR_OBJDUMP, GATHER_LINEAR_LIBRARY);
  ASSERT_FALSE(d.instructions.empty()) << "no disassembly from " << GATHER_LINEAR_OBJDUMP << " of "
                                       << GATHER_LINEAR_LIBRARY;
  int loops = 0;
  for (std::size_t end = 0; end < d.instructions.size(); ++end) {
    const unsigned long long target = jump_target(d.instructions[end].text);
    if (target == 0 || target >= d.instructions[end].address) continue;
    std::size_t begin = end;
    while (begin > 0 && d.instructions[begin - 1].function == d.instructions[end].function &&
           d.instructions[begin - 1].address >= target)
      --begin;
    if (d.instructions[begin].address != target) continue;  // not a loop within this function
    int multiply_adds = 0, stack_vector_operands = 0;
    bool innermost = true;
    for (std::size_t i = begin; i < end && innermost; ++i) {
      const std::string& text = d.instructions[i].text;
      innermost = jump_target(text) == 0 && !starts_with(text, "j") && !starts_with(text, "call");
      const bool vector = text.find("%zmm") != std::string::npos || text.find("%ymm") != std::string::npos ||
                          text.find("%xmm") != std::string::npos;
      const bool multiply_add = starts_with(text, "vfmadd") || starts_with(text, "vdpbf16ps");
      if (multiply_add && (text.find("%zmm") != std::string::npos || text.find("%ymm") != std::string::npos))
        ++multiply_adds;
      if (vector && (text.find("(%rsp)") != std::string::npos || text.find("(%rbp)") != std::string::npos))
        ++stack_vector_operands;
    }
    const std::string& function = d.functions[d.instructions[end].function];
    if (!innermost || multiply_adds < kMinMultiplyAdds || avx2_direct_tile(function)) continue;
    ++loops;
    EXPECT_EQ(stack_vector_operands, 0)
        << "a loop of " << multiply_adds << " vector multiply-adds at 0x" << std::hex << target << std::dec
        << " reads or writes vectors on the stack " << stack_vector_operands << " times a pass, in " << function;
  }
  // The engine's micro-kernels alone make over two hundred such loops: far fewer means the
  // disassembly was not read as this test expects, not that the loops are gone.
  EXPECT_GE(loops, 100) << "innermost SIMD loops found in " << GATHER_LINEAR_LIBRARY;
}

}  // namespace
