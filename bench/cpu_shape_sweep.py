#!/usr/bin/env python3
"""The CPU forward against eager PyTorch (torch.cat of x[r], then F.linear) over random problems:
the shapes no hand-picked list holds. R, B, H and K are drawn log-uniformly (R 1-64, B 1-2048,
H 1-256, K 1-4096; up to 1.5 GFLOP), the dtype among float32 (twice as often), bfloat16,
float16 and float64, x contiguous or head-major (a (B, R, H) buffer viewed as (R, B, H)). Each
problem is checked against the exact result (eager in float64) first, then both are timed by the
wall clock in turn (runs of about 30 ms, at most 2000 calls; seven rounds, median), under
torch.no_grad. A problem
follows from the seed and its index alone, so two builds can be compared on the same problems.
--problem times the named problems instead (dtype f32, f64, f16 or bf16; layout contiguous or
head-major), e.g. a class the sweep found slow, measured the same way.

    python3 bench/cpu_shape_sweep.py [out.csv] [--seed 2] [--problems 300]
    python3 bench/cpu_shape_sweep.py out.csv --problem 1,1055,1,419,bf16,head-major [--problem ...]
"""

import argparse
import math
import random
import statistics

import torch

import gather_linear
from torch_bench import device_name, dtype_name, eager_forward, median_us, wall_clock_us, write_csv

DTYPES = [torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float64]
MAX_FLOPS = 1.5e9
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def log_uniform(draw, lo, hi):
    return max(lo, min(hi, int(math.exp(draw.uniform(math.log(lo), math.log(hi + 1))))))


def problem(seed, index):
    """(R, B, H, K, dtype, head_major) of problem `index` of the sweep `seed`."""
    draw = random.Random(seed * 1_000_003 + index)
    while True:
        R, B, H, K = log_uniform(draw, 1, 64), log_uniform(draw, 1, 2048), log_uniform(draw, 1, 256), log_uniform(draw, 1, 4096)
        if 2 * R * B * H * K <= MAX_FLOPS:
            return R, B, H, K, draw.choice(DTYPES), draw.random() < 0.4


DTYPE_NAMES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}


def named_problem(spec):
    """(R, B, H, K, dtype, head_major) from "R,B,H,K,dtype[,contiguous|head-major]"."""
    fields = spec.split(",")
    if len(fields) not in (5, 6) or fields[4] not in DTYPE_NAMES or fields[5:] not in ([], ["contiguous"], ["head-major"]):
        raise argparse.ArgumentTypeError(f"expected R,B,H,K,f32|f64|f16|bf16[,contiguous|head-major], got {spec!r}")
    R, B, H, K = (int(f) for f in fields[:4])
    return R, B, H, K, DTYPE_NAMES[fields[4]], fields[5:] == ["head-major"]


def input_set(R, B, H, K, dtype, head_major):
    x = torch.rand(B, R, H, dtype=dtype).transpose(0, 1) if head_major else torch.rand(R, B, H, dtype=dtype)
    return x - 0.5, torch.rand(K, R * H, dtype=dtype) - 0.5, torch.rand(K, dtype=dtype) - 0.5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/cpu_shape_sweep.csv")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--problem", type=named_problem, action="append", default=[],
                        help="R,B,H,K,dtype[,layout]: time this problem (repeatable) instead of random ones")
    args = parser.parse_args()
    problems = args.problem or [problem(args.seed, index) for index in range(args.problems)]
    rows = []
    with torch.no_grad():
        for index, (R, B, H, K, dtype, head_major) in enumerate(problems):
            sets = [input_set(R, B, H, K, dtype, head_major) for _ in range(2)]
            reference = eager_forward(*[t.double() for t in sets[0]])
            error = ((gather_linear.forward(*sets[0]).double() - reference).abs().max() /
                     reference.abs().max().clamp_min(1e-30)).item()
            assert error <= TOLERANCE[dtype], f"problem {index} {(R, B, H, K)} {dtype}: relative error {error:.2e}"
            candidates = {"eager": (eager_forward, sets), "gather_linear": (gather_linear.forward, sets)}
            # warm-up, then as many calls a run as take the slower candidate about 30 ms
            slowest_us = max(wall_clock_us(fn, sets, 2) for fn, _ in candidates.values())
            calls = max(1, min(2000, int(30e3 / slowest_us)))
            us = median_us(candidates, args.rounds, calls, wall_clock_us)
            rows.append(dict(index=index, R=R, B=B, H=H, K=K, dtype=dtype_name(dtype),
                             layout="head_major" if head_major else "contiguous", eager_us=f"{us['eager']:.2f}",
                             gather_linear_us=f"{us['gather_linear']:.2f}",
                             eager_over_ours=f"{us['eager'] / us['gather_linear']:.3f}", relative_error=f"{error:.1e}",
                             threads=torch.get_num_threads(), device=device_name("cpu"), torch=torch.__version__))
            print(",".join(str(v) for v in list(rows[-1].values())[:10]), flush=True)
    ratios = [float(r["eager_over_ours"]) for r in rows]
    slower = sorted((float(r["eager_over_ours"]), r["index"]) for r in rows if float(r["eager_over_ours"]) < 1)
    print(f"eager / ours over {len(rows)} problems: median {statistics.median(ratios):.2f}, "
          f"lowest {min(ratios):.3f}; {len(slower)} below 1: " + ", ".join(f"#{i} {v:.2f}" for v, i in slower))
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
