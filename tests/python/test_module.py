"""GatherLinear is nn.Linear(R*H, K) in its parameters: same names, shapes, initialisation and
state_dict, so checkpoints move both ways; its forward is nn.Linear on the concatenation, with
whatever weight and bias nn.Linear's forward would see (parametrized, substituted, reassigned)."""

import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

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


class Doubled(nn.Module):
    def forward(self, tensor):
        return 2 * tensor


REPLACEMENTS = ["parametrized_weight", "parametrized_bias", "old_weight_norm", "functional_call", "reassigned"]


def replace_parameters(model, case, prefix=""):
    """Replaces the weight and bias of model's submodule `prefix` (model itself for "") as `case`
    does; returns the (weight, bias) model's forward must then use, and the call that runs it.
    The forwards read registered parameters from _parameters, bypassing nn.Module.__getattr__:
    each case is one way they stop being there or are swapped."""
    module = model.get_submodule(prefix)
    weight, bias = module.weight.detach().clone(), None if module.bias is None else module.bias.detach().clone()
    if case == "parametrized_weight":
        parametrize.register_parametrization(module, "weight", Doubled())
        return (2 * weight, bias), model
    if case == "parametrized_bias":
        parametrize.register_parametrization(module, "bias", Doubled())
        return (weight, 2 * bias), model
    if case == "old_weight_norm":  # the parameter deleted, a plain tensor set by a forward pre-hook
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            nn.utils.weight_norm(module, "weight", dim=0)
        module.weight_g.data.mul_(3)
        return (3 * weight, bias), model
    if case == "functional_call":
        names = [f"{prefix}.{name}" if prefix else name for name in ("weight", "bias")]
        substitutes = {names[0]: torch.randn_like(weight)}
        if bias is not None:
            substitutes[names[1]] = torch.randn_like(bias)
        return ((substitutes[names[0]], substitutes.get(names[1])),
                lambda x: torch.func.functional_call(model, substitutes, (x,)))
    if case == "reassigned":
        module.weight = nn.Parameter(weight.neg())
        if bias is not None:
            module.bias = nn.Parameter(bias.neg())
        return (weight.neg(), None if bias is None else bias.neg()), model
    raise ValueError(case)


@pytest.mark.parametrize(("case", "bias"), [(case, bias) for case in REPLACEMENTS for bias in (True, False)
                                             if bias or case != "parametrized_bias"])
def test_forward_sees_the_parameters_linear_would(case, bias):
    (weight, bias_used), forward = replace_parameters(GatherLinear(3, 8, 10, bias=bias), case)
    x = make_inputs(3, 5, 8, 10).x
    torch.testing.assert_close(forward(x), reference_forward(x, weight, bias_used))
