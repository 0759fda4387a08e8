"""kiln's kernel library from Python: the entry points of kiln::lib (kernels/lib/*.h), on NumPy
arrays, PyTorch tensors and kiln.Tensors of any strides, without copies.

Each function mirrors its C++ entry point (names, options, element types, semantics and errors;
docs/kernels.md has the details) and:

- takes its tensors as they are (views of any strides where the C++ entry point takes them);
- when no output is given, makes one of its inputs' kind (NumPy in, NumPy out; torch in,
  torch out on the same device; kiln.Tensor in, kiln.Tensor out) and returns it; an output
  given is written in place and returned;
- runs on ``runtime=`` when given, else on the Runtime that made its kiln.Tensors, or on
  ``kiln.runtime(device)`` for NumPy arrays ('cpu') and PyTorch tensors (their device);
- raises kiln.Error naming the argument when an argument does not fit.

NumPy and PyTorch CPU results are complete when the call returns; kiln.Tensor results are
asynchronous, as launches are (``Runtime.sync()`` waits). For CUDA tensors the library runs on
PyTorch's current stream (``Runtime.on_stream``), ordered with PyTorch's work as its own
operations are.

Element types are kiln's names: 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', ... (NumPy has no
bf16: use PyTorch tensors or kiln.Tensors for it).
"""
from typing import Any, Optional, Sequence, Tuple, Union

from . import _kiln
from . import _runtime_of
from . import runtime as _shared
from ._kiln import Error

_L = _kiln._lib

Shape = Tuple[int, ...]
Pair = Union[int, Tuple[int, int]]

__all__ = [
    "attention", "attention_backward", "avg_pool2d", "binary", "broadcast_shape", "conv", "conv_backward_input",
    "conv_backward_weight", "conv_output_shape", "copy", "grouped_matmul", "layer_norm",
    "log_softmax", "map", "matmul", "max_pool2d", "normal", "pool2d_output_shape", "reduce", "reduce_output_shape",
    "reduce_output_type", "rms_norm", "softmax", "unary", "uniform", "OPS", "REDUCE_OPS",
]

#: The operations of map(), unary() and binary() (unary ones first, then binary ones).
OPS: Tuple[str, ...] = tuple(_L.ops)
#: The operations of reduce().
REDUCE_OPS: Tuple[str, ...] = tuple(_L.reduce_ops)

# kiln element type names and NumPy's / PyTorch's.
_NUMPY = {"bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
          "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16",
          "f32": "float32", "f64": "float64"}
_TORCH = dict(_NUMPY, bf16="bfloat16", f8e4m3="float8_e4m3fn", f8e5m2="float8_e5m2")
_FROM_NUMPY = {v: k for k, v in _NUMPY.items()}
_FROM_TORCH = {v: k for k, v in _TORCH.items()}
_TORCH_DTYPES: dict = {}  # torch.dtype objects met so far -> kiln names


def _error(message: str) -> Error:
    e = Error(message)
    e.kind = "invalid argument"
    return e


# The kind of each type met so far ("kiln", "numpy" or "torch"): a dictionary lookup per
# argument instead of attribute lookups (kiln.lib calls cost microseconds; issue 40).
_KINDS: dict = {}


def _kind(x: Any, name: str) -> str:
    """'kiln', 'numpy' or 'torch'; an error naming the argument for anything else."""
    kind = _KINDS.get(type(x))
    if kind is not None:
        return kind
    if isinstance(x, _kiln.Tensor):
        kind = "kiln"
    else:
        module = type(x).__module__.split(".")[0]
        if module == "numpy" and hasattr(x, "__array_interface__"):
            kind = "numpy"
        elif module == "torch" and hasattr(x, "__dlpack__"):
            kind = "torch"
        else:
            raise _error(f"argument '{name}' is a {type(x).__name__}; kiln.lib takes NumPy arrays, "
                         "PyTorch tensors and kiln.Tensors")
    _KINDS[type(x)] = kind
    return kind


