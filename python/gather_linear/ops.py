"""The operators torch.ops.gather_linear.forward and .backward: their kernels (C++, loaded here),
their fake kernels and forward's batching rule (here, in Python), and the Python
autograd.Function torch.func transforms and forward-mode AD run forward through.

The C++ library (libgather_linear_torch.so) registers the schemas, the CPU and CUDA kernels and
forward's autograd kernel (python/csrc/autograd.cpp: in C++ because a Python autograd formula
costs more per call than a small problem's whole forward), which calls backward; it names this
module as the home of the fake kernels (m.set_python_module), so they must stay here.
"""

from pathlib import Path

import torch
import torch.autograd.forward_ad as forward_ad

torch.ops.load_library(str(Path(__file__).with_name("libgather_linear_torch.so")))

# Bound once: resolving the overload on each call would cost more than the tiny problems take.
# The modules call it directly (one Python frame less than forward()).
forward_op = torch.ops.gather_linear.forward.default


def forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y (B, K) = bias + cat([x[r] for r in range(R)], -1) @ weight.T, for x (R, B, H) with any
    strides and weight (K, R*H). As nn.functional.linear takes (*, in), x may also be
    (R, *batch, H), giving y (*batch, K) (forward_over_batch_dims). Bad arguments raise ValueError
    (NotImplementedError for an unsupported dtype or device) whose message starts with the
    argument's name."""
    if x.dim() != 3:
        return forward_over_batch_dims(x, weight, bias)
    try:
        return forward_op(x, weight, bias)
    except NotImplementedError as error:
        return forward_through_python_autograd(error, x, weight, bias)


def forward_over_batch_dims(x, weight, bias):
    """x (R, *batch, H) with other than one batch dimension (none: x (R, H) gives y (K), as
    nn.Linear gives for one sample): the batch dimensions fold into B, as a view where their
    strides allow (an (R, N, T, H) view of a (N, T, R, H) buffer, say), else as a copy (the one
    torch.cat would have made), and y (B, K) comes back viewed as (*batch, K)."""
    if x.dim() < 2:
        raise ValueError(f"x: expected rank 3 (R, B, H), or (R, *batch, H) of rank 2 or more, got rank {x.dim()}")
    shape = x.shape
    y = forward(x.reshape(shape[0], shape[1:-1].numel(), shape[-1]), weight, bias)
    return y.view(*shape[1:-1], y.shape[1])


def forward_through_python_autograd(error, x, weight, bias):
    """Where the op refused to run with `error`: inside a torch.func transform (grad, vjp, jacrev,
    jvp, jacfwd, vmap of them), which the op's C++ autograd kernel leaves to this Function, or
    with dual tensors (forward-mode AD), which it has no formula for: the same forward, with
    backward and forward-mode formulas, through a Python autograd.Function, which both support;
    anything else re-raises. Called from an `except` so that ordinary calls pay nothing."""
    dual = any(t is not None and forward_ad.unpack_dual(t).tangent is not None for t in (x, weight, bias))
    if not dual and torch._C._functorch.peek_interpreter_stack() is None:
        raise error
    return _PythonAutogradForward.apply(x, weight, bias)


def _concatenated(x):
    R, B, H = x.shape
    return x.transpose(0, 1).reshape(B, R * H)


