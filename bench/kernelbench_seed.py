#!/usr/bin/env python3
"""ModelNew against Model on the seed KernelBench problem (shared/SEED_TASK.md), on the GPU.

1. KernelBench protocol: torch.manual_seed(42) (and the CUDA seed) before constructing each model;
   5 correctness trials on fresh inputs (atol = rtol = 1e-4); then per model 3 warm-ups and 100
   trials of: synchronize, write a 256 MB buffer (flushes L2), CUDA-event pair around one forward,
   synchronize. Reported: mean (and min) of the trials, speedup = Model mean / ModelNew mean.
   Run under torch.no_grad(), as KernelBench's evaluation does, and with grad enabled. The
   protocol's floors are listed beside ModelNew (their "speedup" column is then ModelNew's time
   over the floor's), kernels timed the same way: one 1-element fill, and one kernel that reads
   one element the flush has evicted (so waits for one round trip to HBM, as any forward must)
   and writes one.
2. Back-to-back: many forward calls of the eager Model and of GatherLinear (the same weights),
   one synchronize at the end; per-call time = wall time / calls. Host overhead included, which
   is what dominates a problem this small.

Usage (package installed with `pip install --no-build-isolation .`):
    python3 bench/kernelbench_seed.py [out.csv]      # default bench/results/kernelbench_seed.csv
"""

import argparse
import contextlib
import csv
import statistics
import time
from pathlib import Path

import torch

from gather_linear import GatherLinear, kernelbench
from torch_bench import isolated_call_us, l2_flush_buffer

WARMUPS, TRIALS, CORRECTNESS_TRIALS = 3, 100, 5
BACK_TO_BACK_CALLS = 5000


def construct(model_class):
    torch.manual_seed(42)
    torch.cuda.manual_seed(42)
    return model_class().cuda()


def verify(reference, candidate, name):
    torch.manual_seed(0)
    with torch.no_grad():
        for trial in range(CORRECTNESS_TRIALS):
            x = kernelbench.get_inputs()[0].cuda()
            expected, actual = reference(x), candidate(x)
            if not torch.allclose(actual, expected, atol=1e-4, rtol=1e-4):
                error = (actual - expected).abs().max().item()
                raise SystemExit(f"{name}: trial {trial} differs from Model (max abs error {error:.3g}); not timing")


def kernelbench_times_us(model, x, flush_buffer):
    for _ in range(WARMUPS):
        model(x)
    return [isolated_call_us(model, (x,), flush_buffer) for _ in range(TRIALS)]


def back_to_back_us(model, x):
    for _ in range(WARMUPS):
        model(x)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(BACK_TO_BACK_CALLS):
        model(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - begin) / BACK_TO_BACK_CALLS * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/kernelbench_seed.csv", help="output CSV path")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernelbench_seed: needs a CUDA GPU")

    model, model_new = construct(kernelbench.Model), construct(kernelbench.ModelNew)
    gather = GatherLinear(kernelbench.R, kernelbench.H, kernelbench.K).cuda()
    gather.load_state_dict(model.proj.state_dict())
    verify(model, model_new, "ModelNew")
    verify(model, gather, "GatherLinear")

    x = kernelbench.get_inputs()[0].cuda()
    flush_buffer = l2_flush_buffer()
    rows = []
    for mode, context in (("no_grad", torch.no_grad), ("grad_enabled", contextlib.nullcontext)):
        with context():
            ref, new = kernelbench_times_us(model, x, flush_buffer), kernelbench_times_us(model_new, x, flush_buffer)
            rows.append(("kernelbench_event_mean", mode, "Model", statistics.mean(ref), "ModelNew",
                         statistics.mean(new)))
            rows.append(("kernelbench_event_min", mode, "Model", min(ref), "ModelNew", min(new)))
            rows.append(("back_to_back_per_call", mode, "Model", back_to_back_us(model, x),
                         "GatherLinear", back_to_back_us(gather, x)))
            if mode == "no_grad":
                tiny, source = torch.empty(1, device="cuda"), torch.ones(1, device="cuda")
                floors = {"one_fill_kernel": lambda _: tiny.zero_(),
                          "one_read_kernel": lambda _: torch.neg(source, out=tiny)}
                for name, floor in floors.items():
                    rows.append(("protocol_floor_mean", mode, "ModelNew", statistics.mean(new), name,
                                 statistics.mean(kernelbench_times_us(floor, x, flush_buffer))))

    shape = {"R": kernelbench.R, "B": kernelbench.B, "H": kernelbench.H, "K": kernelbench.K}
    device = torch.cuda.get_device_name()
    print(f"seed problem {shape} float32 on {device}, torch {torch.__version__}")
    print(f"{'measurement':24} {'mode':13} {'reference':>10} {'us':>9} {'candidate':>13} {'us':>9} {'speedup':>8}")
    for measurement, mode, ref_name, ref_us, new_name, new_us in rows:
        print(f"{measurement:24} {mode:13} {ref_name:>10} {ref_us:9.2f} {new_name:>13} {new_us:9.2f} "
              f"{ref_us / new_us:7.2f}x")

    out = Path(args.csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["measurement", "mode", "reference", "reference_us", "candidate", "candidate_us", "speedup",
                         *shape, "dtype", "device", "torch"])
        for measurement, mode, ref_name, ref_us, new_name, new_us in rows:
            writer.writerow([measurement, mode, ref_name, f"{ref_us:.3f}", new_name, f"{new_us:.3f}",
                             f"{ref_us / new_us:.3f}", *shape.values(), "float32", device, torch.__version__])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