def _dtype(x: Any, kind: str, name: str) -> str:
    if kind == "kiln":
        return x.dtype
    if kind == "numpy":
        t = _FROM_NUMPY.get(x.dtype.name)
    else:
        t = _TORCH_DTYPES.get(x.dtype)
        if t is None:
            t = _FROM_TORCH.get(str(x.dtype).replace("torch.", ""))
            if t is not None:
                _TORCH_DTYPES[x.dtype] = t
    if t is None:
        raise _error(f"argument '{name}' holds {x.dtype}, which kiln has no type for")
    return t


def _runtime(x: Any, kind: str, runtime: Any) -> Any:
    if runtime is not None:
        return runtime
    if kind == "kiln":
        return _runtime_of(x)
    if kind == "numpy":
        return _shared("cpu")
    if x.is_cpu:
        return _shared("cpu")
    device = x.device
    if device.type == "cuda":
        return _shared(f"cuda:{device.index or 0}")
    raise _error(f"a PyTorch tensor on {device} has no kiln device (cpu and cuda have)")


# The runtimes of PyTorch's CUDA streams: (device, stream handle) -> the shared cuda:N runtime
# on that stream (Runtime.on_stream), so that kiln.lib's work is ordered with PyTorch's.
_torch_streams: dict = {}


def _on_torch_stream(rt: Any, device: Any) -> Any:
    import torch
    handle = torch.cuda.current_stream(device).cuda_stream
    key = (rt.device, handle)
    on = _torch_streams.get(key)
    if on is None:
        on = _torch_streams[key] = rt.on_stream(rt.wrap_stream(handle))
    return on


class _Call:
    """One library call: its runtime, the kind of its results, and the waits around it."""

    def __init__(self, first: Any, name: str, runtime: Any, **others: Any) -> None:
        self.like = first
        self.kind = _kind(first, name)
        for other, t in others.items():  # every tensor argument is one, or an error naming it
            if t is not None:
                _kind(t, other)
        self.rt = _runtime(first, self.kind, runtime)
        # CUDA tensors: on PyTorch's current stream, ordered with its work, without a wait.
        self.cuda = self.kind == "torch" and first.is_cuda and runtime is None
        if self.cuda:
            self.rt = _on_torch_stream(self.rt, first.device)

    def dtype(self, x: Any, name: str) -> str:
        return _dtype(x, _kind(x, name), name)

    def empty(self, dtype: str, shape: Sequence[int]) -> Any:
        """A new output of the first input's kind."""
        if self.kind == "torch":
            made = _kiln._new_like(self.like, dtype, shape)  # PyTorch's allocator, from C
            if made is not None:
                return made
        shape = tuple(int(s) for s in shape)
        if self.kind == "numpy":
            import numpy
            if dtype not in _NUMPY:
                raise _error(f"the result would be {dtype}, which NumPy lacks; pass an output "
                             "(a PyTorch tensor or a kiln.Tensor) to hold it")
            return numpy.empty(shape, _NUMPY[dtype])
        if self.kind == "torch":
            import torch
            return torch.empty(shape, dtype=getattr(torch, _TORCH[dtype]), device=self.like.device)
        return self.rt.empty(dtype, shape)

    def __enter__(self) -> "_Call":
        return self

    def __exit__(self, failed: Any, *rest: Any) -> None:
        # NumPy and PyTorch CPU callers read their results at once; kiln.Tensors stay
        # asynchronous, and so does CUDA work, which is on PyTorch's stream.
        if failed is None and self.kind != "kiln" and not self.cuda:
            self.rt.sync()


def _shape(x: Any) -> Shape:
    shape = x.shape
    return shape if type(shape) is tuple else tuple(shape)  # torch.Size: a tuple of ints


def _axes(axes: Union[int, Sequence[int], None]) -> list:
    if axes is None:
        return []
    if isinstance(axes, int):
        return [axes]
    return [int(a) for a in axes]


# ---- elementwise ----------------------------------------------------------------------------

def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> Shape:
    """The shape two shapes broadcast to (NumPy's rules), or kiln.Error saying why not."""
    return _L.broadcast_shape(list(a), list(b))


