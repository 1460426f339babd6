"""torch.library.opcheck: the schema, the fake kernel, the autograd registration and
torch.compile's view of the operators (aot_dispatch) agree with the real kernels; forward, and
backward with every subset of gradients and of the inputs it may go without."""

import pytest
import torch

import gather_linear  # noqa: F401  (importing the package registers the operator)
from support import make_inputs

OPERATOR = torch.ops.gather_linear.forward.default
BACKWARD = torch.ops.gather_linear.backward.default

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
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("sample", SAMPLES, ids=str)
def test_opcheck_cuda(sample, dtype):
    torch.library.opcheck(OPERATOR, sample_args(*sample, dtype, "cuda"))


# (R, B, H, K, head_major, output_mask); x is passed only where the weight's gradient needs it and
# weight only where x's does, as autograd passes them.
BACKWARD_SAMPLES = [
    (4, 12, 32, 56, False, (True, True, True)),
    (4, 12, 32, 56, True, (True, True, False)),
    (3, 7, 5, 9, False, (True, False, True)),
    (3, 7, 5, 9, True, (False, True, False)),
    (2, 5, 130, 3, False, (False, False, True)),
    (2, 0, 8, 3, False, (True, True, True)),
]


def backward_args(R, B, H, K, head_major, output_mask, dtype, device):
    inputs = make_inputs(R, B, H, K, dtype=dtype, device=device, head_major=head_major)
    grad_y = torch.randn(B, K, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(device, dtype)
    want_x, want_weight, _ = output_mask
    return (grad_y, inputs.x if want_weight else None, inputs.weight if want_x else None, [R, B, H], list(output_mask))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("sample", BACKWARD_SAMPLES, ids=str)
def test_opcheck_backward_cpu(sample, dtype):
    torch.library.opcheck(BACKWARD, backward_args(*sample, dtype, "cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("sample", BACKWARD_SAMPLES, ids=str)
def test_opcheck_backward_cuda(sample, dtype):
    torch.library.opcheck(BACKWARD, backward_args(*sample, dtype, "cuda"))
