"""A kiln kernel as a PyTorch custom operator (torch.library).

kiln's `row_sum` kernel runs on the tensors' own memory (DLPack, no copy): CPU tensors on the
`cpu` runtime, CUDA tensors on `cuda:N` and on PyTorch's current stream, so the kernel is
ordered with the work around it. torch.compile sees the operator `kiln_example::row_sum`
(register_fake gives its output's shape).

    PYTHONPATH=build/python python3 examples/python/torch_custom_op.py
"""
import torch

import kiln

_UNITS = 256  # row_sum's comptime `units`: the cube size it requires
_runtimes = {}


def _runtime(device: torch.device) -> kiln.Runtime:
    name = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    if name not in _runtimes:
        _runtimes[name] = kiln.Runtime(name)
    return _runtimes[name]


@torch.library.custom_op("kiln_example::row_sum", mutates_args=())
def row_sum(a: torch.Tensor) -> torch.Tensor:
    """The sum of each row of a 2-D float32 tensor."""
    if a.dim() != 2 or a.dtype != torch.float32:
        raise ValueError("row_sum takes a 2-D float32 tensor")
    a = a.contiguous()
    out = torch.empty(a.shape[0], dtype=a.dtype, device=a.device)
    rt = _runtime(a.device)
    if a.is_cuda:
        stream = rt.wrap_stream(torch.cuda.current_stream(a.device).cuda_stream)
        rt.launch_on(stream, "row_sum", a.shape[0], _UNITS, a, out, units=_UNITS)
        rt.sync(stream)  # a kernel's faults (checked mode, asserts) come back here
    else:
        rt.launch("row_sum", a.shape[0], _UNITS, a, out, units=_UNITS)
        rt.sync()
    return out


@row_sum.register_fake
def _(a: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape[0])


if __name__ == "__main__":
    a = torch.randn(1000, 512)
    got = torch.ops.kiln_example.row_sum(a)
    print("max difference from torch.sum:", (got - a.sum(dim=1)).abs().max().item())
