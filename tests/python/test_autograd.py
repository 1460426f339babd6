"""The autograd formula: gradcheck in float64, and gradients against nn.Linear on the
concatenation for every dtype and layout, for any subset of inputs that require grad."""

import itertools

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import gather_linear
from support import (DEVICES, Inputs, assert_matches_reference, gradients, gradients_three_ways, make_inputs,
                     reference_forward, requiring_grad)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_gradcheck_float64(bias, head_major, device):
    inputs = requiring_grad(make_inputs(3, 5, 4, 6, dtype=torch.float64, device=device, bias=bias,
                                        head_major=head_major), ("x", "weight", "bias"))
    assert torch.autograd.gradcheck(gather_linear.forward, inputs.as_tuple())
    assert torch.autograd.gradgradcheck(gather_linear.forward, inputs.as_tuple())


@pytest.mark.parametrize("which", [c for n in (1, 2) for c in itertools.combinations(("x", "weight", "bias"), n)],
                         ids="+".join)
def test_gradcheck_subsets_of_inputs(which):
    inputs = requiring_grad(make_inputs(2, 3, 4, 5, dtype=torch.float64), which)
    assert torch.autograd.gradcheck(gather_linear.forward, inputs.as_tuple())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
# Odd and tile-sized shapes and empty problems (the C++ suites force each of the GPU backward's
# forms; here it takes those it chooses).
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (3, 97, 40, 57), (2, 17, 128, 9), (2, 17, 16, 2100),
                                   (3, 0, 128, 5), (0, 5, 128, 4), (2, 6, 128, 0)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gradients_match_linear_on_cat(shape, head_major, dtype, device):
    inputs = make_inputs(*shape, dtype=dtype, device=device, head_major=head_major)
    grad_y = torch.randn(shape[1], shape[3], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ours, torch_grads, reference64 = gradients_three_ways(inputs, grad_y, dtype)
    for name, grad in ours.items():
        assert grad.shape == getattr(inputs, name).shape
        if reference64[name] is None:  # x with R = 0 never reaches the reference's (empty) concatenation
            assert grad.numel() == 0
            continue
        assert_matches_reference(grad, torch_grads[name], reference64[name], dtype, what=f"grad of {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (8, 256, 64, 512)], ids=lambda s: "x".join(map(str, s)))
def test_gradients_through_an_expanded_weight_row(shape, dtype, device):
    """One weight row shared by every output (weight.stride(0) == 0): the forward reads it in place
    and autograd sums the weight's gradient back into the row."""
    R, B, H, K = shape
    inputs = make_inputs(*shape, dtype=dtype, device=device)
    inputs.weight = inputs.weight[:1]
    grad_y = torch.randn(B, K, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def through_expanded_row(function):
        return lambda x, row, bias: function(x, row.expand(K, R * H), bias)

    ours, torch_grads, reference64 = gradients_three_ways(inputs, grad_y, dtype, through_expanded_row)
    for name, grad in ours.items():
        assert_matches_reference(grad, torch_grads[name], reference64[name], dtype, what=f"grad of {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
@pytest.mark.parametrize("output_mask", [m for m in itertools.product((False, True), repeat=3) if any(m)],
                         ids=lambda m: "".join("xwb"[i] for i in range(3) if m[i]))
def test_backward_op_matches_linear_on_cat(output_mask, head_major, dtype, device):
    # The op autograd calls on the GPU, called directly with only the inputs each gradient reads
    # (on the CPU autograd uses it only for some dtypes on some processors, so this is where the
    # op's other CPU paths are checked).
    # x's gradient comes laid out (B, R, H).
    shape = (3, 37, 24, 20)
    inputs = make_inputs(*shape, dtype=dtype, device=device, head_major=head_major)
    grad_y = torch.randn(shape[1], shape[3], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    everything = ("x", "weight", "bias")
    want_x, want_weight, _ = output_mask
    ours = torch.ops.gather_linear.backward(grad_y.to(device=device, dtype=dtype), inputs.x if want_weight else None,
                                            inputs.weight if want_x else None, list(inputs.x.shape), list(output_mask))
    torch_grads = gradients(reference_forward, requiring_grad(inputs.to(dtype), everything),
                            grad_y.to(device=device, dtype=dtype))
    reference64 = gradients(reference_forward, requiring_grad(inputs.to(torch.float64), everything),
                            grad_y.to(device=device))
    names = [name for name, wanted in zip(everything, output_mask) if wanted]
    assert len(ours) == len(names)
    for name, grad in zip(names, ours):
        assert grad.shape == getattr(inputs, name).shape
        assert_matches_reference(grad, torch_grads[name], reference64[name], dtype, what=f"grad of {name}")
    if want_x:
        assert ours[0].transpose(0, 1).is_contiguous()


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_matches_linear_on_cat(device):
    # create_graph differentiates the backward itself (grad mode is on inside it): the composed
    # formulas rather than the op, whose first-order gradients the GPU otherwise computes.
    inputs = make_inputs(3, 9, 128, 7, device=device)

    def second_order_gradients(function, inputs):
        leaves = requiring_grad(inputs, ("x", "weight", "bias"))
        y = function(*leaves.as_tuple())
        grad_x, grad_weight = torch.autograd.grad(y.square().sum(), (leaves.x, leaves.weight), create_graph=True)
        (grad_x.square().sum() + grad_weight.square().sum()).backward()
        return [t.grad for t in leaves.as_tuple()]

    ours = second_order_gradients(gather_linear.forward, inputs)
    theirs = second_order_gradients(reference_forward, inputs)
    exact = second_order_gradients(reference_forward, inputs.to(torch.float64))
    for name, *grads in zip(("x", "weight", "bias"), ours, theirs, exact):
        assert_matches_reference(*grads, torch.float32, what=f"second-order grad of {name}")


def test_only_requested_gradients_are_computed():
    inputs = requiring_grad(make_inputs(2, 3, 4, 5), ("weight",))
    gather_linear.forward(*inputs.as_tuple()).sum().backward()
    assert inputs.x.grad is None and inputs.bias.grad is None
    assert inputs.weight.grad is not None


def test_gradients_of_a_subset_asked_of_torch_autograd_grad():
    # torch.autograd.grad for x alone: the node computes only x's gradient, though all require grad.
    inputs = requiring_grad(make_inputs(2, 3, 4, 5, dtype=torch.float64), ("x", "weight", "bias"))
    y = gather_linear.forward(*inputs.as_tuple())
    grad_y = torch.randn_like(y)
    (grad_x,) = torch.autograd.grad(y, inputs.x, grad_y)
    expected = (grad_y @ inputs.weight.detach()).view(3, 2, 4).transpose(0, 1)
    torch.testing.assert_close(grad_x, expected)


def test_graph_node_keeps_autograd_rules_for_saved_inputs():
    # A second backward through freed buffers, and an input changed in place after the forward
    # saved it, raise PyTorch's own errors rather than give wrong gradients.
    inputs = requiring_grad(make_inputs(2, 3, 4, 5), ("weight", "bias"))
    y = gather_linear.forward(*inputs.as_tuple())
    assert y.grad_fn.name() == "GatherLinearBackward"
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()

    y = gather_linear.forward(*inputs.as_tuple())
    inputs.x.add_(1)  # x is saved for weight's gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_saved_tensor_hooks_and_activation_checkpointing(device):
    # The node's saved x and weight go through torch.autograd.graph's saved-tensor hooks, which
    # offloading and torch.utils.checkpoint (non-reentrant) build on.
    inputs = make_inputs(4, 12, 32, 56, device=device)
    everything = ("x", "weight", "bias")

    def loss(x, weight, bias):
        return gather_linear.forward(x, weight, bias).square().sum()

    expected = requiring_grad(inputs, everything)
    loss(*expected.as_tuple()).backward()

    hooked, packed = requiring_grad(inputs, everything), []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.shape) or t.clone(), lambda t: t):
        y = gather_linear.forward(*hooked.as_tuple())
    y.square().sum().backward()
    assert sorted(packed) == sorted([inputs.x.shape, inputs.weight.shape])

    checkpointed = requiring_grad(inputs, everything)
    torch.utils.checkpoint.checkpoint(loss, *checkpointed.as_tuple(), use_reentrant=False).backward()
    for name in everything:
        for actual in (hooked, checkpointed):
            torch.testing.assert_close(getattr(actual, name).grad, getattr(expected, name).grad)


def test_no_graph_without_requires_grad():
    inputs = make_inputs(2, 3, 4, 5)
    y = gather_linear.forward(*inputs.as_tuple())
    assert y.grad_fn is None and not y.requires_grad
    with torch.no_grad():
        y = gather_linear.forward(*requiring_grad(inputs, ("x", "weight")).as_tuple())
    assert y.grad_fn is None and not y.requires_grad


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_ad_matches_linear_on_cat(device):
    # Dual tensors, torch.func.jvp, jacfwd and hessian (jacfwd of jacrev) run the op through a
    # Python autograd.Function with a forward-mode formula.
    dtype = torch.float64
    primals = make_inputs(3, 5, 4, 6, dtype=dtype, device=device).as_tuple()
    tangents = make_inputs(3, 5, 4, 6, dtype=dtype, device=device, seed=1).as_tuple()
    module = gather_linear.GatherLinear(3, 4, 6, device=device, dtype=dtype)

    with fwAD.dual_level():
        duals = [fwAD.make_dual(p, t) for p, t in zip(primals, tangents)]
        ours, theirs = gather_linear.forward(*duals), reference_forward(*duals)
        torch.testing.assert_close(fwAD.unpack_dual(ours).tangent, fwAD.unpack_dual(theirs).tangent)
        module_tangent = fwAD.unpack_dual(module(duals[0])).tangent  # only x is dual here
        torch.testing.assert_close(module_tangent, reference_forward(tangents[0], module.weight, None))

    _, ours = torch.func.jvp(gather_linear.forward, primals, tangents)
    _, theirs = torch.func.jvp(reference_forward, primals, tangents)
    torch.testing.assert_close(ours, theirs)
    x, weight, bias = primals
    torch.testing.assert_close(torch.func.jacfwd(lambda w: gather_linear.forward(x, w, bias))(weight),
                               torch.func.jacrev(lambda w: reference_forward(x, w, bias))(weight))
    torch.testing.assert_close(torch.func.hessian(lambda w: gather_linear.forward(x, w, bias).square().sum())(weight),
                               torch.func.hessian(lambda w: reference_forward(x, w, bias).square().sum())(weight))


def test_op_called_directly_with_dual_tensors_names_the_way_that_works():
    x, weight, bias = make_inputs(3, 5, 4, 6).as_tuple()
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError, match="^gather_linear.forward: for forward-mode AD"):
            torch.ops.gather_linear.forward(fwAD.make_dual(x, torch.ones_like(x)), weight, bias)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_func_grad_vjp_and_jacrev_match_autograd(device):
    # torch.func runs the op through a Python autograd.Function (its interpreters cannot run the C++
    # one), whose backward composes PyTorch ops: the same gradients as torch.autograd's (the
    # library's backward) up to float32 rounding.
    x, weight, bias = make_inputs(3, 5, 4, 6, device=device).as_tuple()
    grad_y = torch.randn(5, 6, generator=torch.Generator().manual_seed(1)).to(device)
    expected = gradients(gather_linear.forward, requiring_grad(Inputs(x, weight, bias), ("x", "weight", "bias")),
                         grad_y)

    grads = torch.func.grad(lambda *args: (gather_linear.forward(*args) * grad_y).sum(), argnums=(0, 1, 2))(
        x, weight, bias)
    for name, grad in zip(("x", "weight", "bias"), grads):
        torch.testing.assert_close(grad, expected[name])
    _, vjp = torch.func.vjp(lambda w: gather_linear.forward(x, w, bias), weight)
    torch.testing.assert_close(vjp(grad_y)[0], expected["weight"])
    jacobian = torch.func.jacrev(lambda b: gather_linear.forward(x, weight, b))(bias)
    torch.testing.assert_close(jacobian, torch.eye(6, device=device).expand(5, 6, 6), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_gradients_with_vmap_of_grad(device):
    module = gather_linear.GatherLinear(3, 4, 6).to(device)
    params = {name: p.detach() for name, p in module.named_parameters()}
    xs = torch.randn(5, 3, 7, 4, generator=torch.Generator().manual_seed(2)).to(device)

    def loss(params, x):
        return torch.func.functional_call(module, params, (x,)).square().sum()

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, xs)
    for i, x in enumerate(xs):
        module.zero_grad()
        module(x).square().sum().backward()
        for name, p in module.named_parameters():
            torch.testing.assert_close(per_sample[name][i], p.grad)


def test_op_called_directly_under_torch_func_names_the_way_that_works():
    inputs = make_inputs(3, 5, 4, 6)
    with pytest.raises(NotImplementedError, match="^gather_linear.forward: under torch.func transforms"):
        torch.func.grad(lambda w: torch.ops.gather_linear.forward(inputs.x, w, inputs.bias).sum())(inputs.weight)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batched", ["x_dim0", "x_dim2", "weight", "x_and_bias"])
def test_vmap_matches_a_loop(batched, device):
    # The batching rule folds a batched x into B (x_dim2: strides that cannot be merged, so a copy)
    # and loops over samples otherwise.
    def inputs(seed):
        return make_inputs(4, 12, 32, 56, device=device, seed=seed).as_tuple()

    samples = [inputs(seed) for seed in range(3)]
    stacked = [torch.stack(parts) for parts in zip(*samples)]
    x, weight, bias = samples[0]
    args, in_dims = {
        "x_dim0": ((stacked[0], weight, bias), (0, None, None)),
        "x_dim2": ((stacked[0].movedim(0, 2), weight, bias), (2, None, None)),
        "weight": ((x, stacked[1], bias), (None, 0, None)),
        "x_and_bias": ((stacked[0], weight, stacked[2]), (0, None, 0)),
    }[batched]
    result = torch.func.vmap(gather_linear.forward, in_dims=in_dims)(*args)
    for i in range(3):
        per_sample = [t if d is None else t.select(d, i) for t, d in zip(args, in_dims)]
        torch.testing.assert_close(result[i], gather_linear.forward(*per_sample))


def test_vmap_keeps_the_ops_errors():
    x, weight, bias = make_inputs(4, 12, 32, 56).as_tuple()
    with pytest.raises(ValueError, match=r"^weight: expected size\(1\) == R\*H"):
        torch.func.vmap(gather_linear.forward, in_dims=(0, None, None))(torch.stack([x, x])[:, :, :, :31], weight, bias)
    with pytest.raises(ValueError, match=r"^x: expected rank 3 \(R, B, H\), or \(R, \*batch, H\)"):
        torch.func.vmap(gather_linear.forward, in_dims=(0, None, None))(x[0], weight, bias)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_runs_in_the_autocast_dtype_like_linear(device):
    # Under torch.autocast nn.Linear casts its float32 inputs to the autocast dtype; the op and the
    # module do the same, forward and backward (float32 parameters get float32 gradients).
    dtype = torch.bfloat16 if device == "cpu" else torch.float16
    inputs = make_inputs(4, 12, 32, 56, device=device)
    module = gather_linear.GatherLinear(4, 32, 56).to(device)
    linear = torch.nn.Linear(4 * 32, 56).to(device)
    linear.load_state_dict(module.state_dict())
    with torch.autocast(device, dtype=dtype):
        ours = module(inputs.x)
        theirs = linear(torch.cat(inputs.x.unbind(0), dim=-1))
        mixed = gather_linear.forward(inputs.x.to(dtype), module.weight, module.bias)  # bfloat16 x, float32 weight
    assert ours.dtype == theirs.dtype == mixed.dtype == dtype
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(mixed, theirs)
    ours.float().sum().backward()
    theirs.float().sum().backward()
    assert module.weight.grad.dtype == torch.float32
    torch.testing.assert_close(module.weight.grad, linear.weight.grad)
    torch.testing.assert_close(module.bias.grad, linear.bias.grad)


def test_bias_may_be_left_out_of_the_op_call():
    x, weight, _ = make_inputs(4, 12, 32, 56).as_tuple()
    torch.testing.assert_close(torch.ops.gather_linear.forward(x, weight), reference_forward(x, weight, None))


def _cpu_flags_and_vendor():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            lines = cpuinfo.read().splitlines()
    except OSError:
        return set(), ""
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    vendor = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), "")
    return set(flags), vendor


