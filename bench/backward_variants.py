#!/usr/bin/env python3
"""Ways to compose the operator's backward from ATen ops, against the library's backward (the
gather_linear::backward op, which python/csrc/autograd.cpp calls). For x (R, B, H), weight
(K, R*H) and dY (B, K):

grad_x, dX[r] = dY @ W[:, r*H:(r+1)*H]:
- gemm_view:   one GEMM, dY @ W (B, R*H), returned as its (R, B, H) view: laid out (B, R, H).
- gemm_copy:   the same, then copied to (R, B, H) order (what a consumer needing x's layout pays).
- bmm:         R GEMMs in one batched call, written in (R, B, H) order.
grad_weight, dW[:, r*H:(r+1)*H] = dY^T @ x[r]:
- cat_gemm:    x concatenated to (B, R*H) (a copy unless x is head-major), then one GEMM.
- bmm_strided: R GEMMs in one batched call, written in place into dW's (K, R*H) storage.
each also by the op alone ("op"), and all three gradients (with db = sum_b dY):
- aten:        what autograd.cpp composed before it called the op: gemm_view, and on the GPU
               bmm_strided unless x is head-major or H < 128 and K > 2048, else cat_gemm;
- op:          one call of the op.

Two layouts of x: contiguous (R, B, H) (e.g. R feature tensors stacked) and head-major (a
(B, R, H) buffer viewed as (R, B, H), e.g. attention heads before the output projection). Each variant runs back to
back over rotating input sets, variants in turn, median of five rounds.

On the CPU (--device cpu) smaller shapes run, timed by the wall clock.

    python3 bench/backward_variants.py [out.csv] [--device cpu [--small]] [--dtypes bfloat16 ...]
"""

import argparse

import torch

import gather_linear  # noqa: F401  (registers the op)

from torch_bench import device_name, dtype_name, median_us, rotating_set_count, timer_for, write_csv

SHAPES = [  # R, B, H, K, dtype
    (8, 1024, 128, 1024, torch.float32),
    (8, 1024, 128, 1024, torch.bfloat16),
    (26, 4096, 64, 1024, torch.bfloat16),
    (32, 8192, 128, 4096, torch.bfloat16),
    (8, 8192, 512, 4096, torch.bfloat16),
    (4, 16384, 64, 8192, torch.bfloat16),
    (4, 16384, 64, 1024, torch.bfloat16),
    (8, 16384, 64, 8192, torch.bfloat16),
    (16, 8192, 64, 8192, torch.bfloat16),
    (4, 8192, 128, 8192, torch.bfloat16),
    (4, 4096, 256, 4096, torch.bfloat16),
    (2, 8192, 512, 4096, torch.bfloat16),
    (16, 4096, 32, 2048, torch.bfloat16),
    (32, 2048, 64, 1024, torch.float32),
    (4, 16384, 64, 8192, torch.float32),
    (4, 4096, 256, 4096, torch.float32),
    (32, 8192, 128, 4096, torch.float32),
    (8, 8192, 512, 4096, torch.float32),
]
CPU_SHAPES = [
    (8, 1024, 128, 1024, torch.float32),
    (26, 512, 64, 1024, torch.float32),
    (4, 2048, 64, 2048, torch.float32),
    (16, 512, 32, 512, torch.float32),
    (8, 1024, 128, 1024, torch.bfloat16),
    (26, 512, 64, 1024, torch.bfloat16),
    (8, 1024, 128, 1024, torch.float16),
    (16, 512, 32, 512, torch.float16),
    (8, 1024, 128, 1024, torch.float64),
    (26, 512, 64, 1024, torch.float64),
    (4, 2048, 64, 2048, torch.float64),
    (16, 512, 32, 512, torch.float64),
]
# --small (CPU): problems small enough that dispatching ATen's ops, not arithmetic, sets the
# backward's time; every dtype.
SMALL_CPU_SHAPES = [
    (R, B, H, K, dtype)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    for R, B, H, K in ((2, 16, 16, 32), (4, 12, 32, 56), (4, 32, 32, 64), (16, 16, 32, 64), (8, 32, 64, 64),
                       (4, 64, 64, 128), (8, 64, 64, 128))
]
LAYOUTS = ("contiguous", "head_major")


def grad_x_gemm_view(x, weight, grad_y):
    R, B, H = x.shape
    return (grad_y @ weight).view(B, R, H).transpose(0, 1)


def grad_x_gemm_copy(x, weight, grad_y):
    return grad_x_gemm_view(x, weight, grad_y).contiguous()


def grad_x_bmm(x, weight, grad_y):
    R, B, H = x.shape
    return torch.matmul(grad_y, weight.view(-1, R, H).transpose(0, 1))


