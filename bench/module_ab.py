#!/usr/bin/env python3
"""The Python layer of the modules, one revision against another: GatherLinear's and ModelNew's
forwards as written at BASE_REV and as in the working tree, on the seed problem, taking turns in one
process (both call the installed operator, so only their Python differs). Per-call times of calls
back to back; ratio = working tree / BASE_REV, per round; quartiles over the rounds.

    python3 bench/module_ab.py BASE_REV [--device cpu|cuda] [--rounds 41] [--csv out.csv]
"""

import argparse
import csv
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
SOURCES = {"GatherLinear": "python/gather_linear/module.py", "ModelNew": "python/gather_linear/kernelbench.py"}
R, B, H, K = 4, 12, 32, 56


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_pair(name, source, base_rev, folder):
    """(base, working) instances of class `name`, the same parameters in both."""
    base_file = folder / f"base_{name}.py"
    base_file.write_text(subprocess.run(["git", "-C", str(REPO), "show", f"{base_rev}:{source}"], check=True,
                                        capture_output=True, text=True).stdout)
    classes = [getattr(load(path, f"{tag}_{name}"), name) for tag, path in (("base", base_file), ("working", REPO / source))]
    models = [cls(R, H, K) if name == "GatherLinear" else cls() for cls in classes]
    models[1].load_state_dict(models[0].state_dict())
    return models


def per_call_us(model, x, calls, device):
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        model(x)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base_rev")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--calls", type=int, default=3000, help="calls per timing")
    parser.add_argument("--csv")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        pairs = {name: [m.to(args.device) for m in model_pair(name, source, args.base_rev, Path(folder))]
                 for name, source in SOURCES.items()}
    x = torch.randn(R, B, H, device=args.device)
    for mode in ("no_grad", "grad_enabled"):
        with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
            for name, (base, working) in pairs.items():
                if not torch.equal(base(x), working(x)):
                    sys.exit(f"{name}: the two revisions' outputs differ")
                for model in (base, working):
                    per_call_us(model, x, args.calls, args.device)  # warm-up
                base_us, working_us = [], []
                for _ in range(args.rounds):
                    base_us.append(per_call_us(base, x, args.calls, args.device))
                    working_us.append(per_call_us(working, x, args.calls, args.device))
                ratios = [w / b for w, b in zip(working_us, base_us)]
                q25, median, q75 = statistics.quantiles(ratios, n=4)
                rows.append(dict(device=args.device, mode=mode, model=name, base=args.base_rev, rounds=args.rounds,
                                 base_us=f"{statistics.median(base_us):.3f}",
                                 working_us=f"{statistics.median(working_us):.3f}",
                                 ratio_q25=f"{q25:.3f}", ratio_median=f"{median:.3f}", ratio_q75=f"{q75:.3f}"))
                print(",".join(map(str, rows[-1].values())), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
