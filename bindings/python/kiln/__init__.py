"""kiln: JIT-compiled kernels from a C++ DSL, launched on NumPy arrays and PyTorch tensors.

- ``kiln.Runtime(device)`` opens a device ('cpu', 'cuda:0', 'cuda-emu') for launches of
  registered kernels on kiln tensors or anything with ``__dlpack__``, without copies;
- ``kiln.lib`` is the kernel library (matmul, elementwise chains, reductions, softmax and
  norms, pooling, random numbers) on NumPy arrays, PyTorch tensors and kiln tensors;
- ``import kiln.torch`` registers the library as PyTorch operators (``torch.ops.kiln.*``).

docs/python.md is the guide.
"""
import weakref as _weakref

from . import _kiln
from ._kiln import Error, Kernel, Launcher, Stream, Tensor, cache_stats, devices, load_plugin

__version__ = _kiln.__version__
__all__ = ["Error", "Kernel", "Launcher", "Runtime", "Stream", "Tensor", "cache_stats",
           "devices", "lib", "load_plugin", "runtime"]

# Every Runtime made from Python, by the device it opened: kiln.lib finds the runtime of a
# kiln.Tensor here (a tensor belongs to the device its runtime opened).
_by_device = _weakref.WeakValueDictionary()
# The runtimes kiln.runtime() shares, by device name.
_shared = {}


class Runtime(_kiln.Runtime):
    __doc__ = _kiln.Runtime.__doc__

    def __init__(self, device: str = "cpu", checked: bool = False) -> None:
        """Opens `device` ('cpu', 'cuda:N', 'cuda-emu'); checked=True bounds-checks every
        access of every launch (slower; faults name the kernel's line)."""
        super().__init__(device, checked)
        _by_device[self._device_key] = self


def runtime(device: str = "cpu") -> Runtime:
    """The Runtime of `device` that kiln.lib uses for NumPy arrays and PyTorch tensors of that
    device: opened on first use and shared by the whole process."""
    rt = _shared.get(device)
    if rt is None:
        rt = _shared[device] = Runtime(device)
    return rt


def _runtime_of(t: Tensor) -> Runtime:
    """The Runtime that made the kiln tensor `t` (kiln.lib launches on it)."""
    rt = _by_device.get(t._device_key)
    if rt is None:
        raise Error(f"this kiln.Tensor ({t!r}) belongs to a Runtime that is gone or was not made "
                    "in Python; pass runtime= to say which Runtime it belongs to")
    return rt


from . import lib  # noqa: E402  (needs Runtime above)