class _PythonAutogradForward(torch.autograd.Function):
    # The backward and jvp use PyTorch ops only, the forward the op, which has a batching rule
    # (_forward_vmap below): torch.func may derive this Function's vmap rule.
    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, bias):
        with torch._C._AutoDispatchBelowAutograd():
            return forward_op(x, weight, bias)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias = inputs
        ctx.save_for_backward(x, weight)
        ctx.save_for_forward(x, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad_y):
        # python/csrc/autograd.cpp's composed formulas (composed_gradients), as PyTorch ops.
        x, weight = ctx.saved_tensors
        R, B, H = x.shape
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad_y @ weight).view(B, R, H).transpose(0, 1)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_y.t() @ _concatenated(x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_y.sum(0)
        return grad_x, grad_weight, grad_bias

    @staticmethod
    def jvp(ctx, x_tangent, weight_tangent, bias_tangent):
        # y is bilinear in (x, weight) and affine in bias: its tangent is one term per input.
        x, weight = ctx.saved_tensors
        terms = []
        if x_tangent is not None:
            terms.append(_concatenated(x_tangent) @ weight.t())
        if weight_tangent is not None:
            terms.append(_concatenated(x) @ weight_tangent.t())
        if bias_tangent is not None:
            terms.append(bias_tangent.expand(x.shape[1], -1))
        return sum(terms[1:], terms[0])


@torch.library.register_fake("gather_linear::forward")
def _forward_fake(x, weight, bias=None):
    # The checks a traced graph must not pass where the real kernels would refuse, in their order
    # and with their "<argument>: ..." messages (ranks, dtypes and devices, sizes); strides and
    # alignment are the real kernels' alone.
    torch._check_value(x.dim() == 3, lambda: f"x: expected rank 3 (R, B, H), got rank {x.dim()}")
    torch._check_value(weight.dim() == 2, lambda: f"weight: expected rank 2 (K, R*H), got rank {weight.dim()}")
    if bias is not None:
        torch._check_value(bias.dim() == 1, lambda: f"bias: expected rank 1 (K), got rank {bias.dim()}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        torch._check_value(
            t.dtype == x.dtype,
            lambda: f"{name}: expected dtype {_name(x.dtype)} (the dtype of x), got {_name(t.dtype)}",
        )
        torch._check_value(
            t.device == x.device, lambda: f"{name}: expected device {x.device} (the device of x), got {t.device}"
        )
    R, B, H = x.shape
    K, RH = weight.shape
    torch._check_value(RH == R * H, lambda: f"weight: expected size(1) == R*H = {R}*{H} = {R * H}, got {RH}")
    if bias is not None:
        torch._check_value(
            bias.shape[0] == K, lambda: f"bias: expected size(0) == K = {K} (weight.size(0)), got {bias.shape[0]}"
        )
    return x.new_empty((B, K))


@torch.library.register_fake("gather_linear::backward")
def _backward_fake(grad_y, x, weight, x_size, output_mask):
    # The requested gradients as the real kernels allocate them: x's laid out (B, R, H).
    torch._check_value(x is not None or not output_mask[1],
                       lambda: "x: needed for the gradient of weight (output_mask[1]), got None")
    torch._check_value(weight is not None or not output_mask[0],
                       lambda: "weight: needed for the gradient of x (output_mask[0]), got None")
    R, B, H = x_size
    K = grad_y.shape[1]
    shapes = ((B, R, H), (K, R * H), (K,))
    gradients = [grad_y.new_empty(shape) for shape, wanted in zip(shapes, output_mask) if wanted]
    if output_mask[0]:
        gradients[0] = gradients[0].transpose(0, 1)
    return gradients


def _name(dtype):
    return str(dtype).removeprefix("torch.")


@torch.library.register_vmap("gather_linear::forward")
def _forward_vmap(info, in_dims, x, weight, bias):
    # vmap's batching rule. With only x batched, the batch folds into B: x (N, R, B, H) is read as
    # (R, N*B, H), one call for all N samples (copied only where x's strides cannot be merged). A
    # batched weight or bias (or an x of the wrong rank, for the op's own error) runs the op once
    # per sample.
    x_dim, weight_dim, bias_dim = in_dims
    if weight_dim is None and bias_dim is None and x.dim() == 4:
        x = x.movedim(x_dim, 1)
        R, N, B, H = x.shape
        return forward_op(x.reshape(R, N * B, H), weight, bias).view(N, B, weight.shape[0]), 0

    def sample(t, dim, i):
        return t if dim is None else t.select(dim, i)

    samples = [forward_op(sample(x, x_dim, i), sample(weight, weight_dim, i), sample(bias, bias_dim, i))
               for i in range(info.batch_size)]
    return torch.stack(samples), 0
