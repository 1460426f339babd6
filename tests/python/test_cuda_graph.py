"""CUDA graphs: a forward captured in torch.cuda.CUDAGraph replays on new inputs written into
the captured buffers (nothing allocated outside PyTorch's pool, nothing synchronised, the launch
on the capturing stream)."""

import pytest
import torch

import gather_linear
from support import assert_matches_reference, make_inputs, reference_forward

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (8, 512, 64, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_capture_then_replay_with_new_inputs(shape, dtype):
    static = make_inputs(*shape, dtype=dtype, device="cuda", head_major=True, seed=0)
    # Warm up on a side stream, as torch.cuda.graphs documents, so one-time setup stays out of
    # the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        gather_linear.forward(*static.as_tuple())
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = gather_linear.forward(*static.as_tuple())

    for seed in (1, 2, 3):
        fresh = make_inputs(*shape, dtype=dtype, device="cuda", head_major=True, seed=seed)
        static.x.copy_(fresh.x)
        static.weight.copy_(fresh.weight)
        static.bias.copy_(fresh.bias)
        static_y.fill_(float("nan"))  # a replay that wrote nothing would leave NaNs
        graph.replay()
        torch.cuda.synchronize()
        assert_matches_reference(static_y, reference_forward(*fresh.as_tuple()),
                                 reference_forward(*fresh.to(torch.float64).as_tuple()), dtype)


def test_module_in_graph_tree_via_compile():
    # torch.compile(mode="reduce-overhead") captures the compiled module in CUDA graphs.
    torch._dynamo.reset()
    module = gather_linear.GatherLinear(4, 32, 56).cuda()
    compiled = torch.compile(module, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for seed in range(4):
            x = make_inputs(4, 12, 32, 56, device="cuda", seed=seed).x
            torch.testing.assert_close(compiled(x).clone(), module(x))
    torch._dynamo.reset()
