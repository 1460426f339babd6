"""What the Python tests share: input builders, the reference (nn.Linear on the materialised
concatenation), gradients through the op and through the reference, and the tolerance rules.

Tolerances follow from the precision: float32/float64 results must match an fp64 reference
tightly; float16/bfloat16 results are judged against PyTorch's own error at that precision (the
unfused computation, cat then linear, against the same fp64 reference): err <= 2 * err_torch +
a small absolute term for outputs near zero.
"""

import math
from dataclasses import dataclass

import pytest
import torch

import gather_linear

DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
LOW_PRECISION = (torch.float16, torch.bfloat16)
EXACT_TOLERANCE = {torch.float32: 2e-5, torch.float64: 1e-12}
LOW_PRECISION_SLACK = 1e-5


@dataclass
class Inputs:
    x: torch.Tensor  # (R, B, H)
    weight: torch.Tensor  # (K, R*H)
    bias: torch.Tensor | None  # (K)

    def as_tuple(self):
        return self.x, self.weight, self.bias

    def to(self, dtype):
        """The same values in another dtype (for the references), detached."""
        bias = None if self.bias is None else self.bias.detach().to(dtype)
        return Inputs(self.x.detach().to(dtype), self.weight.detach().to(dtype), bias)


def make_inputs(R, B, H, K, *, dtype=torch.float32, device="cpu", bias=True, head_major=False, seed=0):
    """Random inputs at nn.Linear's scale. head_major: x is a (B, R, H) buffer viewed as (R, B, H)."""
    generator = torch.Generator().manual_seed(seed)
    shape = (B, R, H) if head_major else (R, B, H)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    weight = torch.randn(K, R * H, generator=generator, dtype=torch.float64) / math.sqrt(max(R * H, 1))
    b = torch.randn(K, generator=generator, dtype=torch.float64) if bias else None

    def place(t):
        return t.to(device=device, dtype=dtype)

    x = place(x)
    return Inputs(x.permute(1, 0, 2) if head_major else x, place(weight), None if b is None else place(b))


def reference_forward(x, weight, bias):
    """What the operator replaces: materialise the concatenation, then nn.Linear."""
    R, B, H = x.shape
    gathered = torch.cat(x.unbind(0), dim=-1) if R > 0 else x.new_empty(B, 0)  # cat() rejects R = 0
    return torch.nn.functional.linear(gathered, weight, bias)


def assert_matches_reference(actual, torch_result, reference64, dtype, what="output"):
    """actual: ours; torch_result: PyTorch's unfused result at the same precision; reference64:
    the fp64 reference."""
    assert actual.shape == reference64.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(reference64.shape)}"
    assert actual.dtype == dtype, f"{what}: dtype {actual.dtype} != {dtype}"
    error = (actual.double() - reference64).abs().max().item() if actual.numel() else 0.0
    if dtype in LOW_PRECISION:
        torch_error = (torch_result.double() - reference64).abs().max().item() if actual.numel() else 0.0
        bound = 2 * torch_error + LOW_PRECISION_SLACK
        assert error <= bound, \
            f"{what}: max error {error:.3g} > 2 * PyTorch's {torch_error:.3g} + {LOW_PRECISION_SLACK}"
    else:
        scale = max(reference64.abs().max().item(), 1.0) if actual.numel() else 1.0
        bound = EXACT_TOLERANCE[dtype] * scale
        assert error <= bound, f"{what}: max error {error:.3g} > {bound:.3g}"


def requiring_grad(inputs, which):
    """A copy of `inputs` whose tensors named in `which` ("x", "weight", "bias") require grad."""
    def leaf(name, t):
        return None if t is None else t.detach().clone().requires_grad_(name in which)

    x = inputs.x.detach().clone() if "x" not in which else inputs.x.detach().clone().requires_grad_()
    return Inputs(x, leaf("weight", inputs.weight), leaf("bias", inputs.bias))


def gradients(function, inputs, grad_y):
    function(*inputs.as_tuple()).backward(grad_y)
    return {name: getattr(inputs, name).grad for name in ("x", "weight", "bias") if getattr(inputs, name) is not None}


def gradients_three_ways(inputs, grad_y, dtype, wrap=lambda function: function):
    """Every input's gradient through wrap(the op), through wrap(the materialised concatenation)
    in dtype, and through the latter in float64; grad_y is float64."""
    everything = ("x", "weight", "bias")
    device = inputs.x.device
    ours = gradients(wrap(gather_linear.forward), requiring_grad(inputs, everything),
                     grad_y.to(device=device, dtype=dtype))
    torch_grads = gradients(wrap(reference_forward), requiring_grad(inputs.to(dtype), everything),
                            grad_y.to(device=device, dtype=dtype))
    reference64 = gradients(wrap(reference_forward), requiring_grad(inputs.to(torch.float64), everything),
                            grad_y.to(device=device))
    return ours, torch_grads, reference64
