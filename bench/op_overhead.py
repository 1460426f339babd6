#!/usr/bin/env python3
"""What the PyTorch operator adds over the C++ library, on large problems (GPU).

For each shape the op runs back to back over rotating input sets (more than twice the L2 in
total), timed by a CUDA-event pair around the whole run; its per-forward time is compared with
the library's own fused forwards launched back to back the same way from C++ (`gather-linear
--format json`, fused_stream_us), run on the same shape in the same session: like for like, the
difference is what the op adds (dispatch, output allocation). The library's CUDA-graph replay
time is listed too (no launch gaps at all).

    python3 bench/op_overhead.py --cli build/gpu/tools/gather-linear [out.csv]
"""

import argparse
import json
import subprocess

import torch

import gather_linear
from torch_bench import dtype_name, per_call_us, rotating_input_sets, write_csv

SHAPES = [  # R, B, H, K, dtype
    (8, 1024, 128, 1024, torch.float32),
    (32, 2048, 64, 1024, torch.float32),
    (8, 8192, 512, 4096, torch.float32),
    (32, 8192, 128, 4096, torch.float32),
    (8, 8192, 512, 4096, torch.bfloat16),
    (32, 8192, 128, 4096, torch.bfloat16),
]
CLI_DTYPE = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def op_time_us(R, B, H, K, dtype, calls=50):
    inputs = rotating_input_sets(R, B, H, K, dtype)
    with torch.no_grad():
        per_call_us(gather_linear.forward, inputs, len(inputs))  # warm-up
        samples = [per_call_us(gather_linear.forward, inputs, calls) for _ in range(5)]
    return sorted(samples)[len(samples) // 2]


def library_time_us(cli, R, B, H, K, dtype):
    out = subprocess.run([cli, "--shape", f"{R},{B},{H},{K}", "--dtype", CLI_DTYPE[dtype], "--format", "json"],
                         check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    return report["fused_stream_us"], report["fused_us"], report["kernel"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", required=True, help="path of the gather-linear CLI")
    parser.add_argument("csv", nargs="?", default="bench/results/op_overhead.csv")
    args = parser.parse_args()
    rows = []
    print(f"{'R':>4} {'B':>6} {'H':>4} {'K':>5} {'dtype':>9} {'kernel':>22} {'lib graph':>10} "
          f"{'lib us':>9} {'op us':>9} {'op/lib':>7}")
    for R, B, H, K, dtype in SHAPES:
        lib_us, lib_graph_us, kernel = library_time_us(args.cli, R, B, H, K, dtype)
        op_us = op_time_us(R, B, H, K, dtype)
        ratio = op_us / lib_us
        rows.append(dict(R=R, B=B, H=H, K=K, dtype=dtype_name(dtype), kernel=kernel,
                         library_graph_us=f"{lib_graph_us:.3f}", library_us=f"{lib_us:.3f}", op_us=f"{op_us:.3f}",
                         op_over_library=f"{ratio:.4f}", device=torch.cuda.get_device_name(0),
                         torch=torch.__version__))
        print(f"{R:>4} {B:>6} {H:>4} {K:>5} {rows[-1]['dtype']:>9} {kernel:>22} {lib_graph_us:>10.2f} "
              f"{lib_us:>9.2f} {op_us:>9.2f} {ratio:>7.4f}")
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
