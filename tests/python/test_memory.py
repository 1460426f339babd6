"""A forward allocates its output and nothing else, all through PyTorch's caching allocator:
torch.cuda.max_memory_allocated rises by exactly the bytes the allocator gives a tensor of y's
size, and no memory is left allocated but y."""

import pytest
import torch

import gather_linear
from support import make_inputs

pytestmark = pytest.mark.gpu


def allocator_bytes_for(shape, dtype):
    """What the caching allocator charges for one tensor of this shape (it rounds sizes up)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    t = torch.empty(shape, dtype=dtype, device="cuda")
    charged = torch.cuda.memory_allocated() - before
    del t
    return charged


# float32 shapes that the dispatcher runs with fused kernels that need no workspace: the
# KernelBench shapes (latency kernel) and a large one (tensor-core kernel). A shape sent to the
# unfused fallback would also allocate its concatenation buffer, through the same allocator.
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (4, 24, 32, 168), (16, 1024, 64, 1024)], ids=str)
@pytest.mark.parametrize("head_major", [False, True], ids=["contiguous", "head_major"])
def test_forward_allocates_only_its_output(shape, head_major):
    inputs = make_inputs(*shape, device="cuda", head_major=head_major)
    gather_linear.forward(*inputs.as_tuple())  # first call: library and context setup
    expected = allocator_bytes_for((shape[1], shape[3]), torch.float32)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = gather_linear.forward(*inputs.as_tuple())
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before == expected
    assert torch.cuda.memory_allocated() - before == expected
    del y


def test_batch_dims_that_merge_are_read_in_place():
    # An attention output laid out (N, T, heads, head_dim), viewed (heads, N, T, head_dim): N and
    # T fold into B as a view, so the forward still allocates only y (N, T, K).
    N, T, R, H, K = 2, 512, 8, 64, 1024
    x = torch.randn(N, T, R, H, device="cuda").permute(2, 0, 1, 3)
    weight, bias = torch.randn(K, R * H, device="cuda"), torch.randn(K, device="cuda")
    gather_linear.forward(x, weight, bias)
    expected = allocator_bytes_for((N, T, K), torch.float32)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = gather_linear.forward(x, weight, bias)
    torch.cuda.synchronize()
    assert y.shape == (N, T, K)
    assert torch.cuda.max_memory_allocated() - before == expected
    del y


# 24 rows against a 16 MB bfloat16 weight of 16 64-row tiles: on an H200 the GETT splits the
# reduction into 8 parts (16 tiles x 8 blocks fill one wave of its 132 SMs), whose float32 partial
# sums (8 x 24 x 1024 floats) are the call's scratch. They come from the caching allocator with y
# and go back to it when the op returns.
@pytest.mark.skipif(
    not torch.cuda.is_available()
    or torch.cuda.get_device_capability() != (9, 0)
    or torch.cuda.get_device_properties(0).multi_processor_count != 132,
    reason="the split reduction's part count is the H200's (sm_90, 132 SMs)",
)
def test_split_reduction_scratch_comes_from_the_caching_allocator():
    R, B, H, K = 64, 24, 128, 1024
    inputs = make_inputs(R, B, H, K, dtype=torch.bfloat16, device="cuda", head_major=True)
    gather_linear.forward(*inputs.as_tuple())
    expected_y = allocator_bytes_for((B, K), torch.bfloat16)
    partial_sums = allocator_bytes_for((8 * B * K,), torch.float32)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    y = gather_linear.forward(*inputs.as_tuple())
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before == expected_y + partial_sums
    assert torch.cuda.memory_allocated() - before == expected_y
    del y