def map(chain: Sequence[Union[str, Tuple[str, str]]], x: Any, out: Any = None, *, y: Any = None,
        z: Any = None, scalars: Sequence[float] = (), runtime: Any = None) -> Any:
    """out = the chain of up to eight operations applied to x, elementwise, in one pass.

    Each step is an operation name (unary: 'exp', 'relu', ...) or a pair (binary operation,
    operand): ('mul', 'x'), ('add', 's0'), ('max', 'y'); operands are 'x', 'y', 'z' (more
    inputs) and 's0'..'s3' (``scalars``). The running value starts as x's element. y and z
    broadcast against out's shape (the broadcast of x's, y's and z's when out is made here);
    arithmetic is f32, rounded once into out (x's type when made here). OPS lists the names.

    >>> kiln.lib.map(["exp", ("mul", "s0"), "relu"], x, scalars=[0.5])
    """
    steps = []
    for i, step in enumerate(chain):
        if isinstance(step, str):
            steps.append((step, ""))
        elif isinstance(step, (tuple, list)) and len(step) == 2:
            steps.append((str(step[0]), str(step[1])))
        else:
            raise _error(f"chain[{i}] is {step!r}; a step is an operation name or a pair "
                         "(operation, operand) such as ('mul', 'y')")
    call = _Call(x, "x", runtime, y=y, z=z, out=out)
    if out is None:
        shape = _shape(x)
        for name, t in (("y", y), ("z", z)):
            if t is not None:
                shape = _L.broadcast_shape(list(shape), list(_shape(t)))
        out = call.empty(call.dtype(x, "x"), shape)
    with call:
        _L.map(call.rt, steps, x, out, y, z, [float(s) for s in scalars])
    return out


def unary(op: str, x: Any, out: Any = None, *, runtime: Any = None) -> Any:
    """out = op(x) elementwise: 'neg', 'abs', 'exp', 'log', 'tanh', 'relu', 'gelu', 'silu', ...
    (the unary names of OPS); f32 arithmetic, rounded once into out (x's type when made here)."""
    call = _Call(x, "x", runtime, out=out)
    if out is None:
        out = call.empty(call.dtype(x, "x"), _shape(x))
    with call:
        _L.unary(call.rt, op, x, out)
    return out


def binary(op: str, a: Any, b: Any, out: Any = None, *, runtime: Any = None) -> Any:
    """out = op(a, b) elementwise with NumPy broadcasting: 'add', 'sub', 'mul', 'div', 'max',
    'min', 'pow', comparisons ('eq', 'lt', ... giving 1 or 0), 'rsub' and 'rdiv' (b - a,
    b / a). out, when made here, has the broadcast shape and a's type."""
    call = _Call(a, "a", runtime, b=b, out=out)
    if out is None:
        out = call.empty(call.dtype(a, "a"), _L.broadcast_shape(list(_shape(a)), list(_shape(b))))
    with call:
        _L.binary(call.rt, op, a, b, out)
    return out


def copy(src: Any, dst: Any, *, runtime: Any = None) -> Any:
    """dst = src, element by element (shapes equal, or src broadcast to dst's), any strides,
    converting the type as the IR's cast does. Returns dst."""
    call = _Call(dst, "dst", runtime, src=src)
    with call:
        _L.copy(call.rt, src, dst)
    return dst


# ---- matmul, softmax, norms -------------------------------------------------------------------

