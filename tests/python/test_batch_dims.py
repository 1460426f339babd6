"""x (R, *batch, H) with other than one batch dimension, as nn.Linear takes (*, in): y (*batch, K).
gather_linear.forward, GatherLinear and ModelNew fold the batch dimensions into B (a view where
their strides allow, else a copy) and must give what nn.Linear gives on the concatenation
torch.cat(list(x), -1), forward and backward. The op itself stays (R, B, H)."""

import pytest
import torch
from torch import nn

import gather_linear
from gather_linear import kernelbench
from support import DEVICES, assert_matches_reference

R, H, K = 4, 32, 56


def unfused(x, weight, bias):
    """Model's computation: the slices laid end to end on the last dimension, then nn.Linear."""
    return nn.functional.linear(torch.cat(x.unbind(0), dim=-1), weight, bias)


def one_sample(generator):
    return torch.randn(R, H, generator=generator, dtype=torch.float64)


def contiguous_4d(generator):
    return torch.randn(R, 3, 5, H, generator=generator, dtype=torch.float64)


def attention_token_major(generator):
    # (N, T, heads, head_dim), as flash attention lays out its output: N and T merge into B, a view.
    return torch.randn(3, 5, R, H, generator=generator, dtype=torch.float64).permute(2, 0, 1, 3)


def attention_head_major(generator):
    # (N, heads, T, head_dim) stored contiguous: N and T do not merge, so B is a copy.
    return torch.randn(3, R, 5, H, generator=generator, dtype=torch.float64).permute(1, 0, 2, 3)


def rank_5(generator):
    return torch.randn(2, R, 3, 2, H, generator=generator, dtype=torch.float64).movedim(1, 0)


def empty_batch(generator):
    return torch.randn(R, 3, 0, H, generator=generator, dtype=torch.float64)


LAYOUTS = [one_sample, contiguous_4d, attention_token_major, attention_head_major, rank_5, empty_batch]


def inputs_in(layout, dtype, device):
    generator = torch.Generator().manual_seed(0)
    x = layout(generator)
    weight = torch.randn(K, R * H, generator=generator, dtype=torch.float64) / (R * H) ** 0.5
    bias = torch.randn(K, generator=generator, dtype=torch.float64)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, weight, bias))


def test_layouts_are_what_they_claim():
    # The cases must cover both ways the batch dimensions fold: in place and through a copy.
    def folds_in_place(x):
        return x.reshape(R, -1, H).data_ptr() == x.data_ptr()
    assert folds_in_place(attention_token_major(torch.Generator()))
    assert not folds_in_place(attention_head_major(torch.Generator()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_forward_matches_linear_on_cat(layout, dtype, device):
    x, weight, bias = inputs_in(layout, dtype, device)
    y = gather_linear.forward(x, weight, bias)
    assert y.shape == (*x.shape[1:-1], K)
    reference64 = unfused(*(t.double() for t in (x, weight, bias)))
    assert_matches_reference(y, unfused(x, weight, bias), reference64, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda f: f.__name__)
def test_module_trains_like_linear_on_cat(layout, device):
    x, _, _ = inputs_in(layout, torch.float32, device)
    module = gather_linear.GatherLinear(R, H, K).to(device)
    linear = nn.Linear(R * H, K).to(device)
    linear.load_state_dict(module.state_dict())
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    grad_y = torch.randn(*x.shape[1:-1], K, device=device)

    y = module(x_ours)
    expected = linear(torch.cat(x_theirs.unbind(0), dim=-1))
    torch.testing.assert_close(y, expected)
    y.backward(grad_y)
    expected.backward(grad_y)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad)
    torch.testing.assert_close(module.weight.grad, linear.weight.grad)
    torch.testing.assert_close(module.bias.grad, linear.bias.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(R, H), (R, 2, 6, H), (R, 1, 2, 3, H)], ids=str)
def test_model_new_matches_model(shape, device):
    models = []
    for model_class in (kernelbench.Model, kernelbench.ModelNew):
        torch.manual_seed(42)
        models.append(model_class().to(device))
    x = torch.randn(shape, device=device)
    with torch.no_grad():
        expected, actual = (model(x) for model in models)
    assert actual.shape == expected.shape == (*shape[1:-1], K)
    torch.testing.assert_close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_wrong_shapes_raise_naming_x(device):
    weight = torch.randn(K, R * H, device=device)
    module = gather_linear.GatherLinear(R, H, K).to(device)
    with pytest.raises(ValueError, match=r"^x: expected rank 3 \(R, B, H\), or \(R, \*batch, H\) of rank 2 or more, "
                                         r"got rank 1"):
        gather_linear.forward(torch.randn(R * H, device=device), weight)
    with pytest.raises(ValueError, match=r"^weight: expected size\(1\) == R\*H = 4\*31 = 124, got 128"):
        gather_linear.forward(torch.randn(R, 2, 3, 31, device=device), weight)
    for shape in [(R * H,), (R, 2, 3, 31), (R + 1, 2, 3, H)]:
        with pytest.raises(ValueError, match=r"^x: expected shape \(R, B, H\) = \(4, B, 32\), or \(R, \*batch, H\), "
                                             + r"got " + str(shape).replace("(", r"\(").replace(")", r"\)")):
            module(torch.randn(shape, device=device))


def test_the_op_itself_stays_rank_3():
    x, weight, bias = inputs_in(contiguous_4d, torch.float32, "cpu")
    with pytest.raises(ValueError, match=r"^x: expected rank 3 \(R, B, H\), got rank 4"):
        torch.ops.gather_linear.forward(x, weight, bias)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_module_over_batch_dims(device):
    torch._dynamo.reset()
    module = gather_linear.GatherLinear(R, H, K).to(device)
    compiled = torch.compile(module, fullgraph=True)
    for layout in (attention_token_major, attention_head_major):
        x, _, _ = inputs_in(layout, torch.float32, device)
        x_compiled, x_eager = x.clone().requires_grad_(), x.clone().requires_grad_()
        compiled(x_compiled).sum().backward()
        module(x_eager).sum().backward()
        torch.testing.assert_close(x_compiled.grad, x_eager.grad)
    torch._dynamo.reset()
