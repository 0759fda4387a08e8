"""A kiln kernel as a PyTorch custom operator (torch.library), on CPU tensors.

kiln's `row_sum` kernel runs on the tensor's own memory (DLPack, no copy); torch.compile and
autograd-free graphs see it as the operator `kiln_example::row_sum`.

    PYTHONPATH=build/python python3 examples/python/torch_custom_op.py
"""
import torch

import kiln

_rt = kiln.Runtime("cpu")
_UNITS = 256  # row_sum's comptime `units`: the cube size it requires


@torch.library.custom_op("kiln_example::row_sum", mutates_args=())
def row_sum(a: torch.Tensor) -> torch.Tensor:
    """The sum of each row of a 2-D float32 CPU tensor."""
    if a.dim() != 2 or a.dtype != torch.float32 or a.device.type != "cpu":
        raise ValueError("row_sum takes a 2-D float32 CPU tensor")
    a = a.contiguous()
    out = torch.empty(a.shape[0], dtype=a.dtype)
    _rt.launch("row_sum", a.shape[0], _UNITS, a, out, units=_UNITS)
    _rt.sync()
    return out


@row_sum.register_fake
def _(a: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape[0])


if __name__ == "__main__":
    a = torch.randn(1000, 512)
    got = torch.ops.kiln_example.row_sum(a)
    print("max difference from torch.sum:", (got - a.sum(dim=1)).abs().max().item())