def matmul(a: Any, b: Any, c: Any = None, *, alpha: float = 1.0, beta: float = 0.0,
           transpose_a: bool = False, transpose_b: bool = False, bias: Any = None,
           epilogue: str = "none", allow_tf32: bool = False, out_dtype: Optional[str] = None,
           scale_a: float = 1.0, scale_b: float = 1.0, split_k: int = 0,
           runtime: Any = None) -> Any:
    """c = epilogue(alpha scale_a scale_b op(a) op(b) + beta c + bias): a is [..., M, K]
    ([..., K, M] with transpose_a), b [..., K, N] ([..., N, K] with transpose_b), c [..., M, N];
    batch dimensions (up to three) broadcast. f32, f16, bf16, f8e4m3 or f8e5m2 inputs (both the
    same), f32 products and sums; c holds f32 or the inputs' type, f32, f16 or bf16 for 8-bit
    inputs (out_dtype when c is made here: the inputs' type by default, f32 for 8-bit ones).
    scale_a and scale_b are per-tensor scales (8-bit inputs' dequantization factors). bias is f32
    [N]; epilogue is 'none', 'relu', 'gelu' or 'silu'. allow_tf32 lets a GPU multiply f32 on tensor
    cores; split_k splits a long K on a GPU (0: the library decides, 1: never, N: N parts)."""
    call = _Call(a, "a", runtime, b=b, c=c, bias=bias)
    if c is None:
        sa, sb = _shape(a), _shape(b)
        for name, s in (("a", sa), ("b", sb)):
            if len(s) < 2:
                raise _error(f"argument '{name}' has shape {list(s)}; matmul takes matrices "
                             "(rank 2 or more)")
        m = sa[-1] if transpose_a else sa[-2]
        n = sb[-2] if transpose_b else sb[-1]
        batch = _L.broadcast_shape(list(sa[:-2]), list(sb[:-2]))
        in_dtype = call.dtype(a, "a")
        default = "f32" if in_dtype in ("f8e4m3", "f8e5m2") else in_dtype
        c = call.empty(out_dtype or default, tuple(batch) + (m, n))
    with call:
        _L.matmul(call.rt, a, b, c, float(alpha), float(beta), bool(transpose_a),
                  bool(transpose_b), bias, epilogue, bool(allow_tf32), float(scale_a),
                  float(scale_b), int(split_k))
    return c


def grouped_matmul(a: Any, b: Any, offsets: Any, c: Any = None, *, alpha: float = 1.0,
                   beta: float = 0.0, transpose_b: bool = False, bias: Any = None,
                   epilogue: str = "none", allow_tf32: bool = False,
                   out_dtype: Optional[str] = None, scale_a: float = 1.0, scale_b: float = 1.0,
                   runtime: Any = None) -> Any:
    """A mixture-of-experts layer's products in one call: a's and c's rows come in G groups,
    offsets (int32 [G], on a's device) their cumulative ends as torch._grouped_mm's offs, and
    group g's rows are multiplied by b[g]: c[s:e] = epilogue(alpha scale_a scale_b a[s:e] op(b[g])
    + beta c[s:e] + bias). a is [T, K], b [G, K, N] ([G, N, K] with transpose_b), c [T, N]; bias
    f32 [N] or [G, N]. Rows past offsets[-1] are not written (zeros when c is made here). Types
    and options as matmul's. On a GPU one launch; on the CPU one product per group."""
    call = _Call(a, "a", runtime, b=b, offsets=offsets, c=c, bias=bias)
    if c is None:
        sa, sb = _shape(a), _shape(b)
        if len(sa) != 2 or len(sb) != 3:
            raise _error(f"arguments 'a' and 'b' have shapes {list(sa)} and {list(sb)}; "
                         "grouped_matmul takes a [T, K] and b [G, K, N] ([G, N, K] with "
                         "transpose_b)")
        in_dtype = call.dtype(a, "a")
        default = "f32" if in_dtype in ("f8e4m3", "f8e5m2") else in_dtype
        c = call.empty(out_dtype or default, (sa[0], sb[1] if transpose_b else sb[2]))
        c[...] = 0  # rows outside every group
    with call:
        _L.grouped_matmul(call.rt, a, b, offsets, c, float(alpha), float(beta),
                          bool(transpose_b), bias, epilogue, bool(allow_tf32), float(scale_a),
                          float(scale_b))
    return c


# ---- convolution ------------------------------------------------------------------------------

Ints = Union[int, Sequence[int]]