def grad_weight_cat_gemm(x, weight, grad_y):
    R, B, H = x.shape
    return grad_y.t() @ x.transpose(0, 1).reshape(B, R * H)


def grad_weight_bmm_strided(x, weight, grad_y):
    R, B, H = x.shape
    grad_weight = torch.empty_like(weight)
    torch.bmm(grad_y.t().expand(R, -1, -1), x, out=grad_weight.view(-1, R, H).transpose(0, 1))
    return grad_weight


def op(x, weight, grad_y, output_mask):
    # x is passed only where the weight's gradient reads it and weight only where x's does.
    return torch.ops.gather_linear.backward(grad_y, x if output_mask[1] else None, weight if output_mask[0] else None,
                                            list(x.shape), output_mask)


def everything_aten(x, weight, grad_y):
    R, B, H = x.shape
    in_place = x.is_cuda and not x.transpose(0, 1).is_contiguous() and not (H < 128 and grad_y.shape[1] > 2048)
    grad_weight = (grad_weight_bmm_strided if in_place else grad_weight_cat_gemm)(x, weight, grad_y)
    return grad_x_gemm_view(x, weight, grad_y), grad_weight, grad_y.sum(0)


VARIANTS = {
    "grad_x": {"gemm_view": grad_x_gemm_view, "gemm_copy": grad_x_gemm_copy, "bmm": grad_x_bmm,
               "op": lambda x, weight, grad_y: op(x, weight, grad_y, [True, False, False])[0]},
    "grad_weight": {"cat_gemm": grad_weight_cat_gemm, "bmm_strided": grad_weight_bmm_strided,
                    "op": lambda x, weight, grad_y: op(x, weight, grad_y, [False, True, False])[0]},
    "all": {"aten": everything_aten, "op": lambda x, weight, grad_y: op(x, weight, grad_y, [True, True, True])},
}


def disagreement(got, want):
    """max |got - want| / max |want| over the gradients (one tensor or a sequence of them)."""
    pairs = zip(got, want) if isinstance(want, (list, tuple)) else [(got, want)]
    return max((g.double() - w.double()).abs().max().item() / w.double().abs().max().item() for g, w in pairs)


def input_sets(R, B, H, K, dtype, layout, device):
    set_bytes = (R * B * H + K * R * H + B * K) * torch.finfo(dtype).bits // 8
    count = rotating_set_count(set_bytes, 2, 32) if device == "cuda" else 2
    sets = []
    for _ in range(count):
        x = torch.rand(R, B, H, device=device, dtype=dtype) - 0.5
        if layout == "head_major":
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        sets.append((x, torch.rand(K, R * H, device=device, dtype=dtype) - 0.5,
                     torch.rand(B, K, device=device, dtype=dtype) - 0.5))
    return sets


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="bench/results/backward_variants.csv")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--gradients", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "float64", "bfloat16", "float16"),
                        default=["float32", "float64", "bfloat16", "float16"])
    parser.add_argument("--small", action="store_true", help="the CPU's small problems (SMALL_CPU_SHAPES)")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    timer = timer_for(args.device)
    rows = []
    for R, B, H, K, dtype in SHAPES if on_gpu else SMALL_CPU_SHAPES if args.small else CPU_SHAPES:
        if dtype_name(dtype) not in args.dtypes:
            continue
        for layout in args.layouts:
            sets = input_sets(R, B, H, K, dtype, layout, args.device)
            # About 2 TFLOP per run on the GPU, 20 GFLOP on the CPU.
            # (At most 5,000 calls: small problems' runs would otherwise take seconds.)
            calls = max(20 if on_gpu else 2, min(5000, int((2e12 if on_gpu else 2e10) / (2 * B * K * R * H))))
            for gradient in args.gradients:
                variants = VARIANTS[gradient]
                reference = variants[next(iter(variants))](*sets[0])
                for name, fn in variants.items():
                    error = disagreement(fn(*sets[0]), reference)
                    assert error < 2e-2, f"{gradient} {name} disagrees on {(R, B, H, K)}: {error:.2e}"
                    timer(fn, sets, len(sets))  # warm-up
                medians = median_us({name: (fn, sets) for name, fn in variants.items()}, args.rounds, calls, timer)
                first = medians[next(iter(variants))]
                for name, us in medians.items():
                    rows.append(dict(R=R, B=B, H=H, K=K, dtype=dtype_name(dtype), x_layout=layout,
                                     gradient=gradient, variant=name, us=f"{us:.2f}",
                                     relative_to_first=f"{us / first:.3f}", device=device_name(args.device),
                                     torch=torch.__version__))
                    print(",".join(str(v) for v in list(rows[-1].values())[:10]), flush=True)
            del sets
    write_csv(args.csv, rows)


if __name__ == "__main__":
    main()
