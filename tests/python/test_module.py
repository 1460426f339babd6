"""GatherLinear is nn.Linear(R*H, K) in its parameters: same names, shapes, initialisation and
state_dict, so checkpoints move both ways; its forward is nn.Linear on the concatenation."""

import pytest
import torch
from torch import nn

from gather_linear import GatherLinear
from support import make_inputs, reference_forward


@pytest.mark.parametrize("bias", [True, False])
def test_same_seed_same_parameters_as_linear(bias):
    torch.manual_seed(7)
    linear = nn.Linear(4 * 32, 56, bias=bias)
    torch.manual_seed(7)
    module = GatherLinear(4, 32, 56, bias=bias)
    assert module.state_dict().keys() == linear.state_dict().keys()
    for name, value in linear.state_dict().items():
        assert torch.equal(module.state_dict()[name], value), name
    assert [n for n, _ in module.named_parameters()] == [n for n, _ in linear.named_parameters()]


@pytest.mark.parametrize("bias", [True, False])
def test_checkpoints_move_both_ways(bias):
    linear = nn.Linear(3 * 8, 10, bias=bias)
    module = GatherLinear(3, 8, 10, bias=bias)
    module.load_state_dict(linear.state_dict())
    x = make_inputs(3, 5, 8, 10).x
    torch.testing.assert_close(module(x), reference_forward(x, linear.weight, linear.bias))

    fresh_linear = nn.Linear(3 * 8, 10, bias=bias)
    fresh_linear.load_state_dict(GatherLinear(3, 8, 10, bias=bias).state_dict())  # strict: same keys, shapes


def test_attributes_match_linear():
    module = GatherLinear(4, 32, 56, dtype=torch.float64)
    assert (module.in_features, module.out_features, module.R, module.H) == (128, 56, 4, 32)
    assert module.weight.shape == (56, 128) and module.bias.shape == (56,)
    assert module.weight.dtype == torch.float64
    assert "R=4, H=32, K=56, bias=True" in repr(module)


def test_rejects_input_of_another_split():
    module = GatherLinear(4, 32, 56)
    with pytest.raises(ValueError, match=r"^x: expected shape \(R, B, H\) = \(4, B, 32\), or \(R, \*batch, H\), "
                                         r"got \(8, 12, 16\)"):
        module(torch.randn(8, 12, 16))  # R*H matches, but this is not the module's (R, H)
