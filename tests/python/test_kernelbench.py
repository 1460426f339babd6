"""ModelNew as a KernelBench harness judges it: torch.manual_seed(42) before constructing Model and
again before ModelNew gives identical weights; five fresh inputs match at atol = rtol = 1e-4; the
problem's variants (other K and B, set as module constants before construction) work too."""

import pytest
import torch

from gather_linear import kernelbench
from support import DEVICES, reference_forward
from test_module import REPLACEMENTS, replace_parameters

VARIANTS = [
    {},  # the seed problem
    {"K": 57},
    {"K": 112},
    {"K": 168},
    {"B": 24},
    {"R": 8, "H": 16},
]


def construct(model_class, device):
    torch.manual_seed(42)
    if device == "cuda":
        torch.cuda.manual_seed(42)
    return model_class(*kernelbench.get_init_inputs()).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_model_new_matches_model(variant, device, monkeypatch):
    for name, value in variant.items():
        monkeypatch.setattr(kernelbench, name, value)
    model = construct(kernelbench.Model, device)
    model_new = construct(kernelbench.ModelNew, device)
    for name, parameter in model.state_dict().items():
        assert torch.equal(model_new.state_dict()[name], parameter), f"{name} differs after the same seed"

    torch.manual_seed(0)
    with torch.no_grad():
        for _ in range(5):
            inputs = [t.to(device) for t in kernelbench.get_inputs()]
            expected = model(*inputs)
            actual = model_new(*inputs)
            assert actual.shape == expected.shape == (kernelbench.B, kernelbench.K)
            torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


def test_constants_are_the_seed_problem():
    assert (kernelbench.R, kernelbench.B, kernelbench.H, kernelbench.K) == (4, 12, 32, 56)
    assert kernelbench.get_init_inputs() == []
    (x,) = kernelbench.get_inputs()
    assert x.shape == (4, 12, 32) and x.dtype == torch.float32


def test_model_new_takes_sizes_from_its_input():
    model_new = construct(kernelbench.ModelNew, "cpu")
    x = torch.randn(4, 5, 32)  # another batch size than the module constant B
    assert model_new(x).shape == (5, 56)


# Model rejects these too: its concatenation's last dimension is not proj.in_features.
@pytest.mark.parametrize("shape", [(128,), (4, 12), (4, 12, 31), (3, 12, 32), (4, 12, 32, 1)], ids=str)
def test_model_new_rejects_wrong_input_shape(shape):
    model_new = construct(kernelbench.ModelNew, "cpu")
    with pytest.raises(ValueError, match=r"^x: expected shape \(R, B, H\), or \(R, \*batch, H\), with R\*H == "
                                         r"proj.in_features = 128"):
        model_new(torch.randn(shape))


def test_model_new_trains_like_model():
    model, model_new = construct(kernelbench.Model, "cpu"), construct(kernelbench.ModelNew, "cpu")
    (x,) = kernelbench.get_inputs()
    model(x).square().sum().backward()
    model_new(x).square().sum().backward()
    for (name, p), p_new in zip(model.named_parameters(), model_new.parameters()):
        torch.testing.assert_close(p_new.grad, p.grad, msg=f"grad of {name}")


# Not the old weight_norm: its forward pre-hook belongs to proj, which ModelNew reads but never calls.
@pytest.mark.parametrize("case", [case for case in REPLACEMENTS if case != "old_weight_norm"] + ["replaced_proj"])
def test_model_new_sees_the_parameters_model_would(case):
    # ModelNew reads proj and its parameters from _modules and _parameters: what replaces them
    # must reach its forward as it reaches Model's.
    model_new = construct(kernelbench.ModelNew, "cpu")
    if case == "replaced_proj":
        model_new.proj = torch.nn.Linear(kernelbench.R * kernelbench.H, kernelbench.K)
        (weight, bias), forward = (model_new.proj.weight, model_new.proj.bias), model_new
    else:
        (weight, bias), forward = replace_parameters(model_new, case, "proj")
    (x,) = kernelbench.get_inputs()
    torch.testing.assert_close(forward(x), reference_forward(x, weight, bias))
