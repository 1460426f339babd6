"""The seed KernelBench problem ("virtual all-gather, concat, linear"; shared/SEED_TASK.md) and
its solution, ModelNew, which computes Model's output with the gather_linear operator.

A harness loads this module, may change the constants R, B, H, K first, then constructs Model
and ModelNew after torch.manual_seed(42) each: ModelNew creates its parameters exactly as Model
does (one nn.Linear(R*H, K) named `proj`, constants read at construction), so the two hold the
same weights.
"""

import torch
from torch import nn

from gather_linear.ops import forward_op, forward_over_batch_dims, forward_through_python_autograd

R, B, H, K = 4, 12, 32, 56


class Model(nn.Module):
    """The reference, as the seed task states it: materialise the concatenation, then nn.Linear."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(R * H, K, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = [x[i] for i in range(R)]
        return self.proj(torch.cat(parts, dim=-1))


class ModelNew(nn.Module):
    """Model's computation in one fused kernel; sizes come from the input, not the constants. It
    reads proj's parameters but never calls proj, so hooks registered on proj do not run."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(R * H, K, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # On the seed problem this Python is a large part of the call's host time, and each
        # submodule or parameter lookup through nn.Module.__getattr__ costs about 0.6 µs: they come
        # from _modules and _parameters, or from the attributes where those do not hold them (a
        # parametrization's property, an old weight_norm's computed tensor).
        shape = x.shape
        try:
            proj = self._modules["proj"]
            parameters = proj._parameters
            weight, bias = parameters["weight"], parameters["bias"]
        except KeyError:
            proj = self.proj
            weight, bias = proj.weight, proj.bias
        if len(shape) != 3 or shape[0] * shape[2] != weight.shape[1]:
            # Model also takes x (R, *batch, H) (its cat and nn.Linear do), giving y (*batch, K).
            if len(shape) < 2 or shape[0] * shape[-1] != weight.shape[1]:
                raise ValueError(f"x: expected shape (R, B, H), or (R, *batch, H), with R*H == proj.in_features = "
                                 f"{proj.in_features}, got {tuple(shape)}")
            return forward_over_batch_dims(x, weight, bias)
        try:
            return forward_op(x, weight, bias)
        except NotImplementedError as error:
            return forward_through_python_autograd(error, x, weight, bias)


def get_inputs():
    return [torch.randn(R, B, H)]


def get_init_inputs():
    return []
