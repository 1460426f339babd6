"""What the PyTorch benchmarks (op_overhead.py, torch_comparison.py, kernelbench_seed.py,
training_step.py, cpu_comparison.py, backward_variants.py) share: eager PyTorch's forward, rotating
input sets, back-to-back timing (one CUDA-event pair, or the wall clock on the CPU) of candidates
taking turns, KernelBench's isolated trial, the rows comparing the op with eager and torch.compile,
and the CSV they write."""

import csv
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F


def concatenate(x):
    return torch.cat([x[r] for r in range(x.shape[0])], dim=-1)


def eager_forward(x, weight, bias):
    """What the seed's Model computes: torch.cat of the x[r], then F.linear."""
    return F.linear(concatenate(x), weight, bias)


def rotating_set_count(set_bytes, minimum=1, maximum=64):
    """How many input sets of set_bytes span twice the GPU's L2 (within [minimum, maximum]), so a
    problem that outgrows the L2 is read from HBM on every call."""
    return max(minimum, min(maximum, 2 * torch.cuda.get_device_properties(0).L2_cache_size // set_bytes + 1))


def rotating_input_sets(R, B, H, K, dtype, minimum=1):
    """(x, weight, bias) sets, uniform in [-0.5, 0.5), rotating_set_count of them."""
    count = rotating_set_count((R * B * H + K * R * H + K) * torch.finfo(dtype).bits // 8, minimum)
    return [
        (torch.rand(R, B, H, device="cuda", dtype=dtype) - 0.5,
         torch.rand(K, R * H, device="cuda", dtype=dtype) - 0.5,
         torch.rand(K, device="cuda", dtype=dtype) - 0.5)
        for _ in range(count)
    ]


def per_call_us(fn, sets, calls):
    """fn called back to back over the sets, `calls` times, timed by one event pair: µs per call."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) * 1000 / calls


def wall_clock_us(fn, sets, calls):
    """The CPU's per_call_us: fn called `calls` times over the sets, by the wall clock. µs per call."""
    began = time.perf_counter()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    return (time.perf_counter() - began) * 1e6 / calls


def timer_for(device):
    return per_call_us if device == "cuda" else wall_clock_us


def median_us(candidates, rounds, calls, timer=per_call_us):
    """Candidates {name: (fn, sets)} timed in turn, `calls` calls per run, `rounds` times (so clock
    and power drift touch them alike): the median µs per call of each."""
    times = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, (fn, sets) in candidates.items():
            times[name].append(timer(fn, sets, calls))
    return {name: statistics.median(t) for name, t in times.items()}


def dtype_name(dtype):
    """"float32" for torch.float32: the name the CSVs and the --dtypes options use."""
    return str(dtype).removeprefix("torch.")


def device_name(device):
    return torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or platform.machine()


L2_FLUSH_BYTES = 256 * 1024 * 1024  # KernelBench's flush, larger than any GPU's L2


def l2_flush_buffer():
    return torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")


def isolated_call_us(fn, args, flush_buffer):
    """One KernelBench trial: synchronize, flush the L2 by writing flush_buffer, time one call
    between a CUDA-event pair, synchronize. µs."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    flush_buffer.fill_(1)
    start.record()
    fn(*args)
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000


def against_pytorch_row(R, B, H, K, dtype, us, device, **extra):
    """A CSV row of median times {"eager", "torch_compile", "gather_linear"} and the two ratios."""
    ours = us["gather_linear"]
    return dict(R=R, B=B, H=H, K=K, dtype=dtype_name(dtype), eager_us=f"{us['eager']:.2f}",
                torch_compile_us=f"{us['torch_compile']:.2f}", gather_linear_us=f"{ours:.2f}",
                eager_over_ours=f"{us['eager'] / ours:.3f}", compile_over_ours=f"{us['torch_compile'] / ours:.3f}",
                device=device_name(device), **extra, torch=torch.__version__)


AGAINST_PYTORCH_HEADER = (f"{'R':>3} {'B':>6} {'H':>4} {'K':>5} {'dtype':>9} {'eager us':>10} {'compile us':>10} "
                          f"{'ours us':>10} {'eager/ours':>10} {'compile/ours':>12}")


def against_pytorch_line(row):
    return (f"{row['R']:>3} {row['B']:>6} {row['H']:>4} {row['K']:>5} {row['dtype']:>9} "
            f"{float(row['eager_us']):>10.1f} {float(row['torch_compile_us']):>10.1f} "
            f"{float(row['gather_linear_us']):>10.1f} {row['eager_over_ours']:>10} {row['compile_over_ours']:>12}")


def write_csv(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
