#!/usr/bin/env python3
"""What recording the autograd graph adds to a forward's host time, for the op and for ATen's
F.linear on the pre-concatenated input (its generated graph node, the yardstick): each called
back to back with gradients enabled (weight and bias require grad; the graph is freed with the
output) and under torch.no_grad(), in alternating runs; per candidate the median over the rounds
of (grad-enabled time - no_grad time), so that the kernels' own time, the same in both modes,
cancels. Beside it, a whole step: the forward and y.backward() into weight's and bias's .grad.
Small problems only: there this is a visible share of a call.

Each run is the wall clock over back-to-back calls (on the GPU ended by a synchronize; the
problems are small enough that the host, not the GPU, sets the pace). One package per process:
to compare two builds of the op, run the script under each with a --label and compare the rows.

    python3 bench/autograd_overhead.py [out.csv] [--device cpu|cuda] [--dtype D] [--label L] [--rounds N]
"""

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F

import gather_linear
from torch_bench import concatenate, device_name, write_csv

SHAPES = [(4, 12, 32, 56), (8, 64, 64, 128)]  # the seed problem, and a slightly larger one
CALLS = 5000


def run_us(fn, args, mode, device):
    """µs per call of fn in `mode`: "no_grad", "grad" (the forward, graph recorded) or "step" (the
    forward, then backward)."""
    if mode == "step":
        grad_y = torch.ones_like(fn(*args))

        def call():
            fn(*args).backward(grad_y)
    else:
        def call():
            fn(*args)
    with torch.no_grad() if mode == "no_grad" else contextlib.nullcontext():
        for _ in range(100):
            call()
        if device == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(CALLS):
            call()
        if device == "cuda":
            torch.cuda.synchronize()
    return (time.perf_counter() - began) * 1e6 / CALLS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/autograd_overhead.csv")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "float16"), default="float32")
    parser.add_argument("--label", default="", help="names the build in the CSV")
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)  # the host's own work, without thread hand-offs

    rows = []
    print(f"{'R':>3} {'B':>4} {'H':>4} {'K':>4} {'candidate':>14} {'no_grad us':>10} {'grad us':>8} {'added us':>9} "
          f"{'step us':>8}")
    dtype = getattr(torch, args.dtype)
    for R, B, H, K in SHAPES:
        x = torch.rand(R, B, H, device=args.device, dtype=dtype) - 0.5
        weight = (torch.rand(K, R * H, device=args.device, dtype=dtype) - 0.5).requires_grad_()
        bias = (torch.rand(K, device=args.device, dtype=dtype) - 0.5).requires_grad_()
        concatenated = concatenate(x).contiguous()
        candidates = {
            "gather_linear": (gather_linear.forward, (x, weight, bias)),
            "F.linear": (F.linear, (concatenated, weight, bias)),
        }
        modes = ("no_grad", "grad", "step")
        times = {(name, mode): [] for name in candidates for mode in modes}
        for _ in range(args.rounds):
            for name, (fn, fn_args) in candidates.items():
                for mode in modes:
                    times[(name, mode)].append(run_us(fn, fn_args, mode, args.device))
        for name in candidates:
            no_grad, grad = times[(name, "no_grad")], times[(name, "grad")]
            added = statistics.median(g - n for g, n in zip(grad, no_grad))
            row = dict(R=R, B=B, H=H, K=K, dtype=args.dtype, candidate=name, label=args.label,
                       no_grad_us=f"{statistics.median(no_grad):.2f}", grad_us=f"{statistics.median(grad):.2f}",
                       added_us=f"{added:.2f}", step_us=f"{statistics.median(times[(name, 'step')]):.2f}",
                       device=device_name(args.device), torch=torch.__version__)
            rows.append(row)
            print(f"{R:>3} {B:>4} {H:>4} {K:>4} {name:>14} {row['no_grad_us']:>10} {row['grad_us']:>8} "
                  f"{row['added_us']:>9} {row['step_us']:>8}")
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
