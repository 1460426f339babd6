#!/usr/bin/env python3
"""A training step through the operator against PyTorch (GPU): the forward and the backward to x,
weight and bias (torch.autograd.grad with a given dY), for eager (torch.cat of x[r], then F.linear,
as the seed's Model computes it), the same function under torch.compile, and gather_linear.forward.
x is contiguous (R, B, H), e.g. R feature tensors stacked (for a head-major x the operator's
backward needs no concatenation at all).

Candidates take turns over rotating input sets (more than twice the L2 in total), each run timed by
one CUDA-event pair (back to back, about 6 TFLOP of work or 2000 steps); nine rounds, median round. Gradients are
checked against eager's first. On the CPU (--device cpu) smaller shapes run, timed by the wall
clock over about 20 GFLOP per run.

    python3 bench/training_step.py [out.csv] [--device cpu]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import gather_linear
from torch_bench import device_name, per_call_us, rotating_set_count, wall_clock_us, write_csv

SHAPES = [  # R, B, H, K, dtype
    (4, 12, 32, 56, torch.float32),
    (8, 1024, 128, 1024, torch.float32),
    (8, 1024, 128, 1024, torch.bfloat16),
    (26, 4096, 64, 1024, torch.bfloat16),
    (32, 8192, 128, 4096, torch.bfloat16),
    (8, 8192, 512, 4096, torch.bfloat16),
]
CPU_SHAPES = [
    (4, 12, 32, 56, torch.float32),
    (8, 1024, 128, 1024, torch.float32),
    (26, 512, 64, 1024, torch.float32),
    (8, 256, 128, 512, torch.bfloat16),
]


def eager(x, weight, bias):
    return F.linear(torch.cat([x[r] for r in range(x.shape[0])], dim=-1), weight, bias)


def step(forward):
    def run(x, weight, bias, grad_y):
        return torch.autograd.grad(forward(x, weight, bias), (x, weight, bias), grad_y)
    return run


def input_sets(R, B, H, K, dtype, device):
    # Each set's tensors and the gradients written for them.
    set_bytes = (2 * R * B * H + 2 * K * R * H + 2 * B * K) * torch.finfo(dtype).bits // 8
    count = rotating_set_count(set_bytes, 2, 32) if device == "cuda" else 2

    def leaf(*shape):
        return (torch.rand(*shape, device=device, dtype=dtype) - 0.5).requires_grad_()
    return [(leaf(R, B, H), leaf(K, R * H), leaf(K), torch.rand(B, K, device=device, dtype=dtype) - 0.5)
            for _ in range(count)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/training_step.csv")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    timed_us = per_call_us if on_gpu else wall_clock_us
    rows = []
    print(f"{'R':>3} {'B':>6} {'H':>4} {'K':>5} {'dtype':>9} {'eager us':>9} {'compile us':>10} {'ours us':>9} "
          f"{'eager/ours':>10} {'compile/ours':>12}")
    for R, B, H, K, dtype in SHAPES if on_gpu else CPU_SHAPES:
        began = time.monotonic()
        torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
        candidates = {"eager": step(eager), "torch_compile": step(torch.compile(eager, dynamic=False)),
                      "gather_linear": step(gather_linear.forward)}
        sets = input_sets(R, B, H, K, dtype, args.device)
        work = 6e12 if on_gpu else 2e10  # FLOP per run, at most 2000 steps
        calls = min(2000, max(20 if on_gpu else 2, int(work / (6 * B * K * R * H))))
        reference = candidates["eager"](*sets[0])
        for name, fn in candidates.items():
            for got, want, what in zip(fn(*sets[0]), reference, ("x", "weight", "bias")):
                error = (got.float() - want.float()).abs().max().item() / want.float().abs().max().item()
                assert error < 2e-2, f"{name}: grad of {what} disagrees with eager on {(R, B, H, K)}: {error:.2e}"
            timed_us(fn, sets, len(sets))  # warm-up (and compilation)
        times = {name: [] for name in candidates}
        for _ in range(args.rounds):
            for name, fn in candidates.items():
                times[name].append(timed_us(fn, sets, calls))
        us = {name: statistics.median(t) for name, t in times.items()}
        ours = us["gather_linear"]
        rows.append(dict(R=R, B=B, H=H, K=K, dtype=str(dtype).removeprefix("torch."), eager_us=f"{us['eager']:.2f}",
                         torch_compile_us=f"{us['torch_compile']:.2f}", gather_linear_us=f"{ours:.2f}",
                         eager_over_ours=f"{us['eager'] / ours:.3f}",
                         compile_over_ours=f"{us['torch_compile'] / ours:.3f}",
                         device=device_name(args.device), torch=torch.__version__))
        row = rows[-1]
        print(f"{R:>3} {B:>6} {H:>4} {K:>5} {row['dtype']:>9} {us['eager']:>9.1f} {us['torch_compile']:>10.1f} "
              f"{ours:>9.1f} {row['eager_over_ours']:>10} {row['compile_over_ours']:>12}"
              f"   ({time.monotonic() - began:.0f} s)", flush=True)
        del sets, candidates
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
