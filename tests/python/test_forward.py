"""Forward results against nn.Linear on the materialised concatenation, over dtypes, layouts of x
(contiguous, head-major, sliced, broadcast), with and without bias, on awkward sizes."""

import pytest
import torch

import gather_linear
from support import DEVICES, Inputs, assert_matches_reference, make_inputs, reference_forward

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# (R, B, H, K): the seed problem, its K/B variants, primes and ones, a B*K past the latency range.
SHAPES = [(4, 12, 32, 56), (4, 24, 32, 57), (3, 97, 40, 59), (1, 1, 1, 1), (5, 7, 3, 1), (8, 130, 64, 112)]


def check_forward(inputs, dtype):
    actual = gather_linear.forward(*inputs.as_tuple())
    torch_result = reference_forward(*inputs.to(dtype).as_tuple())
    reference64 = reference_forward(*inputs.to(torch.float64).as_tuple())
    assert actual.device == inputs.x.device
    assert actual.is_contiguous()
    assert_matches_reference(actual, torch_result, reference64, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_linear_on_cat(shape, bias, head_major, dtype, device):
    check_forward(make_inputs(*shape, dtype=dtype, device=device, bias=bias, head_major=head_major), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_head_major_x_is_read_in_place(device):
    inputs = make_inputs(4, 12, 32, 56, device=device, head_major=True)
    assert not inputs.x.is_contiguous()
    check_forward(inputs, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_sliced_x_with_storage_offset(device):
    R, B, H, K = 3, 10, 16, 24
    big = make_inputs(R + 1, 2 * B + 1, H + 5, K, device=device)
    x = big.x[1:, 1::2, 2 : 2 + H]  # offset into storage, row stride 2*(H+5), padding between rows
    weight = big.weight[:, : R * H]  # row stride (R+1)*(H+5) > R*H
    inputs = type(big)(x, weight, big.bias)
    check_forward(inputs, torch.float32)


def one_element_in(t):
    """The same values in a view that starts one element into its storage (off every vector boundary)."""
    storage = t.new_empty(t.numel() + 1)
    view = storage[1:].view(t.shape)
    view.copy_(t)
    return view


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (8, 256, 64, 512)], ids=lambda s: "x".join(map(str, s)))
def test_operands_one_element_into_their_storage(shape, dtype, device):
    """Every operand misaligned: the vectorised and TMA paths must refuse it, and the larger shape
    reaches the unfused path on CUDA, whose cuBLASLt bias epilogue gets an aligned copy of the bias."""
    inputs = make_inputs(*shape, dtype=dtype, device=device)
    shifted = Inputs(one_element_in(inputs.x), one_element_in(inputs.weight), one_element_in(inputs.bias))
    assert shifted.bias.data_ptr() % 16 != 0
    check_forward(shifted, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_x_with_zero_strides(device):
    inputs = make_inputs(4, 1, 32, 56, device=device)
    inputs.x = inputs.x.expand(4, 9, 32)  # stride(1) == 0: every row of the batch is the same
    check_forward(inputs, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (8, 130, 64, 112)], ids=lambda s: "x".join(map(str, s)))
def test_x_with_unit_batch_stride(shape, dtype, device):
    """x stored (R, H, B) and viewed as (R, B, H): the gathered rows sit side by side (the larger
    shape takes the CPU engine's packed path)."""
    inputs = make_inputs(*shape, dtype=dtype, device=device)
    inputs.x = inputs.x.transpose(1, 2).contiguous().transpose(1, 2)
    assert inputs.x.stride(1) == 1
    check_forward(inputs, dtype)


def with_overlapping_rows(weight, row_stride):
    """weight's leading values viewed as (K, R*H) rows `row_stride` < R*H apart (0: every row the
    same), which cuBLAS cannot read."""
    K, RH = weight.shape
    storage = weight.reshape(-1)[: (K - 1) * row_stride + RH].clone()
    return storage.as_strided((K, RH), (row_stride, 1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("row_stride", [0, 8])
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (8, 256, 64, 512)], ids=lambda s: "x".join(map(str, s)))
def test_weight_rows_that_overlap(shape, row_stride, dtype, device):
    """On CUDA the larger shape is beyond the latency kernel (but for float64): the dispatcher must
    pick a fused kernel that reads the weight through its row stride, as unfused cannot."""
    inputs = make_inputs(*shape, dtype=dtype, device=device)
    inputs.weight = with_overlapping_rows(inputs.weight, row_stride)
    assert inputs.weight.stride(0) < inputs.weight.shape[1]
    check_forward(inputs, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_weight_is_accepted(device):
    inputs = make_inputs(2, 5, 8, 12, device=device)
    inputs.weight = inputs.weight.t().contiguous().t()  # same values, stride(1) != 1
    check_forward(inputs, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(4, 0, 32, 56), (4, 12, 32, 0), (0, 12, 32, 56), (4, 12, 0, 56)], ids=str)
def test_empty_dimensions(shape, device):
    inputs = make_inputs(*shape, device=device)
    actual = gather_linear.forward(*inputs.as_tuple())
    assert actual.shape == (shape[1], shape[3])
    torch.testing.assert_close(actual, reference_forward(*inputs.as_tuple()))


def set_tf32_through(api, enabled):
    """Each of PyTorch's ways to allow TF32 in float32 matmuls."""
    if api == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    elif api == "allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = enabled
    else:
        torch.set_float32_matmul_precision("high" if enabled else "highest")


@pytest.mark.gpu
@pytest.mark.parametrize("api", ["fp32_precision", "allow_tf32", "set_float32_matmul_precision"])
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (16, 2048, 64, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_float32_follows_torch_tf32_setting(shape, api):
    # TF32 exactly when nn.Linear's cuBLAS matmul would use it: with it off the result is
    # float32-accurate; with it on it is as accurate as PyTorch's own TF32 result, within noise
    # (truncating the operands to TF32 instead of rounding them gave 2.5x PyTorch's error here).
    inputs = make_inputs(*shape, device="cuda")
    reference64 = reference_forward(*inputs.to(torch.float64).as_tuple())
    try:
        set_tf32_through(api, False)
        exact = gather_linear.forward(*inputs.as_tuple())
        assert_matches_reference(exact, None, reference64, torch.float32)
        set_tf32_through(api, True)
        tf32 = gather_linear.forward(*inputs.as_tuple())
        error = (tf32.double() - reference64).abs().max().item()
        torch_error = (reference_forward(*inputs.as_tuple()).double() - reference64).abs().max().item()
        assert error <= 1.5 * torch_error + 1e-5, f"tf32: error {error:.3g} vs PyTorch's {torch_error:.3g}"
        if shape[1] * shape[3] > 1_000_000:
            # Where tensor cores pay off, allowing TF32 must change the computation.
            assert not torch.equal(tf32, exact), "TF32 allowed, yet the result is the exact one: the setting was lost"
    finally:
        set_tf32_through(api, False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_result_on_current_stream(dtype):
    # The kernel must run on PyTorch's current stream: work queued on a side stream before it
    # (writing x, late: the stream sleeps first) has to be visible, with no synchronisation beyond
    # stream order. A kernel on another stream would read x's NaN poison.
    inputs = make_inputs(4, 12, 32, 56, dtype=dtype, device="cuda")
    x = torch.full_like(inputs.x, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # some milliseconds of GPU time
        x.copy_(inputs.x)
        actual = gather_linear.forward(x, inputs.weight, inputs.bias)
    torch.cuda.current_stream().wait_stream(side)
    torch_result = reference_forward(*inputs.to(dtype).as_tuple())
    assert_matches_reference(actual, torch_result, reference_forward(*inputs.to(torch.float64).as_tuple()), dtype)
