#!/usr/bin/env python3
"""The operator against PyTorch on large problems (GPU): eager (torch.cat, then F.linear, as the
seed's Model computes it) and the same function under torch.compile.

Every candidate gets the same rotating input sets (more than twice the L2 in total) and runs back
to back, timed by a CUDA-event pair around the whole run (per-forward time; at these sizes the GPU
is the bound, not the launches). The candidates take turns, five rounds, and each reports its
median round, so clock and power drift touch them alike. Results are checked against eager first.
float32 runs twice: exact (PyTorch's default, no TF32) and with TF32 allowed for both sides.

    python3 bench/torch_comparison.py [out.csv]
"""

import argparse

import torch
import torch.nn.functional as F

import gather_linear
from torch_bench import per_call_us, rotating_input_sets, write_csv

SHAPES = [(8, 8192, 512, 4096), (32, 8192, 128, 4096), (4, 16384, 64, 8192)]
MODES = [  # name, dtype, TF32 allowed (float16 runs the same kernels as bfloat16)
    ("bfloat16", torch.bfloat16, False),
    ("tf32", torch.float32, True),
    ("float32", torch.float32, False),
]


def eager(x, weight, bias):
    return F.linear(torch.cat([x[r] for r in range(x.shape[0])], dim=-1), weight, bias)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/torch_comparison.csv")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    print(f"{'R':>3} {'B':>6} {'H':>4} {'K':>5} {'mode':>9} {'eager us':>9} {'compile us':>10} {'ours us':>9} "
          f"{'eager/ours':>10} {'compile/ours':>12}")
    for R, B, H, K in SHAPES:
        for mode, dtype, tf32 in MODES:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
            compiled = torch.compile(eager, dynamic=False)
            candidates = {"eager": eager, "torch_compile": compiled, "gather_linear": gather_linear.forward}
            sets = rotating_input_sets(R, B, H, K, dtype, minimum=2)
            calls = max(10, int(2e12 / (2 * B * K * R * H)))  # about 2 TFLOP per timed run
            with torch.no_grad():
                reference = eager(*sets[0])
                scale = reference.abs().max().item()
                for name, fn in candidates.items():
                    error = (fn(*sets[0]).float() - reference.float()).abs().max().item() / scale
                    assert error < 2e-2, f"{name} disagrees with eager on {(R, B, H, K)} {mode}: {error:.2e}"
                    per_call_us(fn, sets, len(sets))  # warm-up (and compilation)
                rounds = {name: [] for name in candidates}
                for _ in range(args.rounds):
                    for name, fn in candidates.items():
                        rounds[name].append(per_call_us(fn, sets, calls))
            us = {name: sorted(t)[len(t) // 2] for name, t in rounds.items()}
            rows.append(dict(R=R, B=B, H=H, K=K, mode=mode, eager_us=f"{us['eager']:.2f}",
                             torch_compile_us=f"{us['torch_compile']:.2f}", gather_linear_us=f"{us['gather_linear']:.2f}",
                             eager_over_ours=f"{us['eager'] / us['gather_linear']:.3f}",
                             compile_over_ours=f"{us['torch_compile'] / us['gather_linear']:.3f}",
                             device=torch.cuda.get_device_name(0), torch=torch.__version__))
            print(f"{R:>3} {B:>6} {H:>4} {K:>5} {mode:>9} {us['eager']:>9.1f} {us['torch_compile']:>10.1f} "
                  f"{us['gather_linear']:>9.1f} {rows[-1]['eager_over_ours']:>10} {rows[-1]['compile_over_ours']:>12}")
            del sets
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
