#!/usr/bin/env python3
"""The operator's forward against PyTorch on the CPU: eager (torch.cat of x[r], then F.linear, as the
seed's Model computes it), the same function under torch.compile, and gather_linear.forward, under
torch.no_grad. Candidates take turns, each run timed by the wall clock (about 10 GFLOP or at most
2000 calls); median of seven rounds. Results are checked against eager first. ATen's threads are
the op's (OpenMP, torch.get_num_threads()).

    python3 bench/cpu_comparison.py [out.csv]
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import gather_linear
from torch_bench import device_name, wall_clock_us, write_csv

SHAPES = [  # R, B, H, K, dtype
    (4, 12, 32, 56, torch.float32),
    (8, 1024, 128, 1024, torch.float32),
    (26, 512, 64, 1024, torch.float32),
    (4, 12, 32, 56, torch.bfloat16),
    (8, 256, 128, 512, torch.bfloat16),
    (8, 1024, 128, 1024, torch.bfloat16),
]


def eager(x, weight, bias):
    return F.linear(torch.cat([x[r] for r in range(x.shape[0])], dim=-1), weight, bias)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/cpu_comparison.csv")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = []
    print(f"{'R':>3} {'B':>6} {'H':>4} {'K':>5} {'dtype':>9} {'eager us':>10} {'compile us':>10} {'ours us':>10} "
          f"{'eager/ours':>10} {'compile/ours':>12}")
    for R, B, H, K, dtype in SHAPES:
        torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
        candidates = {"eager": eager, "torch_compile": torch.compile(eager, dynamic=False),
                      "gather_linear": gather_linear.forward}
        sets = [(torch.rand(R, B, H, dtype=dtype) - 0.5, torch.rand(K, R * H, dtype=dtype) - 0.5,
                 torch.rand(K, dtype=dtype) - 0.5) for _ in range(2)]
        calls = min(2000, max(2, int(1e10 / (2 * B * K * R * H))))
        with torch.no_grad():
            reference = eager(*sets[0]).float()
            for name, fn in candidates.items():
                error = (fn(*sets[0]).float() - reference).abs().max().item() / reference.abs().max().item()
                assert error < 2e-2, f"{name} disagrees with eager on {(R, B, H, K)} {dtype}: {error:.2e}"
                wall_clock_us(fn, sets, len(sets))  # warm-up (and compilation)
            times = {name: [] for name in candidates}
            for _ in range(args.rounds):
                for name, fn in candidates.items():
                    times[name].append(wall_clock_us(fn, sets, calls))
        us = {name: statistics.median(t) for name, t in times.items()}
        ours = us["gather_linear"]
        rows.append(dict(R=R, B=B, H=H, K=K, dtype=str(dtype).removeprefix("torch."), eager_us=f"{us['eager']:.2f}",
                         torch_compile_us=f"{us['torch_compile']:.2f}", gather_linear_us=f"{ours:.2f}",
                         eager_over_ours=f"{us['eager'] / ours:.3f}",
                         compile_over_ours=f"{us['torch_compile'] / ours:.3f}", device=device_name("cpu"),
                         threads=torch.get_num_threads(), torch=torch.__version__))
        row = rows[-1]
        print(f"{R:>3} {B:>6} {H:>4} {K:>5} {row['dtype']:>9} {us['eager']:>10.1f} {us['torch_compile']:>10.1f} "
              f"{ours:>10.1f} {row['eager_over_ours']:>10} {row['compile_over_ours']:>12}", flush=True)
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
