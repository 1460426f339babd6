#!/bin/bash
# Compares the CPU engine (src/cpu/gather_gemm.cpp and what it includes), or with KERNEL=amx or dot
# the bfloat16 kernels (src/cpu/bf16_gemm.cpp), at a git revision with the working tree's, both in
# one process, alternating call by call (timing.cpp says why). The kernel alone: no dispatcher, no
# validation; x contiguous unless MODE=head_major, with a bias.
#   bench/cpu_engine_ab/run.sh BASE_REV R,B,H,K[,f32|f64|f16|bf16] ...     env: PAIRS (40), OMP_NUM_THREADS,
#   MODE (forward; head_major: the forward on x viewed from a (B, R, H) buffer; grad_x or
#   grad_weight: the backward's problem for that gradient, x head-major),
#   KERNEL (engine, or its avx2 or portable build; amx or dot: bfloat16's kernels)
# One CSV row a shape: R,B,H,K,dtype,pairs,base_us,working_us,ratio_q25,ratio_median,ratio_q75,
# outputs (ratio: the working tree's time over the base's in each pair; "same" where both wrote the
# same bits). A revision against an unchanged tree measures the noise.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
base=$1
shift
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/a" "$work/b"
git -C "$root" archive "$base" src include | tar -x -C "$work/a"
cp -r "$root/src" "$root/include" "$work/b/"
# The library's own flags (CMakeLists.txt, Release).
flags=(-O3 -DNDEBUG -fopenmp -std=gnu++20 -ffp-contract=fast -Wno-psabi)
objects=()
for side in a b; do
  # Each copy in its own namespace, so that both link into one program.
  copy=(-I"$work/$side/include" -I"$work/$side/src" -Dgather_linear=gather_linear_engine_$side
        -DENGINE_ENTRY=engine_${side}_run)
  for unit in "$work/$side/src/cpu/gather_gemm.cpp" "$work/$side/src/cpu/bf16_gemm.cpp" "$work/$side/src/core/error.cpp" \
              "$root/bench/cpu_engine_ab/engine_copy.cpp"; do
    objects+=("$work/$side-$(basename "$unit" .cpp).o")
    c++ "${flags[@]}" "${copy[@]}" -c "$unit" -o "${objects[-1]}"
  done
done
for unit in "$root/bench/cpu_engine_ab/timing.cpp" "$root/src/core/tensor_view.cpp" "$root/src/core/error.cpp"; do
  objects+=("$work/timing-$(basename "$unit" .cpp).o")
  c++ "${flags[@]}" -I"$root/include" -I"$root/src" -I"$root/bench" -I"$root/tools" -c "$unit" -o "${objects[-1]}"
done
c++ -fopenmp "${objects[@]}" -o "$work/cpu_engine_ab"
echo "R,B,H,K,dtype,pairs,base_us,working_us,ratio_q25,ratio_median,ratio_q75,outputs"
for shape in "$@"; do
  IFS=, read -r R B H K dtype <<< "$shape"
  "$work/cpu_engine_ab" "$R" "$B" "$H" "$K" "${dtype:-f32}" "${PAIRS:-40}" "${MODE:-forward}"
done
