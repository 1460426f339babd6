"""The operator torch.ops.gather_linear.forward: its kernels (C++, loaded here), its fake kernel
and its autograd formula (both here, in Python, composed of PyTorch operations).

The C++ library (libgather_linear_torch.so) registers the schema and the CPU and CUDA kernels; it
names this module as the home of the fake kernel (m.set_python_module), so the fake kernel must
stay here.
"""

from pathlib import Path

import torch

torch.ops.load_library(str(Path(__file__).with_name("libgather_linear_torch.so")))

# Bound once: resolving the overload on each call would cost more than the tiny problems take.
_forward_op = torch.ops.gather_linear.forward.default


def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y (B, K) = bias + cat([x[r] for r in range(R)], -1) @ weight.T, for x (R, B, H) with any
    strides and weight (K, R*H). Bad arguments raise ValueError (NotImplementedError for an
    unsupported dtype or device) whose message starts with the argument's name."""
    if not torch.compiler.is_compiling() and not (
        torch.is_grad_enabled() and torch._C._any_requires_grad(x, weight, bias)
    ):
        # Nothing to record for autograd: go straight to the CPU/CUDA kernel. The autograd kernel
        # that register_autograd installs takes this same decision, but only after a round trip
        # through Python that costs microseconds per call, as much as a small problem's whole
        # GPU kernel. (torch.compile traces the plain call below; its graphs pay no such cost.)
        with torch._C._AutoDispatchBelowAutograd():
            return _forward_op(x, weight, bias)
    return _forward_op(x, weight, bias)


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


def _setup_context(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.x_shape = x.shape
    # dX needs only W and dW only x: save just what the requested gradients read.
    needs_grad_x, needs_grad_weight = ctx.needs_input_grad[:2]
    ctx.save_for_backward(x if needs_grad_weight else None, weight if needs_grad_x else None)


def _backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    R, B, H = ctx.x_shape
    # needs_input_grad also covers an internal argument of register_autograd's Function.
    needs_grad_x, needs_grad_weight, needs_grad_bias = ctx.needs_input_grad[:3]
    grad_x = grad_weight = grad_bias = None
    if needs_grad_x:
        # dX[r, b, h] = sum_k dY[b, k] W[k, r*H + h]: one GEMM gives dX as (B, R*H) = (B, R, H),
        # returned as the (R, B, H) view of it, no copy.
        grad_x = (grad_y @ weight).view(B, R, H).transpose(0, 1)
    if needs_grad_weight:
        # dW = dY^T @ cat([x[r] for r in range(R)], -1); the concatenation is x read as (B, R*H).
        grad_weight = grad_y.t() @ x.transpose(0, 1).reshape(B, R * H)
    if needs_grad_bias:
        grad_bias = grad_y.sum(0)
    return grad_x, grad_weight, grad_bias


torch.library.register_autograd("gather_linear::forward", _backward, setup_context=_setup_context)
