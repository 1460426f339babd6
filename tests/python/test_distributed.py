"""More than one device: the op on a second GPU, whichever GPU is current, and under
torch.distributed, one process per device: data-parallel training of GatherLinear against
nn.Linear (DistributedDataParallel, and FSDP2's fully_shard), and a tensor-parallel activation
gathered from every rank into one (R, B, H) buffer that the op reads in place (the "virtual
all-gather"), and the op on DTensors: forward and backward on every sharding it runs without
communication, a double backward, and GatherLinear trained as a column-wise and a row-wise
tensor-parallel layer.
The distributed tests run on the CPU too (gloo, two processes), so CI covers them; on CUDA (NCCL)
they need two GPUs (one DTensor test runs on one)."""

import datetime
import gc
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.nn.parallel import DistributedDataParallel

import gather_linear
from support import (assert_matches_reference, gradients, gradients_three_ways, make_inputs, reference_forward,
                     requiring_grad)

WORLD = 2
DISTRIBUTED_DEVICES = [pytest.param("cpu", id="cpu_gloo"), pytest.param("cuda", id="cuda_nccl", marks=pytest.mark.gpu)]


def needs_two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")


# ---- The second GPU ----

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
# The latency kernel, the weight-streaming kernel, the GETT (16-bit; float32 takes the tensor-core
# kernel or cuBLASLt) and its split reduction.
@pytest.mark.parametrize("shape", [(4, 12, 32, 56), (32, 8, 128, 2048), (8, 1024, 128, 1024), (64, 48, 128, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_second_gpu_forward_and_gradients(shape, dtype):
    needs_two_gpus()
    torch.cuda.set_device(0)
    inputs = make_inputs(*shape, dtype=dtype, device="cuda:1", head_major=True)
    y = gather_linear.forward(*inputs.as_tuple())
    assert y.device == torch.device("cuda:1")
    assert torch.cuda.current_device() == 0
    reference64 = reference_forward(*inputs.to(torch.float64).as_tuple())
    assert_matches_reference(y, reference_forward(*inputs.to(dtype).as_tuple()), reference64, dtype)

    grad_y = torch.randn(y.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ours, torch_grads, exact = gradients_three_ways(inputs, grad_y, dtype)
    assert torch.cuda.current_device() == 0
    for name, grad in ours.items():
        assert grad.device == torch.device("cuda:1")
        assert_matches_reference(grad, torch_grads[name], exact[name], dtype, what=f"grad of {name}")


@pytest.mark.gpu
@pytest.mark.parametrize("devices, message", [
    (("cuda:0", "cuda:1", "cuda:0"), r"^weight: expected device cuda:0 \(the device of x\), got cuda:1"),
    (("cuda:1", "cuda:1", "cuda:0"), r"^bias: expected device cuda:1 \(the device of x\), got cuda:0"),
], ids=["weight_on_the_other", "bias_on_the_other"])
def test_operands_on_two_gpus_are_refused(devices, message):
    needs_two_gpus()
    inputs = make_inputs(4, 12, 32, 56)
    x, weight, bias = (t.to(device) for t, device in zip(inputs.as_tuple(), devices))
    with pytest.raises(ValueError, match=message):
        gather_linear.forward(x, weight, bias)
    with pytest.raises(ValueError, match=message):  # through the autograd kernel too
        gather_linear.forward(x, weight.requires_grad_(), bias)
    for device in ("cuda:0", "cuda:1"):  # and no CUDA error surfaces later
        torch.cuda.synchronize(device)


@pytest.mark.gpu
def test_second_gpu_graph_capture():
    """Captured on a stream of the second GPU, replayed on new inputs."""
    needs_two_gpus()
    torch.cuda.set_device(0)
    module = gather_linear.GatherLinear(8, 64, 200).to("cuda:1")
    x = torch.randn(8, 300, 64, device="cuda:1")
    stream = torch.cuda.Stream(device="cuda:1")
    with torch.no_grad(), torch.cuda.stream(stream):
        module(x)  # one call before capture (the unfused fallback's cuBLASLt handle, scratch)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            y = module(x)
        for seed in range(3):
            x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)))
            graph.replay()
            stream.synchronize()
            expected = reference_forward(x.double(), module.weight.double(), module.bias.double())
            torch.testing.assert_close(y.double(), expected, atol=1e-4, rtol=1e-4)


# ---- torch.distributed: one process per device ----

def spawn(body, device_type, tmp_path, *args, world=WORLD):
    """Runs body(rank, device, *args) in `world` processes, one per device, in one process group."""
    if device_type == "cuda" and world > 1:
        needs_two_gpus()
    mp.spawn(rank_main, args=(device_type, str(tmp_path / "rendezvous"), world, body, *args), nprocs=world)


def rank_main(rank, device_type, rendezvous, world, body, *args):
    """Joins the process group (NCCL on CUDA, gloo on the CPU), runs the body on this rank's
    device, and leaves the group only once every object the body made is gone: a DDP or FSDP
    wrapper that outlived the group could hang or abort the process on its way out."""
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method=f"file://{rendezvous}",
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        body(rank, torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu"), *args)
        gc.collect()  # the wrappers' reference cycles too
        dist.barrier()
    finally:
        dist.destroy_process_group()


def whole(parameter):
    """A parameter's full value, gathered where FSDP shards it."""
    parameter = parameter.detach()
    return parameter.full_tensor() if isinstance(parameter, DTensor) else parameter


def train_beside_linear(rank, device, wrapping):
    R, B, H, K = 4, 12, 32, 56
    torch.manual_seed(0)  # the same initial parameters on every rank
    ours = gather_linear.GatherLinear(R, H, K).to(device)
    linear = nn.Linear(R * H, K).to(device)
    linear.load_state_dict(ours.state_dict())
    if wrapping == "ddp":
        device_ids = [rank] if device.type == "cuda" else None
        models = [DistributedDataParallel(ours, device_ids=device_ids),
                  DistributedDataParallel(linear, device_ids=device_ids)]
    else:  # FSDP2: each rank holds a shard of every parameter, gathered for the forward
        # The mesh named: by default fully_shard takes the GPU's wherever there is one, and would
        # move the gloo group's CPU parameters there.
        mesh = init_device_mesh(device.type, (WORLD,))
        models = [fully_shard(ours, mesh=mesh), fully_shard(linear, mesh=mesh)]
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.5) for model in models]
    data = torch.Generator().manual_seed(100 + rank)  # every rank its own batches
    for _ in range(3):
        x, target = torch.randn(R, B, H, generator=data).to(device), torch.randn(B, K, generator=data).to(device)
        for model, optimizer, model_input in zip(models, optimizers, (x, torch.cat(list(x), dim=-1))):
            optimizer.zero_grad()
            F.mse_loss(model(model_input), target).backward()
            optimizer.step()
    # The gradients were averaged over the ranks: the same steps as nn.Linear's, and the same bits
    # on every rank.
    for name in ("weight", "bias"):
        mine = whole(getattr(ours, name))
        torch.testing.assert_close(mine, whole(getattr(linear, name)), atol=1e-5, rtol=1e-5)
        everyone = [torch.empty_like(mine) for _ in range(WORLD)]
        dist.all_gather(everyone, mine)
        assert all(torch.equal(everyone[0], theirs) for theirs in everyone), f"{name} differs between ranks"


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
@pytest.mark.parametrize("wrapping", ["ddp", "fully_shard"])
def test_data_parallel_training_matches_linear(wrapping, device_type, tmp_path):
    spawn(train_beside_linear, device_type, tmp_path, wrapping)


