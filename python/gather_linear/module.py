"""GatherLinear: the nn.Module form of the operator, a drop-in for nn.Linear(R*H, K) applied to
cat([x[r] for r in range(R)], -1)."""

import math

import torch
from torch import nn

from gather_linear.ops import forward_op, forward_over_batch_dims, forward_through_python_autograd


class GatherLinear(nn.Module):
    """y (B, K) = nn.Linear(R*H, K)(cat([x[r] for r in range(R)], -1)) for x (R, B, H), computed
    without the concatenation; as nn.Linear takes (*, in), x may also be (R, *batch, H), giving
    y (*batch, K).

    The parameters are nn.Linear(R*H, K)'s: the same names (`weight` (K, R*H), `bias` (K)), the
    same initialisation and therefore the same state_dict, so a checkpoint loads into either.
    """

    def __init__(self, R: int, H: int, K: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.R, self.H = R, H
        self.in_features, self.out_features = R * H, K
        self.weight = nn.Parameter(torch.empty((K, R * H), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(K, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Linear's scheme, so that the same seed draws the same parameters: weight from
        # kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and bias from the
        # same bound.
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Kept lean: on small problems this Python is a large part of a call's host time. Hence the
        # parameters come from _parameters: self.weight would go through nn.Module.__getattr__,
        # about 0.6 µs a lookup on the seed problem's 5-8 µs call. Where they are not registered
        # parameters (a parametrization's property, an old weight_norm's computed tensor), the
        # attributes are read.
        shape = x.shape
        try:
            parameters = self._parameters
            weight, bias = parameters["weight"], parameters["bias"]
        except KeyError:
            weight, bias = self.weight, self.bias
        if len(shape) != 3 or shape[0] != self.R or shape[2] != self.H:
            if len(shape) < 2 or shape[0] != self.R or shape[-1] != self.H:
                raise ValueError(f"x: expected shape (R, B, H) = ({self.R}, B, {self.H}), or (R, *batch, H), "
                                 f"got {tuple(shape)}")
            return forward_over_batch_dims(x, weight, bias)
        try:
            return forward_op(x, weight, bias)
        except NotImplementedError as error:
            return forward_through_python_autograd(error, x, weight, bias)

    def extra_repr(self) -> str:
        return f"R={self.R}, H={self.H}, K={self.out_features}, bias={self.bias is not None}"
