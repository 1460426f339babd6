"""gather_linear: nn.Linear over a concatenation, without building the concatenation.

    y[b, k] = bias[k] + sum_r sum_h x[r, b, h] * weight[k, r*H + h]

is nn.Linear(R*H, K)(torch.cat([x[r] for r in range(R)], -1)) for x of shape (R, B, H), with any
strides (a head-major (B, R, H) buffer viewed as (R, B, H) is read in place).

- gather_linear.forward(x, weight, bias=None): the operator torch.ops.gather_linear.forward
  (CPU and CUDA kernels, a fake kernel for torch.compile, autograd).
- gather_linear.GatherLinear(R, H, K, bias=True): the nn.Module, with nn.Linear's parameters.
- gather_linear.kernelbench: ModelNew, the drop-in solution of the seed KernelBench problem.
"""

from gather_linear.module import GatherLinear
from gather_linear.ops import forward

__all__ = ["GatherLinear", "forward"]
