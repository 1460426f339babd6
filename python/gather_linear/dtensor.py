"""The operators on DTensors (torch.distributed.tensor): forward's sharding strategies, and
backward composed of ATen ops, which DTensor already knows how to shard.

Imported by `import gather_linear` only once torch.distributed.tensor has been imported (its
import takes about 0.4 s, fifty times the package's own), so that programs without DTensors never
pay for it (see gather_linear/__init__.py).

forward(x (R, B, H), weight (K, R*H), bias (K)) -> y (B, K) runs on each rank's shards, with no
communication, wherever the placements (per mesh dimension) are one of:

| y         | x         | weight    | bias      | the parallelism                                  |
|-----------|-----------|-----------|-----------|--------------------------------------------------|
| Replicate | Replicate | Replicate | Replicate |                                                  |
| Shard(0)  | Shard(1)  | Replicate | Replicate | data or sequence parallel: rows of the batch     |
| Shard(1)  | Replicate | Shard(0)  | Shard(0)  | column-wise: output features                     |
| Partial   | Shard(0)  | Shard(1)  | Partial   | row-wise: whole slices (attention heads) a rank  |
| Partial   | Partial   | Replicate | Partial   | x a partial sum                                  |
| Partial   | Replicate | Partial   | Partial   | weight a partial sum                             |

Row-wise needs the slices to split evenly (R a multiple of the mesh's size), so that each rank's
columns of the weight are its slices' own; otherwise DTensor redistributes to another strategy.
A bias in a Partial placement is added once in the sum: DTensor makes a replicated bias Partial by
dividing it by the ranks' count, as it does for F.linear's under row-wise parallelism. Any
other placements are redistributed to the cheapest of these.
"""

import torch
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding


@register_sharding(torch.ops.gather_linear.forward.default)
def _forward_shardings(x, weight, bias=None):
    # x, weight and bias are DTensor's specs (shape, mesh); the result lists (outputs, inputs).
    def with_bias(placement):
        return None if bias is None else placement

    shardings = [
        ([Replicate()], [Replicate(), Replicate(), with_bias(Replicate())]),
        ([Shard(0)], [Shard(1), Replicate(), with_bias(Replicate())]),
        ([Shard(1)], [Replicate(), Shard(0), with_bias(Shard(0))]),
        ([Partial()], [Partial(), Replicate(), with_bias(Partial())]),
        ([Partial()], [Replicate(), Partial(), with_bias(Partial())]),
    ]
    if x.shape[0] % x.mesh.size() == 0:
        shardings.append(([Partial()], [Shard(0), Shard(1), with_bias(Partial())]))
    return shardings


def _backward_on_dtensors(cls, func, types, args, kwargs):
    # The backward op has no sharding strategy (it returns a list as long as the gradients asked
    # for); on DTensors it composes ATen ops instead, as autograd's C++ node does where ATen is
    # faster (python/csrc/autograd.cpp), and returns the gradients laid out as the op does.
    grad_y, x, weight, x_size, output_mask = args
    R, B, H = x_size
    gradients = []
    if output_mask[0]:
        product = grad_y.matmul(weight)  # (B, R*H)
        try:
            gradients.append(product.view(B, R, H).transpose(0, 1))
        except RuntimeError:
            # DTensor refuses a view that splits a sharded dimension where a rank holds part of
            # a slice (R not a multiple of the ranks); split redistributes it.
            gradients.append(torch.stack(product.split(H, dim=1)))
    if output_mask[1]:
        gradients.append(grad_y.t().matmul(x.transpose(0, 1).reshape(B, R * H)))
    if output_mask[2]:
        gradients.append(grad_y.sum(0))
    return gradients


torch.library.register_torch_dispatch("gather_linear::backward", DTensor, _backward_on_dtensors)