def project_gathered_shards(rank, device, dtype):
    B, H, K = 512, 128, 512
    # Every rank holds its shard (B, H) of the activation; all_gather_into_tensor lays the shards
    # end to end in one buffer, which is x (WORLD, B, H) as it is: no torch.cat.
    full = make_inputs(WORLD, B, H, K, dtype=dtype, device=device, seed=5)
    shard = full.x[rank].clone()
    gathered = torch.empty(WORLD * B, H, dtype=dtype, device=device)
    dist.all_gather_into_tensor(gathered, shard)
    y = gather_linear.forward(gathered.view(WORLD, B, H), full.weight, full.bias)
    torch_result = reference_forward(*full.to(dtype).as_tuple())
    assert_matches_reference(y, torch_result, reference_forward(*full.to(torch.float64).as_tuple()), dtype)


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_tensor_parallel_shards_gathered_in_place(device_type, dtype, tmp_path):
    spawn(project_gathered_shards, device_type, tmp_path, dtype)


# ---- DTensor: the op on sharded tensors (gather_linear.dtensor) ----

# The placements forward runs on each rank's shards without communication (x, weight, bias; y).
# Row-wise takes a replicated bias, which DTensor makes Partial by division, without communication.
SHARDINGS = {
    "replicated": ((Replicate(), Replicate(), Replicate()), Replicate()),
    "batch_rows": ((Shard(1), Replicate(), Replicate()), Shard(0)),
    "column_wise": ((Replicate(), Shard(0), Shard(0)), Shard(1)),
    "row_wise": ((Shard(0), Shard(1), Replicate()), Partial()),
    "partial_x": ((Partial(), Replicate(), Partial()), Partial()),
    "partial_weight": ((Replicate(), Partial(), Partial()), Partial()),
}
# Placements that no strategy takes as they are: DTensor redistributes them.
REDISTRIBUTED = {
    "x_slices_split": ((Shard(2), Shard(1), Replicate()), None),  # each rank part of every slice
}


