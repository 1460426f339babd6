"""torch.library.opcheck: the schema, the fake kernel, the autograd registration and
torch.compile's view of the operator (aot_dispatch) agree with the real kernels."""

import pytest
import torch

import gather_linear  # noqa: F401  (importing the package registers the operator)
from support import make_inputs

OPERATOR = torch.ops.gather_linear.forward.default

# (R, B, H, K, bias, head_major, which inputs require grad)
SAMPLES = [
    (4, 12, 32, 56, True, False, ()),
    (4, 12, 32, 56, True, False, ("x", "weight", "bias")),
    (4, 12, 32, 56, False, True, ("x", "weight")),
    (3, 7, 5, 9, True, True, ("weight",)),
    (1, 1, 1, 1, True, False, ("x",)),
    (2, 0, 8, 3, True, False, ()),
]


def sample_args(R, B, H, K, bias, head_major, requires_grad, dtype, device):
    inputs = make_inputs(R, B, H, K, dtype=dtype, device=device, bias=bias, head_major=head_major)
    for name in requires_grad:
        getattr(inputs, name).requires_grad_()
    return inputs.as_tuple()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("sample", SAMPLES, ids=str)
def test_opcheck_cpu(sample, dtype):
    torch.library.opcheck(OPERATOR, sample_args(*sample, dtype, "cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("sample", SAMPLES, ids=str)
def test_opcheck_cuda(sample, dtype):
    torch.library.opcheck(OPERATOR, sample_args(*sample, dtype, "cuda"))
