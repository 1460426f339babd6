#!/usr/bin/env python3
"""The Python layer of the modules, one revision against another: GatherLinear's and ModelNew's
forwards as written at BASE_REV and as in the working tree, on the seed problem, taking turns in one
process (both call the installed operator, so only their Python differs). Per-call times of calls
back to back (torch_bench's timers: the wall clock on the CPU, an event pair on the GPU); ratio =
working tree / BASE_REV, per round; quartiles over the rounds.

    python3 bench/module_ab.py BASE_REV [--device cpu|cuda] [--rounds 41] [--csv out.csv]
"""

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from torch_bench import timer_for, write_csv

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
    sets = [(torch.randn(R, B, H, device=args.device),)]
    x = sets[0][0]
    timer = timer_for(args.device)
    for mode in ("no_grad", "grad_enabled"):
        with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
            for name, (base, working) in pairs.items():
                if not torch.equal(base(x), working(x)):
                    sys.exit(f"{name}: the two revisions' outputs differ")
                for model in (base, working):
                    timer(model, sets, args.calls)  # warm-up
                base_us, working_us = [], []
                for _ in range(args.rounds):
                    base_us.append(timer(base, sets, args.calls))
                    working_us.append(timer(working, sets, args.calls))
                ratios = [w / b for w, b in zip(working_us, base_us)]
                q25, median, q75 = statistics.quantiles(ratios, n=4)
                rows.append(dict(device=args.device, mode=mode, model=name, base=args.base_rev, rounds=args.rounds,
                                 base_us=f"{statistics.median(base_us):.3f}",
                                 working_us=f"{statistics.median(working_us):.3f}",
                                 ratio_q25=f"{q25:.3f}", ratio_median=f"{median:.3f}", ratio_q75=f"{q75:.3f}"))
                print(",".join(map(str, rows[-1].values())), flush=True)
    if args.csv:
        write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