def conv_output_shape(x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Ints = 1,
                      padding: Union[Ints, str] = 0, padding_end: Optional[Ints] = None,
                      dilation: Ints = 1, groups: int = 1, layout: str = "nchw") -> Shape:
    """The shape of conv()'s output for inputs of these shapes (PyTorch's rule)."""
    return _L.conv_output_shape(list(x_shape), list(w_shape), stride, padding, padding_end,
                                dilation, int(groups), layout)


def attention(q: Any, k: Any, v: Any, out: Any = None, *, causal: bool = False,
              window_left: int = -1, window_right: int = -1, scale: Optional[float] = None,
              bias: Any = None, return_lse: bool = False, out_dtype: Optional[str] = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: int = 0,
              max_seqlen_k: int = 0, runtime: Any = None) -> Any:
    """out = softmax(q k^T * scale + bias, masked) v, flash-style (PyTorch's
    scaled_dot_product_attention): q [B, Hq, Sq, D], k and v [B, Hk, Sk, D] (Hq a multiple of
    Hk; any strides with the last one 1, so BSHD data passes as a transposed view), f16 or bf16
    (or f32 on the CPU); D a multiple of 32 up to 256. causal aligns the last query with the last
    key; window_left and window_right bound a sliding window (-1: unbounded); scale defaults to
    1 / sqrt(D); bias f32 [B or 1, Hq or 1, Sq, Sk]. out of out_dtype (q's type by default, or
    'f32'). With return_lse, returns (out, lse): lse f32 [B, Hq, Sq], the natural log-sum-exp of each row (+inf for a row
    that sees no key, whose output is 0). Variable lengths: q, k, v of one item [1, H, total, D]
    holding every sequence, sequence b in rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q
    (cu_seqlens_k: of k and v; i32 [sequences + 1], from 0); max_seqlen_q/k the longest (0: read
    from the offsets)."""
    call = _Call(q, "q", runtime, k=k, v=v, out=out, bias=bias, cu_seqlens_q=cu_seqlens_q,
                 cu_seqlens_k=cu_seqlens_k)
    if out is None:
        out = call.empty(out_dtype or call.dtype(q, "q"), _shape(q))
    lse = None
    if return_lse:
        s = _shape(q)
        lse = call.empty("f32", (s[0], s[1], s[2]) if len(s) == 4 else s)
    with call:
        _L.attention(call.rt, q, k, v, out, bias, lse, float(scale or 0.0), bool(causal),
                     int(window_left), int(window_right), cu_seqlens_q, cu_seqlens_k,
                     int(max_seqlen_q), int(max_seqlen_k))
    return (out, lse) if return_lse else out


