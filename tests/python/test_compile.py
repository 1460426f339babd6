"""torch.compile(fullgraph=True): the operator, the module and ModelNew compile without a graph
break (fullgraph raises on one), forward and backward, and give the eager results."""

import contextlib

import pytest
import torch

import gather_linear
from gather_linear import kernelbench
from support import DEVICES, make_inputs


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def projection_then_activation(x, weight, bias):
    # Surrounding PyTorch ops that inductor fuses around the custom op.
    return torch.relu(gather_linear.forward(x * 2, weight, bias)) + 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
def test_compiled_function_forward_and_backward(head_major, device):
    inputs = make_inputs(4, 12, 32, 56, device=device, head_major=head_major)
    leaves = [t.detach().clone().requires_grad_() for t in inputs.as_tuple()]
    compiled = torch.compile(projection_then_activation, fullgraph=True)

    expected = projection_then_activation(*leaves)
    expected.sum().backward()
    expected_grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None

    actual = compiled(*leaves)
    actual.sum().backward()
    torch.testing.assert_close(actual, expected)
    for leaf, expected_grad in zip(leaves, expected_grads):
        torch.testing.assert_close(leaf.grad, expected_grad)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_with_dynamic_batch(device):
    module = gather_linear.GatherLinear(4, 32, 56).to(device)
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for batch in (12, 24, 7):
            x = make_inputs(4, batch, 32, 56, device=device).x
            torch.testing.assert_close(compiled(x), module(x))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_model_new(device):
    model = kernelbench.ModelNew().to(device)
    compiled = torch.compile(model, fullgraph=True)
    x = make_inputs(kernelbench.R, kernelbench.B, kernelbench.H, kernelbench.K, device=device).x
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_training_with_dynamic_batch_compiles_once(device):
    # The backward's sizes stay symbolic: a new batch size reuses the compiled graph.
    module = gather_linear.GatherLinear(4, 32, 56).to(device)
    reference = gather_linear.GatherLinear(4, 32, 56).to(device)
    reference.load_state_dict(module.state_dict())
    compiled = torch.compile(module, fullgraph=True, dynamic=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for batch in (12, 24, 7):
            x = make_inputs(4, batch, 32, 56, device=device, head_major=True).x.requires_grad_()
            x_reference = x.detach().clone().requires_grad_()
            compiled(x).sum().backward()
            reference(x_reference).sum().backward()
            torch.testing.assert_close(x.grad, x_reference.grad)
    torch.testing.assert_close(module.weight.grad, reference.weight.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", [("x", "weight", "bias"), ("weight",), ("x",)], ids="+".join)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_compiled_autograd_over_an_eager_forward(which, bias, device):
    # Compiled autograd (torch._dynamo.compiled_autograd) traces the backward of a forward that ran
    # eagerly, through the op's graph node: its gradients must be eager autograd's.
    from torch._dynamo import compiled_autograd

    inputs = make_inputs(4, 12, 32, 56, device=device, bias=bias)

    def gradients(compiled):
        leaves = [None if t is None else t.detach().clone().requires_grad_(name in which)
                  for name, t in zip(("x", "weight", "bias"), inputs.as_tuple())]
        loss = gather_linear.forward(*leaves).square().sum()
        with compiled_autograd._enable(torch.compile(backend="eager")) if compiled else contextlib.nullcontext():
            loss.backward()
        return [None if t is None else t.grad for t in leaves]

    for actual, expected in zip(gradients(compiled=True), gradients(compiled=False)):
        if expected is None:
            assert actual is None
        else:
            torch.testing.assert_close(actual, expected)