def run_on_dtensors(rank, device, dtype):
    world = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))
    # Odd rows and outputs (uneven shards); R = 3 does not split into whole slices on two ranks,
    # so row-wise placements are redistributed there. The first two are small enough that autograd
    # takes the backward op on any CPU, the third large enough for ATen's composition on some
    # (python/csrc/autograd.cpp).
    for R, B, H, K in [(4, 13, 32, 57), (3, 8, 16, 24), (4, 64, 32, 96)]:
        for name, (placements, y_placement) in (SHARDINGS | REDISTRIBUTED).items():
            for bias in (True, False):
                case = f"{name}, {(R, B, H, K)}, bias={bias}"
                full = make_inputs(R, B, H, K, dtype=dtype, device=device, bias=bias, seed=7)  # alike on every rank
                leaves = [None if t is None else distribute_tensor(t, mesh, [p]).requires_grad_()
                          for t, p in zip(full.as_tuple(), placements)]
                with CommDebugMode() as communication:
                    y = gather_linear.forward(*leaves)
                runs_as_placed = name in SHARDINGS and (R % world == 0 or name != "row_wise")
                if world > 1:
                    assert (communication.get_total_counts() == 0) == runs_as_placed, case
                if runs_as_placed:
                    assert y.placements == (y_placement,), case
                torch_result = reference_forward(*full.to(dtype).as_tuple())
                assert_matches_reference(y.full_tensor(), torch_result,
                                         reference_forward(*full.to(torch.float64).as_tuple()), dtype, what=case)

                grad_y = torch.randn(B, K, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
                y.full_tensor().backward(grad_y.to(device=device, dtype=dtype))
                everything = ("x", "weight", "bias")
                torch_grads = gradients(reference_forward, requiring_grad(full.to(dtype), everything),
                                        grad_y.to(device=device, dtype=dtype))
                exact = gradients(reference_forward, requiring_grad(full.to(torch.float64), everything),
                                  grad_y.to(device))
                for leaf, gradient in zip(leaves, everything):
                    if leaf is not None:
                        assert_matches_reference(leaf.grad.full_tensor(), torch_grads[gradient], exact[gradient],
                                                 dtype, what=f"grad of {gradient}, {case}")


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_dtensor_shardings_forward_and_backward(device_type, dtype, tmp_path):
    spawn(run_on_dtensors, device_type, tmp_path, dtype)


def first_and_second_gradients(forward, leaves, grad_y, probes, whole):
    """The gradients of every leaf under create_graph (the composed formulas, python/csrc/autograd.cpp),
    then those of <dX, probes[0]> + <dW, probes[1]> with respect to x and the weight."""
    wanted = [leaf for leaf in leaves if leaf is not None]
    first = torch.autograd.grad(whole(forward(*leaves)), wanted, grad_y, create_graph=True)
    probed = sum((whole(gradient) * probe).sum() for gradient, probe in zip(first, probes))
    second = torch.autograd.grad(probed, wanted[:2])
    return [whole(g) for g in first], [whole(g) for g in second]


def run_double_backward_on_dtensors(rank, device, dtype):
    # create_graph composes ATen ops in C++ on DTensors. Where a rank holds part of a slice (R = 3
    # on two ranks, or x split within its slices), DTensor refuses the views between x's slices and
    # the concatenation's columns, and the composition splits and joins them instead.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for R, B, H, K in [(4, 13, 32, 57), (3, 8, 16, 24)]:
        for name, (placements, _) in (SHARDINGS | REDISTRIBUTED).items():
            case = f"{name}, {(R, B, H, K)}"
            full = make_inputs(R, B, H, K, dtype=dtype, device=device, seed=11)
            generator = torch.Generator().manual_seed(4)
            grad_y, probe_x, probe_weight = (torch.randn(shape, generator=generator, dtype=torch.float64).to(device)
                                             for shape in ((B, K), (R, B, H), (K, R * H)))
            leaves = [distribute_tensor(t, mesh, [p]).requires_grad_() for t, p in zip(full.as_tuple(), placements)]
            ours = first_and_second_gradients(gather_linear.forward, leaves, grad_y.to(dtype),
                                              (probe_x.to(dtype), probe_weight.to(dtype)), DTensor.full_tensor)
            expected = []
            for precision in (dtype, torch.float64):
                plain = requiring_grad(full.to(precision), ("x", "weight", "bias"))
                expected.append(first_and_second_gradients(reference_forward, plain.as_tuple(), grad_y.to(precision),
                                                           (probe_x.to(precision), probe_weight.to(precision)),
                                                           lambda t: t))
            (torch_first, torch_second), (exact_first, exact_second) = expected
            for what, mine, torch_result, exact in [
                    *zip(("grad of x", "grad of weight", "grad of bias"), ours[0], torch_first, exact_first),
                    *zip(("d<dX, v>/dW", "d<dW, u>/dx"), reversed(ours[1]), reversed(torch_second),
                         reversed(exact_second))]:
                assert_matches_reference(mine, torch_result, exact, dtype, what=f"{what}, {case}")


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
def test_dtensor_double_backward(device_type, tmp_path):
    spawn(run_double_backward_on_dtensors, device_type, tmp_path, torch.float32)


@pytest.mark.gpu
def test_dtensor_on_one_gpu(tmp_path):
    # One rank: the CUDA kernels, the backward op's DTensor rule, and the composed double backward
    # under DTensor's dispatch.
    spawn(run_on_dtensors, "cuda", tmp_path, torch.float32, world=1)
    spawn(run_double_backward_on_dtensors, "cuda", tmp_path, torch.float32, world=1)


def train_sharded_beside_linear(rank, device, style):
    # GatherLinear's parameters sharded as a tensor-parallel layer's (distribute_module), trained
    # beside nn.Linear on the concatenation, unsharded: every rank sees the same batches.
    R, B, H, K = 4, 12, 32, 56
    weight_placement, bias_placement, x_placement = {
        "column_wise": (Shard(0), Shard(0), Replicate()),  # each rank its outputs
        "row_wise": (Shard(1), Replicate(), Shard(0)),  # each rank its slices (heads) of x
    }[style]
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    torch.manual_seed(0)
    ours = gather_linear.GatherLinear(R, H, K).to(device)
    linear = nn.Linear(R * H, K).to(device)
    linear.load_state_dict(ours.state_dict())

    def shard_parameters(name, module, mesh):
        for parameter_name, placement in (("weight", weight_placement), ("bias", bias_placement)):
            sharded = distribute_tensor(getattr(module, parameter_name).detach(), mesh, [placement])
            module.register_parameter(parameter_name, nn.Parameter(sharded))

    distribute_module(ours, mesh, shard_parameters)
    optimizers = [torch.optim.SGD(model.parameters(), lr=0.5) for model in (ours, linear)]
    data = torch.Generator().manual_seed(100)
    for _ in range(3):
        x, target = torch.randn(R, B, H, generator=data).to(device), torch.randn(B, K, generator=data).to(device)
        for optimizer in optimizers:
            optimizer.zero_grad()
        F.mse_loss(ours(distribute_tensor(x, mesh, [x_placement])).full_tensor(), target).backward()
        F.mse_loss(linear(torch.cat(list(x), dim=-1)), target).backward()
        for optimizer in optimizers:
            optimizer.step()
    for name, placement in (("weight", weight_placement), ("bias", bias_placement)):
        mine = getattr(ours, name)
        assert isinstance(mine, DTensor) and mine.placements == (placement,), name  # still sharded as placed
        torch.testing.assert_close(whole(mine), whole(getattr(linear, name)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
@pytest.mark.parametrize("style", ["column_wise", "row_wise"])
def test_sharded_module_trains_like_linear(style, device_type, tmp_path):
    spawn(train_sharded_beside_linear, device_type, tmp_path, style)


IMPORT_ORDER_SCRIPT = """
import sys
import torch
{first}
{second}
assert "gather_linear.dtensor" in sys.modules
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
x, weight = torch.randn(4, 12, 32), torch.randn(56, 128)
y = gather_linear.forward(distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(weight, mesh, [Shard(0)]))
assert torch.equal(y.full_tensor(), gather_linear.forward(x, weight))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("gather_linear_first", [True, False], ids=["gather_linear_first", "dtensor_first"])
def test_dtensor_support_whichever_package_comes_first(gather_linear_first, tmp_path):
    # gather_linear.dtensor is imported along with torch.distributed.tensor, not before: that one's
    # import takes about 0.4 s.
    ours = "import gather_linear"
    if gather_linear_first:
        ours += '\nassert "gather_linear.dtensor" not in sys.modules'
    theirs = "import torch.distributed.tensor"
    first, second = (ours, theirs) if gather_linear_first else (theirs, ours)
    script = IMPORT_ORDER_SCRIPT.format(first=first, second=second)
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "rendezvous")], check=True, timeout=120)


def compile_on_dtensors(rank, device):
    # torch.compile(fullgraph=True) over DTensors: the op's sharding strategy and the backward's
    # DTensor rule traced (row-wise: x's slices and the weight's columns sharded), against eager.
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    full = make_inputs(4, 12, 32, 56, device=device, seed=11)

    def project(x, weight, bias):
        return torch.relu(gather_linear.forward(x, weight, bias)).full_tensor()

    results = []
    for function in (project, torch.compile(project, fullgraph=True)):
        torch._dynamo.reset()
        leaves = [distribute_tensor(t, mesh, [p]).requires_grad_()
                  for t, p in zip(full.as_tuple(), (Shard(0), Shard(1), Replicate()))]
        y = function(*leaves)
        y.sum().backward()
        results.append([y] + [leaf.grad.full_tensor() for leaf in leaves])
    for name, eager, compiled in zip(("y", "x", "weight", "bias"), *results):
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("device_type", DISTRIBUTED_DEVICES)
def test_compiled_on_dtensors(device_type, tmp_path):
    spawn(compile_on_dtensors, device_type, tmp_path)
