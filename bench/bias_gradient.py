#!/usr/bin/env python3
"""The backward's bias gradient, grad_y's column sums, on the CPU: the op asked for that gradient
alone against ATen's grad_y.sum(0), time and error. Error is max |got - exact| / max |exact| with
the exact sums taken in double (float64: by math.fsum); "rounding" is that of the exact sums rounded to the dtype, the least
any result in the dtype can have. Inputs are normal or uniform in [0, 1) (whose sums grow with B,
as a float32 running sum's error does). Candidates run in turn over two input sets, the median of
`--rounds` rounds.

    python3 bench/bias_gradient.py [out.csv] [--rounds 9] [--dtypes float32 ...]
"""

import argparse
import math

import torch

import gather_linear  # noqa: F401  (registers the op)

from torch_bench import device_name, dtype_name, median_us, wall_clock_us, write_csv

SHAPES = [  # B, K: wide and narrow outputs, short and tall batches
    (512, 512), (4096, 2048), (8192, 1024), (65536, 256), (1 << 20, 16), (2971, 1), (256, 64),
]


def op(grad_y):
    B = grad_y.shape[0]
    return torch.ops.gather_linear.backward(grad_y, None, None, [1, B, 1], [False, False, True])[-1]


def aten(grad_y):
    return grad_y.sum(0)


def exact_sums(grad_y):
    """Column sums exact to within a double's rounding: in double for the narrower dtypes (the
    sum's own error is then far below their rounding), by math.fsum for float64."""
    if grad_y.dtype != torch.float64:
        return grad_y.double().sum(0)
    return torch.tensor([math.fsum(column) for column in grad_y.t().tolist()], dtype=torch.float64)


def error(got, exact):
    return ((got.double() - exact).abs().max() / exact.abs().max()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/bias_gradient_cpu.csv")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "float64", "bfloat16", "float16"),
                        default=["float32", "float64", "bfloat16", "float16"])
    args = parser.parse_args()
    rows = []
    for B, K in SHAPES:
        for dtype in (getattr(torch, name) for name in args.dtypes):
            for values in ("normal", "uniform"):
                draw = torch.randn if values == "normal" else torch.rand
                sets = [(draw(B, K, dtype=torch.float64).to(dtype),) for _ in range(2)]
                exact = exact_sums(sets[0][0])
                errors = {name: error(fn(*sets[0]), exact) for name, fn in (("op", op), ("aten", aten))}
                calls = max(3, min(2000, int(2e8 / (B * K))))
                for fn in (op, aten):
                    wall_clock_us(fn, sets, 2)  # warm-up
                us = median_us({"op": (op, sets), "aten": (aten, sets)}, args.rounds, calls, wall_clock_us)
                rows.append(dict(B=B, K=K, dtype=dtype_name(dtype), values=values, op_us=f"{us['op']:.2f}",
                                 aten_us=f"{us['aten']:.2f}", op_over_aten=f"{us['op'] / us['aten']:.3f}",
                                 op_error=f"{errors['op']:.2e}", aten_error=f"{errors['aten']:.2e}",
                                 rounding=f"{error(exact.to(dtype), exact):.2e}", device=device_name("cpu"),
                                 threads=torch.get_num_threads(), torch=torch.__version__))
                print(",".join(str(v) for v in list(rows[-1].values())[:10]), flush=True)
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
