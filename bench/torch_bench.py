"""What the PyTorch benchmarks (op_overhead.py, torch_comparison.py, kernelbench_seed.py) share:
rotating input sets, back-to-back timing by one CUDA-event pair, KernelBench's isolated trial, and
the CSV they write."""

import csv
import platform
import time
from pathlib import Path

import torch


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


def write_csv(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")