def _cpu_backward_through_the_op(dtype, R, B, H, K):
    # python/csrc/autograd.cpp: cpu_problem_is_small (up to 2^18 multiply-adds in float32, 2^17 in
    # float64, 2^22 in 16-bit), else cpu_backward_pays: bfloat16 on AMX tiles, Intel's
    # AVX512-BF16 or without AVX-512, float16 without AVX512-FP16, float32 and float64 on AMD's
    # processors.
    log2_limit = {torch.float32: 18, torch.float64: 17}.get(dtype, 22)
    if R * B * H * K <= 2**log2_limit:
        return True
    flags, vendor = _cpu_flags_and_vendor()
    if dtype == torch.bfloat16:
        return ({"amx_bf16", "amx_tile"} <= flags or "avx512f" not in flags
                or (vendor == "GenuineIntel" and "avx512_bf16" in flags))
    if dtype == torch.float16:
        return "avx512_fp16" not in flags
    return dtype in (torch.float32, torch.float64) and vendor == "AuthenticAMD"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (4, 32, 32, 64), (8, 64, 64, 256)], ids=lambda shape: "x".join(map(str, shape)))
def test_backward_runs_the_op_where_it_pays(shape, dtype, device):
    # python/csrc/autograd.cpp: the backward op on the GPU and, on the CPU, for small problems and
    # where it measured faster on this dtype and processor; ATen's composition elsewhere.
    inputs = requiring_grad(make_inputs(*shape, dtype=dtype, device=device), ("x", "weight", "bias"))
    y = gather_linear.forward(*inputs.as_tuple())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        y.backward(torch.ones_like(y))
    ran_op = any(event.name == "gather_linear::backward" for event in profile.events())
    expected = device == "cuda" or _cpu_backward_through_the_op(dtype, *shape)
    assert ran_op == expected
