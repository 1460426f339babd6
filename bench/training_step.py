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

    python3 bench/training_step.py [out.csv] [--device cpu] [--dtypes float32 ...]
"""

import argparse
import time

import torch

import gather_linear
from torch_bench import (AGAINST_PYTORCH_HEADER, against_pytorch_line, against_pytorch_row, dtype_name, eager_forward,
                         median_us, rotating_set_count, timer_for, write_csv)

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
    (8, 1024, 128, 1024, torch.bfloat16),
    (26, 512, 64, 1024, torch.bfloat16),
    (16, 512, 32, 512, torch.float16),
]


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
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16", "float16"),
                        default=["float32", "bfloat16", "float16"])
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    timer = timer_for(args.device)
    rows = []
    print(AGAINST_PYTORCH_HEADER)
    for R, B, H, K, dtype in SHAPES if on_gpu else CPU_SHAPES:
        if dtype_name(dtype) not in args.dtypes:
            continue
        began = time.monotonic()
        torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
        sets = input_sets(R, B, H, K, dtype, args.device)
        candidates = {"eager": (step(eager_forward), sets),
                      "torch_compile": (step(torch.compile(eager_forward, dynamic=False)), sets),
                      "gather_linear": (step(gather_linear.forward), sets)}
        work = 6e12 if on_gpu else 2e10  # FLOP per run, at most 2000 steps
        calls = min(2000, max(20 if on_gpu else 2, int(work / (6 * B * K * R * H))))
        reference = candidates["eager"][0](*sets[0])
        for name, (fn, _) in candidates.items():
            for got, want, what in zip(fn(*sets[0]), reference, ("x", "weight", "bias")):
                error = (got.float() - want.float()).abs().max().item() / want.float().abs().max().item()
                assert error < 2e-2, f"{name}: grad of {what} disagrees with eager on {(R, B, H, K)}: {error:.2e}"
            timer(fn, sets, len(sets))  # warm-up (and compilation)
        us = median_us(candidates, args.rounds, calls, timer)
        rows.append(against_pytorch_row(R, B, H, K, dtype, us, args.device))
        print(f"{against_pytorch_line(rows[-1])}   ({time.monotonic() - began:.0f} s)", flush=True)
        del sets, candidates
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
