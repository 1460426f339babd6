"""gather_linear: nn.Linear over a concatenation, without building the concatenation.

    y[b, k] = bias[k] + sum_r sum_h x[r, b, h] * weight[k, r*H + h]

is nn.Linear(R*H, K)(torch.cat([x[r] for r in range(R)], -1)) for x of shape (R, B, H), with any
strides (a head-major (B, R, H) buffer viewed as (R, B, H) is read in place).

- gather_linear.forward(x, weight, bias=None): the operator torch.ops.gather_linear.forward
  (CPU and CUDA kernels, a fake kernel for torch.compile, autograd).
- gather_linear.GatherLinear(R, H, K, bias=True): the nn.Module, with nn.Linear's parameters.
- gather_linear.kernelbench: ModelNew, the drop-in solution of the seed KernelBench problem.
- gather_linear.dtensor: the operators on DTensors, registered as soon as both packages are
  imported, whichever comes first.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from gather_linear.module import GatherLinear
from gather_linear.ops import forward

__all__ = ["GatherLinear", "forward"]


class _ImportDTensorSupportAfterDTensor(importlib.abc.MetaPathFinder):
    """Imports gather_linear.dtensor right after torch.distributed.tensor has been imported: the
    latter takes about 0.4 s, which programs without DTensors should not pay at this import."""

    def find_spec(self, name, path, target=None):
        if name != "torch.distributed.tensor":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            importlib.import_module("gather_linear.dtensor")

        spec.loader.exec_module = exec_module
        return spec


if "torch.distributed.tensor" in sys.modules:
    importlib.import_module("gather_linear.dtensor")
else:
    sys.meta_path.insert(0, _ImportDTensorSupportAfterDTensor())
