#!/usr/bin/env python3
"""The operator's forward against PyTorch on the CPU: eager (torch.cat of x[r], then F.linear, as the
seed's Model computes it), the same function under torch.compile, and gather_linear.forward, under
torch.no_grad. Candidates take turns, each run timed by the wall clock (about 10 GFLOP or at most
2000 calls); median of seven rounds. Results are checked against eager first. ATen's threads are
the op's (OpenMP, torch.get_num_threads()).

    python3 bench/cpu_comparison.py [out.csv]
"""

import argparse

import torch

import gather_linear
from torch_bench import (AGAINST_PYTORCH_HEADER, against_pytorch_line, against_pytorch_row, eager_forward, median_us,
                         wall_clock_us, write_csv)

SHAPES = [  # R, B, H, K, dtype
    (4, 12, 32, 56, torch.float32),
    (8, 1024, 128, 1024, torch.float32),
    (26, 512, 64, 1024, torch.float32),
    (8, 256, 128, 512, torch.float16),
    (8, 1024, 128, 1024, torch.float16),
    (4, 12, 32, 56, torch.bfloat16),
    (8, 256, 128, 512, torch.bfloat16),
    (8, 1024, 128, 1024, torch.bfloat16),
    (26, 512, 64, 1024, torch.bfloat16),
    (4, 4096, 256, 1024, torch.bfloat16),
    # short batches (decoding a few tokens): the weight is read more than it is reused
    (32, 1, 128, 4096, torch.float32),
    (32, 16, 128, 4096, torch.float32),
    (32, 1, 128, 4096, torch.bfloat16),
    (32, 16, 128, 4096, torch.bfloat16),
    (32, 1, 128, 4096, torch.float16),
    (32, 16, 128, 4096, torch.float16),
    # float64 (MKL's dgemm for eager)
    (4, 12, 32, 56, torch.float64),
    (8, 1024, 128, 1024, torch.float64),
    (26, 512, 64, 1024, torch.float64),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/cpu_comparison.csv")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rows = []
    print(AGAINST_PYTORCH_HEADER)
    for R, B, H, K, dtype in SHAPES:
        torch._dynamo.reset()  # compiled for this shape and dtype alone (no dynamic shapes)
        sets = [(torch.rand(R, B, H, dtype=dtype) - 0.5, torch.rand(K, R * H, dtype=dtype) - 0.5,
                 torch.rand(K, dtype=dtype) - 0.5) for _ in range(2)]
        candidates = {"eager": (eager_forward, sets),
                      "torch_compile": (torch.compile(eager_forward, dynamic=False), sets),
                      "gather_linear": (gather_linear.forward, sets)}
        calls = min(2000, max(2, int(1e10 / (2 * B * K * R * H))))
        with torch.no_grad():
            reference = eager_forward(*sets[0]).float()
            for name, (fn, _) in candidates.items():
                error = (fn(*sets[0]).float() - reference).abs().max().item() / reference.abs().max().item()
                assert error < 2e-2, f"{name} disagrees with eager on {(R, B, H, K)} {dtype}: {error:.2e}"
                wall_clock_us(fn, sets, len(sets))  # warm-up (and compilation)
            us = median_us(candidates, args.rounds, calls, wall_clock_us)
        rows.append(against_pytorch_row(R, B, H, K, dtype, us, "cpu", threads=torch.get_num_threads()))
        print(against_pytorch_line(rows[-1]), flush=True)
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
