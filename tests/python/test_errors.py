"""Bad inputs raise a Python exception whose message starts with the argument's name and gives
the expected and the actual value; nothing crashes, on CPU and CUDA."""

import pytest
import torch

import gather_linear
from support import DEVICES, make_inputs


def seed_inputs(device="cpu"):
    return make_inputs(4, 12, 32, 56, device=device).as_tuple()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda x, w, b: (x[0, 0], w, b), ValueError,
         r"^x: expected rank 3 \(R, B, H\), or \(R, \*batch, H\) of rank 2 or more, got rank 1"),
        (lambda x, w, b: (x.unsqueeze(0), w, b), ValueError, r"^weight: expected size\(1\) == R\*H = 1\*32 = 32, got 128"),
        (lambda x, w, b: (x, w[0], b), ValueError, r"^weight: expected rank 2 \(K, R\*H\), got rank 1"),
        (lambda x, w, b: (x, w, b[None]), ValueError, r"^bias: expected rank 1 \(K\), got rank 2"),
        (lambda x, w, b: (x, w[:, :100], b), ValueError, r"^weight: expected size\(1\) == R\*H = 4\*32 = 128, got 100"),
        (lambda x, w, b: (x, w, b[:55]), ValueError,
         r"^bias: expected size\(0\) == K = 56 \(weight.size\(0\)\), got 55"),
        (lambda x, w, b: (x, w.double(), b), ValueError,
         r"^weight: expected dtype float32 \(the dtype of x\), got float64"),
        (lambda x, w, b: (x, w, b.half()), ValueError,
         r"^bias: expected dtype float32 \(the dtype of x\), got float16"),
        (lambda x, w, b: (x.int(), w.int(), b.int()), NotImplementedError, r"^x: unsupported dtype int32"),
        (lambda x, w, b: (x.to(torch.complex64), w, b), NotImplementedError, r"^x: unsupported dtype ComplexFloat"),
    ],
    ids=["x_rank_1", "x_rank_4_another_split", "weight_rank_1", "bias_rank_2", "weight_not_RH", "bias_not_K",
         "weight_dtype", "bias_dtype", "int_inputs", "complex_x"],
)
def test_bad_argument_raises_naming_it(change, error, message, device):
    with pytest.raises(error, match=message):
        gather_linear.forward(*change(*seed_inputs(device)))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "devices, message",
    [
        (("cuda", "cpu", "cuda"), r"^weight: expected device cuda:0 \(the device of x\), got cpu"),
        (("cuda", "cuda", "cpu"), r"^bias: expected device cuda:0 \(the device of x\), got cpu"),
        (("cpu", "cuda", "cuda"), r"^weight: expected device cpu \(the device of x\), got cuda:0"),
        (("cpu", "cpu", "cuda"), r"^bias: expected device cpu \(the device of x\), got cuda:0"),
    ],
    ids=["weight_on_cpu", "bias_on_cpu", "x_on_cpu", "only_bias_on_cuda"],
)
def test_device_mismatch(devices, message):
    x, w, b = (t.to(device) for t, device in zip(seed_inputs(), devices))
    with pytest.raises(ValueError, match=message):
        gather_linear.forward(x, w, b)


@pytest.mark.parametrize("device", DEVICES)
def test_errors_also_under_autograd(device):
    x, w, b = seed_inputs(device)
    w.requires_grad_()
    with pytest.raises(ValueError, match=r"^bias: expected size\(0\) == K = 56"):
        gather_linear.forward(x, w, b[:55])


def test_fake_kernel_reports_the_same_shape_errors():
    # torch.compile traces with the fake kernel; its shape errors carry the same messages.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w, b = (torch.empty(t.shape) for t in seed_inputs())
        assert gather_linear.forward(x, w, b).shape == (12, 56)
        with pytest.raises(ValueError, match=r"^weight: expected size\(1\) == R\*H = 4\*32 = 128, got 100"):
            gather_linear.forward(x, w[:, :100], b)
        with pytest.raises(ValueError, match=r"^x: expected rank 3 \(R, B, H\), got rank 2"):
            torch.ops.gather_linear.forward(x[0], w, b)
        with pytest.raises(ValueError, match=r"^bias: expected rank 1 \(K\), got rank 2"):
            gather_linear.forward(x, w, b[None])
        with pytest.raises(ValueError, match=r"^bias: expected size\(0\) == K = 56 \(weight.size\(0\)\), got 55"):
            gather_linear.forward(x, w, b[:55])
        with pytest.raises(ValueError, match=r"^weight: expected dtype float32 \(the dtype of x\), got float64"):
            gather_linear.forward(x, w.double(), b)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_are_checked_before_y_is_allocated(device):
    # x expanded to 2^46 rows costs nothing, but its y would take 2^50 bytes: a wrong weight must
    # be reported as such, not as the failed allocation of y.
    x = torch.randn(2, 1, 8, device=device).expand(2, 2**46, 8)
    weight = torch.randn(4, 15, device=device)
    with pytest.raises(ValueError, match=r"^weight: expected size\(1\) == R\*H = 2\*8 = 16, got 15"):
        gather_linear.forward(x, weight)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_are_checked_before_they_are_copied(device):
    # The op copies a weight without unit inner stride and a strided bias; expanded to 2^40
    # columns or elements such copies would take terabytes: the wrong size must be reported first.
    x, weight, bias = seed_inputs(device)
    huge_weight = weight[:, :1].expand(56, 2**40)
    with pytest.raises(ValueError, match=r"^weight: expected size\(1\) == R\*H = 4\*32 = 128, got 1099511627776"):
        gather_linear.forward(x, huge_weight, bias)
    huge_bias = bias[:1].expand(2**40)
    with pytest.raises(ValueError,
                       match=r"^bias: expected size\(0\) == K = 56 \(weight.size\(0\)\), got 1099511627776"):
        gather_linear.forward(x, weight, huge_bias)
    # Valid strided ones are still copied and used.
    transposed = weight.t().contiguous().t()
    torch.testing.assert_close(gather_linear.forward(x, transposed, bias.repeat_interleave(2)[::2]),
                               gather_linear.forward(x, weight, bias))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda dy, x, w, mask: (dy[:11], x, w, mask), r"^grad_y: expected size\(0\) == B = 12 \(x.size\(1\)\), got 11"),
        (lambda dy, x, w, mask: (dy.double(), x, w, mask), r"^grad_y: expected dtype float32 \(the dtype of x\)"),
        (lambda dy, x, w, mask: (dy, None, w, mask), r"^x: needed for the gradient of weight \(output_mask\[1\]\)"),
        (lambda dy, x, w, mask: (dy, x, None, mask), r"^weight: needed for the gradient of x \(output_mask\[0\]\)"),
        (lambda dy, x, w, mask: (dy, x, w[:, :100], mask), r"^weight: expected size\(1\) == R\*H = 4\*32 = 128"),
    ],
    ids=["grad_y_rows", "grad_y_dtype", "x_missing", "weight_missing", "weight_not_RH"],
)
def test_backward_op_names_the_bad_argument(change, message, device):
    # The op autograd calls, called directly (its fake kernel checks the same absent inputs).
    x, weight, _ = seed_inputs(device)
    grad_y = torch.ones(12, 56, device=device)
    args = change(grad_y, x, weight, [True, True, True])
    with pytest.raises(ValueError, match=message):
        torch.ops.gather_linear.backward(*args[:3], list(x.shape), args[3])
    if args[1] is None or args[2] is None:
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args[:3]]
            with pytest.raises(ValueError, match=message):
                torch.ops.gather_linear.backward(*fake, list(x.shape), args[3])
