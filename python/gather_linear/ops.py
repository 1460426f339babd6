"""The operator torch.ops.gather_linear.forward: its kernels (C++, loaded here) and its fake kernel
(here, in Python).

The C++ library (libgather_linear_torch.so) registers the schema, the CPU and CUDA kernels and the
autograd kernel (python/csrc/autograd.cpp: in C++ because a Python autograd formula costs more per
call than a small problem's whole forward); it names this module as the home of the fake kernel
(m.set_python_module), so the fake kernel must stay here.
"""

from pathlib import Path

import torch

torch.ops.load_library(str(Path(__file__).with_name("libgather_linear_torch.so")))

# Bound once: resolving the overload on each call would cost more than the tiny problems take.
# The modules call it directly (one Python frame less than forward()).
forward_op = torch.ops.gather_linear.forward.default


def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y (B, K) = bias + cat([x[r] for r in range(R)], -1) @ weight.T, for x (R, B, H) with any
    strides and weight (K, R*H). Bad arguments raise ValueError (NotImplementedError for an
    unsupported dtype or device) whose message starts with the argument's name."""
    return forward_op(x, weight, bias)


@torch.library.register_fake("gather_linear::forward")
def _forward_fake(x, weight, bias):
    # Only what the output's shape depends on is checked here; the real kernels validate
    # everything else (dtypes, devices, strides) with the same "<argument>: ..." messages.
    torch._check_value(x.dim() == 3, lambda: f"x: expected rank 3 (R, B, H), got rank {x.dim()}")
    torch._check_value(weight.dim() == 2, lambda: f"weight: expected rank 2 (K, R*H), got rank {weight.dim()}")
    R, B, H = x.shape
    K, RH = weight.shape
    torch._check_value(RH == R * H, lambda: f"weight: expected size(1) == R*H = {R}*{H} = {R * H}, got {RH}")
    if bias is not None:
        torch._check_value(
            bias.dim() == 1 and bias.shape[0] == K,
            lambda: f"bias: expected shape (K,) = ({K},) (weight.size(0)), got {tuple(bias.shape)}",
        )
    return x.new_empty((B, K))
