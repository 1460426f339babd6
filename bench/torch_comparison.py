#!/usr/bin/env python3
"""The operator against PyTorch on large problems (GPU): eager (torch.cat, then F.linear, as the
seed's Model computes it), the same function under torch.compile, and F.linear alone on an input
concatenated beforehand (GEMM-only: the arithmetic with the gather for free).

Two timing protocols, the candidates taking turns in both so clock and power drift touch them alike:
- back_to_back: each candidate runs over rotating input sets (more than twice the L2 in total),
  timed by one CUDA-event pair around the whole run (about 10 TFLOP of work); nine rounds, median
  round. The GPU never idles,
  so under sustained tensor-core load its clocks settle low (power-bound), as in training.
- isolated: the KernelBench protocol (synchronize, write a 256 MB buffer to flush L2, event pair
  around one forward, synchronize); median of the trials. The GPU idles between forwards, so each
  one starts at boost clocks; the flush hides the host's launch time.
Results are checked against eager first. float32 runs twice: exact (PyTorch's default, no TF32) and
with TF32 allowed for every candidate.

    python3 bench/torch_comparison.py [out.csv] [--modes bfloat16 ...] [--protocols isolated ...]
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import gather_linear
from torch_bench import (concatenate, eager_forward, isolated_call_us, l2_flush_buffer, median_us, per_call_us,
                         rotating_input_sets, write_csv)

SHAPES = [(8, 8192, 512, 4096), (32, 8192, 128, 4096), (4, 16384, 64, 8192)]
MODES = {  # name: dtype, TF32 allowed (float16 runs the same kernels as bfloat16)
    "bfloat16": (torch.bfloat16, False),
    "tf32": (torch.float32, True),
    "float32": (torch.float32, False),
}
PROTOCOLS = ("back_to_back", "isolated")
ISOLATED_TRIALS = 40


def isolated_us(candidates, trials, flush_buffer):
    """Median over trials of one forward timed alone after an L2 flush, candidates in turn."""
    times = {name: [] for name in candidates}
    for trial in range(trials):
        for name, (fn, sets) in candidates.items():
            times[name].append(isolated_call_us(fn, sets[trial % len(sets)], flush_buffer))
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/torch_comparison.csv")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    parser.add_argument("--rounds", type=int, default=9, help="back_to_back rounds")
    args = parser.parse_args()
    flush_buffer = l2_flush_buffer()
    rows = []
    print(f"{'protocol':>12} {'R':>3} {'B':>6} {'H':>4} {'K':>5} {'mode':>9} {'eager us':>9} {'compile us':>10} "
          f"{'GEMM-only us':>12} {'ours us':>9} {'eager/ours':>10} {'compile/ours':>12} {'GEMM-only/ours':>14}")
    for R, B, H, K in SHAPES:
        for mode in args.modes:
            dtype, tf32 = MODES[mode]
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
            compiled = torch.compile(eager_forward, dynamic=False)
            sets = rotating_input_sets(R, B, H, K, dtype, minimum=2)
            concatenated_sets = [(concatenate(x), weight, bias) for x, weight, bias in sets]
            candidates = {"eager": (eager_forward, sets), "torch_compile": (compiled, sets),
                          "gemm_only": (F.linear, concatenated_sets), "gather_linear": (gather_linear.forward, sets)}
            calls = max(10, int(1e13 / (2 * B * K * R * H)))  # about 10 TFLOP per back-to-back run
            with torch.no_grad():
                reference = eager_forward(*sets[0])
                scale = reference.abs().max().item()
                for name, (fn, fn_sets) in candidates.items():
                    error = (fn(*fn_sets[0]).float() - reference.float()).abs().max().item() / scale
                    assert error < 2e-2, f"{name} disagrees with eager on {(R, B, H, K)} {mode}: {error:.2e}"
                    per_call_us(fn, fn_sets, len(fn_sets))  # warm-up (and compilation)
                for protocol in args.protocols:
                    if protocol == "back_to_back":
                        us = median_us(candidates, args.rounds, calls)
                    else:
                        us = isolated_us(candidates, ISOLATED_TRIALS, flush_buffer)
                    ours = us["gather_linear"]
                    rows.append(dict(protocol=protocol, R=R, B=B, H=H, K=K, mode=mode,
                                     eager_us=f"{us['eager']:.2f}", torch_compile_us=f"{us['torch_compile']:.2f}",
                                     gemm_only_us=f"{us['gemm_only']:.2f}", gather_linear_us=f"{ours:.2f}",
                                     eager_over_ours=f"{us['eager'] / ours:.3f}",
                                     compile_over_ours=f"{us['torch_compile'] / ours:.3f}",
                                     gemm_only_over_ours=f"{us['gemm_only'] / ours:.3f}",
                                     device=torch.cuda.get_device_name(0), torch=torch.__version__))
                    row = rows[-1]
                    print(f"{protocol:>12} {R:>3} {B:>6} {H:>4} {K:>5} {mode:>9} {us['eager']:>9.1f} "
                          f"{us['torch_compile']:>10.1f} {us['gemm_only']:>12.1f} {ours:>9.1f} "
                          f"{row['eager_over_ours']:>10} {row['compile_over_ours']:>12} "
                          f"{row['gemm_only_over_ours']:>14}", flush=True)
            del sets, concatenated_sets, candidates
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