def attention_backward(q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, dq: Any = None,
                       dk: Any = None, dv: Any = None, *, causal: bool = False,
                       window_left: int = -1, window_right: int = -1,
                       scale: Optional[float] = None, bias: Any = None,
                       grad_dtype: Optional[str] = None, cu_seqlens_q: Any = None,
                       cu_seqlens_k: Any = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
                       runtime: Any = None) -> Any:
    """The gradients (dq, dk, dv) of a loss with respect to attention()'s q, k and v, given its
    out and lse (attention(..., return_lse=True)) and dout, the loss's gradient with respect to
    out (FlashAttention-2's backward: no atomics, the same sums on every device). The options
    must be the forward's; dout holds q's type; dq, dk and dv of grad_dtype (q's type by
    default, or 'f32'). The bias gets no gradient."""
    call = _Call(q, "q", runtime, k=k, v=v, out=out, dout=dout, lse=lse, dq=dq, dk=dk, dv=dv,
                 bias=bias, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    t = grad_dtype or call.dtype(q, "q")
    if dq is None:
        dq = call.empty(t, _shape(q))
    if dk is None:
        dk = call.empty(t, _shape(k))
    if dv is None:
        dv = call.empty(t, _shape(v))
    with call:
        _L.attention_backward(call.rt, q, k, v, out, dout, lse, dq, dk, dv, bias,
                              float(scale or 0.0), bool(causal), int(window_left),
                              int(window_right), cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                              int(max_seqlen_k))
    return dq, dk, dv


def conv(x: Any, w: Any, y: Any = None, *, bias: Any = None, residual: Any = None,
         stride: Ints = 1, padding: Union[Ints, str] = 0, padding_end: Optional[Ints] = None,
         dilation: Ints = 1, groups: int = 1, layout: str = "nchw", epilogue: str = "none",
         out_dtype: Optional[str] = None, runtime: Any = None) -> Any:
    """y = epilogue(conv(x, w) + bias + residual), PyTorch's conv1d/conv2d/conv3d: x is
    [N, C, *spatial] ('nchw') or [N, *spatial, C] ('nhwc'), w [K, C / groups, *kernel]; stride,
    padding (ints, 'valid' or 'same'; padding_end for asymmetric padding) and dilation per
    dimension or one for all; bias f32 [K]; residual of y's shape and type; epilogue 'none',
    'relu', 'gelu' or 'silu'. f32, f16 or bf16; y of out_dtype (x's type by default)."""
    call = _Call(x, "x", runtime, w=w, y=y, bias=bias, residual=residual)
    if y is None:
        shape = conv_output_shape(_shape(x), _shape(w), stride=stride, padding=padding,
                                  padding_end=padding_end, dilation=dilation, groups=groups,
                                  layout=layout)
        y = call.empty(out_dtype or call.dtype(x, "x"), shape)
    with call:
        _L.conv(call.rt, x, w, y, bias, residual, stride, padding, padding_end, dilation,
                int(groups), layout, epilogue)
    return y


def conv_backward_input(dy: Any, w: Any, dx: Any = None, *, input_shape: Optional[Sequence[int]] = None,
                        stride: Ints = 1, padding: Union[Ints, str] = 0,
                        padding_end: Optional[Ints] = None, dilation: Ints = 1, groups: int = 1,
                        layout: str = "nchw", out_dtype: Optional[str] = None,
                        runtime: Any = None) -> Any:
    """dx = the gradient of conv(x, w) with respect to x for the output gradient dy (also
    conv_transpose's forward). dx, or input_shape (x's shape), says x's size."""
    call = _Call(dy, "dy", runtime, w=w, dx=dx)
    if dx is None:
        if input_shape is None:
            raise _error("conv_backward_input needs dx or input_shape (x's shape: a stride "
                         "leaves it ambiguous)")
        dx = call.empty(out_dtype or call.dtype(dy, "dy"), tuple(input_shape))
    with call:
        _L.conv_backward_input(call.rt, dy, w, dx, stride, padding, padding_end, dilation,
                               int(groups), layout)
    return dx


def conv_backward_weight(x: Any, dy: Any, dw: Any = None, *,
                         weight_shape: Optional[Sequence[int]] = None, bias: bool = False,
                         stride: Ints = 1, padding: Union[Ints, str] = 0,
                         padding_end: Optional[Ints] = None, dilation: Ints = 1,
                         groups: int = 1, layout: str = "nchw", out_dtype: Optional[str] = None,
                         runtime: Any = None) -> Any:
    """dw = the gradient of conv(x, w) with respect to w for the output gradient dy (dw, or
    weight_shape, gives w's shape); with bias=True returns (dw, dbias), dbias f32 [K] the sum of
    dy over all but its channels."""
    call = _Call(x, "x", runtime, dy=dy, dw=dw)
    if dw is None:
        if weight_shape is None:
            raise _error("conv_backward_weight needs dw or weight_shape (w's shape)")
        dw = call.empty(out_dtype or call.dtype(x, "x"), tuple(weight_shape))
    dbias = call.empty("f32", (_shape(dw)[0],)) if bias else None
    with call:
        _L.conv_backward_weight(call.rt, x, dy, dw, dbias, stride, padding, padding_end,
                                dilation, int(groups), layout)
    return (dw, dbias) if bias else dw


def softmax(x: Any, y: Any = None, *, runtime: Any = None) -> Any:
    """y = softmax of x along its last axis (torch.softmax(x, -1)); f32, f16 or bf16, f32
    arithmetic; y may be x (in place)."""
    call = _Call(x, "x", runtime, y=y)
    if y is None:
        y = call.empty(call.dtype(x, "x"), _shape(x))
    with call:
        _L.softmax(call.rt, x, y)
    return y


def log_softmax(x: Any, y: Any = None, *, runtime: Any = None) -> Any:
    """y = log_softmax of x along its last axis (torch.log_softmax(x, -1))."""
    call = _Call(x, "x", runtime, y=y)
    if y is None:
        y = call.empty(call.dtype(x, "x"), _shape(x))
    with call:
        _L.log_softmax(call.rt, x, y)
    return y


def layer_norm(x: Any, y: Any = None, *, weight: Any = None, bias: Any = None, eps: float = 1e-5,
               runtime: Any = None) -> Any:
    """y = (x - mean) / sqrt(var + eps) * weight + bias along the last axis (biased variance,
    torch.nn.functional.layer_norm over the last dimension); weight and bias are [C] of x's
    type, optional."""
    call = _Call(x, "x", runtime, y=y, weight=weight, bias=bias)
    if y is None:
        y = call.empty(call.dtype(x, "x"), _shape(x))
    with call:
        _L.layer_norm(call.rt, x, y, weight, bias, float(eps))
    return y


def rms_norm(x: Any, y: Any = None, *, weight: Any = None, eps: float = 1e-5,
             runtime: Any = None) -> Any:
    """y = x / sqrt(mean(x^2) + eps) * weight along the last axis (torch's rms_norm); weight is
    [C] of x's type, optional."""
    call = _Call(x, "x", runtime, y=y, weight=weight)
    if y is None:
        y = call.empty(call.dtype(x, "x"), _shape(x))
    with call:
        _L.rms_norm(call.rt, x, y, weight, None, float(eps))
    return y


# ---- reductions -----------------------------------------------------------------------------

def reduce_output_shape(shape: Sequence[int], axes: Union[int, Sequence[int], None] = None,
                        keepdim: bool = False) -> Shape:
    """The shape of reduce()'s result for an input of `shape`."""
    return _L.reduce_output_shape(list(shape), _axes(axes), bool(keepdim))


def reduce_output_type(op: str, dtype: str) -> str:
    """The element type of reduce(op)'s result for an input of `dtype` (PyTorch's rules)."""
    return _L.reduce_output_type(op, dtype)


def reduce(op: str, x: Any, out: Any = None, *, axes: Union[int, Sequence[int], None] = None,
           keepdim: bool = False, correction: int = 1, runtime: Any = None) -> Any:
    """out = op over `axes` of x (none: every axis; negative counts from the end): 'sum',
    'mean', 'max', 'min', 'prod', 'argmax', 'argmin' (one axis or none; i64 indices), 'var'
    (dividing by N - correction). Types and NaN rules are PyTorch's (docs/kernels.md)."""
    call = _Call(x, "x", runtime, out=out)
    ax = _axes(axes)
    if out is None:
        out = call.empty(_L.reduce_output_type(op, call.dtype(x, "x")),
                         _L.reduce_output_shape(list(_shape(x)), ax, bool(keepdim)))
    with call:
        _L.reduce(call.rt, op, x, out, ax, bool(keepdim), int(correction))
    return out


# ---- pooling --------------------------------------------------------------------------------

def pool2d_output_shape(shape: Sequence[int], *, kernel: Pair = 2, stride: Optional[Pair] = None,
                        padding: Pair = 0, dilation: Pair = 1, ceil_mode: bool = False,
                        layout: str = "nchw") -> Shape:
    """The shape of a 2-d pooling's result for an input of `shape` ([N,] C, H, W, or
    [N,] H, W, C with layout='nhwc'), or kiln.Error naming the option that does not fit."""
    return _L.pool2d_output_shape(list(shape), kernel, stride, padding, dilation,
                                  bool(ceil_mode), layout)


def max_pool2d(input: Any, out: Any = None, *, kernel: Pair = 2, stride: Optional[Pair] = None,
               padding: Pair = 0, dilation: Pair = 1, ceil_mode: bool = False,
               layout: str = "nchw", return_indices: bool = False, indices: Any = None,
               runtime: Any = None) -> Any:
    """out = the maximum of each window of `input` (the C++ entry point's `in`), PyTorch's
    max_pool2d: stride defaults to the kernel, padding at most half the kernel, NaN wins.
    With return_indices (or an `indices` output), also the i64 position iy * W + ix of each
    maximum within its plane: returns (out, indices)."""
    call = _Call(input, "in", runtime, out=out, indices=indices)
    if out is None or (return_indices and indices is None):
        shape = pool2d_output_shape(_shape(input), kernel=kernel, stride=stride,
                                    padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                                    layout=layout)
        if out is None:
            out = call.empty(call.dtype(input, "in"), shape)
        if return_indices and indices is None:
            indices = call.empty("i64", shape)
    with call:
        _L.max_pool2d(call.rt, input, out, indices, kernel, stride, padding, dilation,
                      bool(ceil_mode), layout)
    return (out, indices) if indices is not None else out


def avg_pool2d(input: Any, out: Any = None, *, kernel: Pair = 2, stride: Optional[Pair] = None,
               padding: Pair = 0, ceil_mode: bool = False, layout: str = "nchw",
               count_include_pad: bool = True, divisor: int = 0, runtime: Any = None) -> Any:
    """out = the mean of each window of `input` (PyTorch's avg_pool2d): padded positions count
    in the divisor with count_include_pad; a nonzero `divisor` replaces it."""
    call = _Call(input, "in", runtime, out=out)
    if out is None:
        out = call.empty(call.dtype(input, "in"),
                         pool2d_output_shape(_shape(input), kernel=kernel, stride=stride,
                                             padding=padding, ceil_mode=ceil_mode,
                                             layout=layout))
    with call:
        _L.avg_pool2d(call.rt, input, out, kernel, stride, padding, bool(ceil_mode), layout,
                      bool(count_include_pad), int(divisor))
    return out


# ---- random numbers -------------------------------------------------------------------------

def _random(kind: str, out: Any, shape: Optional[Sequence[int]], dtype: str, seed: int,
            offset: int, p0: float, p1: float, runtime: Any) -> Any:
    if out is None:
        if shape is None:
            raise _error(f"{kind}: give `out` (the tensor to fill) or `shape` (and `dtype`) to "
                         "make a NumPy array, or a kiln.Tensor on `runtime`")
        if runtime is None:
            import numpy
            if dtype not in _NUMPY:
                raise _error(f"{kind}: NumPy has no {dtype}; pass `out` or `runtime`")
            out = numpy.empty(tuple(int(s) for s in shape), _NUMPY[dtype])
        else:
            out = runtime.empty(dtype, [int(s) for s in shape])
    call = _Call(out, "out", runtime)
    with call:
        getattr(_L, kind)(call.rt, out, int(seed), int(offset), float(p0), float(p1))
    return out


def uniform(out: Any = None, *, shape: Optional[Sequence[int]] = None, dtype: str = "f32",
            seed: int = 0, offset: int = 0, low: float = 0.0, high: float = 1.0,
            runtime: Any = None) -> Any:
    """Fills `out` (contiguous f32, f16 or bf16) with uniform numbers in [low, high) that depend
    only on seed, offset and each element's index (Philox 4x32-10: the same bits on every
    device). Without `out`: a new NumPy array of `shape` and `dtype` (a kiln.Tensor when
    `runtime` is given)."""
    return _random("uniform", out, shape, dtype, seed, offset, low, high, runtime)


def normal(out: Any = None, *, shape: Optional[Sequence[int]] = None, dtype: str = "f32",
           seed: int = 0, offset: int = 0, mean: float = 0.0, stddev: float = 1.0,
           runtime: Any = None) -> Any:
    """Fills `out` with normal numbers of `mean` and `stddev` (Philox and Box-Muller: the same
    bits on every device); without `out`, as uniform() does."""
    return _random("normal", out, shape, dtype, seed, offset, mean, stddev, runtime)
