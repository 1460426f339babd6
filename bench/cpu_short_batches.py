#!/usr/bin/env python3
"""The forward on short batches (decoding a few tokens) on the CPU: gather_linear.forward against eager
PyTorch (torch.cat of x[r], then F.linear), under torch.no_grad, for each batch size B of a list at
fixed R, H, K. The weight is read far more than it is reused here, so it is rotated past the caches
like the inputs: enough sets to span 512 MB (at most 64). Candidates take turns, each run timed by the wall clock
(about 20 ms of calls); median of seven rounds. Results are checked against eager first.

    python3 bench/cpu_short_batches.py [out.csv] [--shape R,H,K ...] [--batches 1,2,4,...] [--dtype bfloat16]
"""

import argparse

import torch

import gather_linear
from torch_bench import eager_forward, median_us, wall_clock_us, write_csv

SET_BYTES = 512 * 1024 * 1024  # past the GPU host's 300 MB L3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/cpu_short_batches.csv")
    parser.add_argument("--shape", nargs="+", default=["32,128,4096", "8,128,1024", "8,64,512"],
                        help="R,H,K (default: a 32 MB, a 2 MB and a 512 KB bfloat16 weight)")
    parser.add_argument("--batches", default="1,2,4,8,12,16,24,32,48,64")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    print(f"{'R':>3} {'B':>4} {'H':>4} {'K':>5} {'eager us':>10} {'ours us':>10} {'eager/ours':>10}")
    for shape in args.shape:
        R, H, K = (int(v) for v in shape.split(","))
        for B in (int(v) for v in args.batches.split(",")):
            set_bytes = (R * B * H + K * R * H + K) * dtype.itemsize
            count = max(2, min(64, SET_BYTES // set_bytes))
            sets = [(torch.rand(R, B, H, dtype=dtype) - 0.5, torch.rand(K, R * H, dtype=dtype) - 0.5,
                     torch.rand(K, dtype=dtype) - 0.5) for _ in range(count)]
            candidates = {"eager": (eager_forward, sets), "gather_linear": (gather_linear.forward, sets)}
            with torch.no_grad():
                reference = eager_forward(*sets[0]).float()
                error = (gather_linear.forward(*sets[0]).float() - reference).abs().max() / reference.abs().max()
                assert error < 2e-2, f"disagrees with eager on {(R, B, H, K)}: {error:.2e}"
                first = wall_clock_us(eager_forward, sets, count)  # warm-up, and the calls for ~20 ms
                calls = max(count, int(20000 / max(first, 1.0)))
                us = median_us(candidates, args.rounds, calls, wall_clock_us)
            rows.append(dict(R=R, B=B, H=H, K=K, dtype=args.dtype, eager_us=f"{us['eager']:.2f}",
                             gather_linear_us=f"{us['gather_linear']:.2f}",
                             eager_over_ours=f"{us['eager'] / us['gather_linear']:.3f}",
                             threads=torch.get_num_threads(), torch=torch.__version__))
            r = rows[-1]
            print(f"{R:>3} {B:>4} {H:>4} {K:>5} {float(r['eager_us']):>10.1f} {float(r['gather_linear_us']):>10.1f} "
                  f"{r['eager_over_ours']:>10}", flush=True)
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
