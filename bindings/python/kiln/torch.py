"""kiln's kernel library as PyTorch operators: ``import kiln.torch`` registers them in the
``kiln`` namespace (``torch.ops.kiln.matmul``, ``torch.ops.kiln.softmax``, ...), each with a fake
(meta) implementation, so that ``torch.compile(fullgraph=True)`` traces them, and with autograd
for matmul, conv, attention, softmax, log_softmax, layer_norm, rms_norm, max_pool2d and
avg_pool2d.

The operators take and return torch tensors, run kiln's kernels on their memory (no copies),
and follow the kiln.lib functions of the same names (docs/kernels.md). The functions here call
the operators: ``kiln.torch.matmul(a, b)`` is ``torch.ops.kiln.matmul(a, b)``.

Backward passes: matmul's gradients are kiln matmuls; conv's are kiln's conv_backward_input
and conv_backward_weight (operators too); attention's is kiln's attention_backward (an operator
too, from the log-sum-exp that torch.ops.kiln.attention_forward returns); softmax's, log_softmax's, layer_norm's
and rms_norm's are kiln operators too (``torch.ops.kiln.softmax_backward``, ...), computed in
f32; max_pool2d's scatters the gradient with PyTorch's scatter_add at the indices kiln found,
and avg_pool2d's is PyTorch's own avg_pool2d backward.

A user's own DSL kernel becomes an operator with ``kiln.torch.custom_op`` (below).

CUDA tensors: the operators run on PyTorch's current stream (kiln.Runtime.on_stream), ordered
with PyTorch's work; custom_op kernels too, and wait for their kernel to report its faults.
"""
from builtins import map as map_
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import lib as _lib
from . import runtime as _shared_runtime

Tensor = torch.Tensor

__all__ = ["attention", "avg_pool2d", "binary", "conv", "custom_op", "layer_norm", "log_softmax", "map", "matmul",
           "max_pool2d", "normal", "reduce", "rms_norm", "softmax", "unary", "uniform"]

_KILN_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                torch.float64: "f64", torch.int32: "i32", torch.int64: "i64", torch.int8: "i8",
                torch.int16: "i16", torch.uint8: "u8", torch.bool: "bool"}


# The operators live in one torch.library.Library. Each is defined by its schema, with its
# implementation under CompositeExplicitAutograd (every device), rather than through
# torch.library.custom_op, whose Python wrapper (aliasing checks, a dynamo-disabled call)
# costs ~10 us a call; fake implementations and autograd are registered the same way as
# custom_op's, through torch.library.
_library = torch.library.Library("kiln", "DEF")


# Autograd without its Python cost where it adds nothing. torch.library.register_autograd's
# kernel sends every call through op.redispatch, a second crossing of the dispatcher into a
# second Python kernel (~6 us). When the dispatch key set is one of a plain CPU tensor's (no
# Python, functionalization, functorch, fake, autocast or other mode keys: those take the
# general path) and no input needs a gradient, the Autograd kernel calls the implementation
# itself, which is what the redispatch would reach. The plain key sets are not guessed: they
# are what a probe operator's Autograd kernel receives for a plain tensor at import (and for
# CUDA when PyTorch had initialized CUDA by then).
_library.define("_keyset_probe(Tensor x) -> ()")
_PLAIN_KEYSETS: set = set()
_library.impl("_keyset_probe", lambda keyset, x: _PLAIN_KEYSETS.add(keyset.raw_repr()),
              "Autograd", with_keyset=True)
with torch.inference_mode(False), torch.enable_grad():
    torch.ops.kiln._keyset_probe(torch.empty(0))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.ops.kiln._keyset_probe(torch.empty(0, device="cuda"))


class _Op:
    """One kiln:: operator, defined from its schema and implementation."""

    def __init__(self, schema: str, impl: Callable[..., Any]) -> None:
        self.short = schema.split("(", 1)[0]
        self.name = "kiln::" + self.short
        self.impl = impl
        _library.define(schema)
        _library.impl(self.short, impl, "CompositeExplicitAutograd")

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        torch.library.register_fake(self.name, lib=_library)(fn)
        return fn

    def register_autograd(self, backward: Callable[..., Any],
                          setup_context: Callable[..., Any]) -> None:
        try:  # the kernel torch.library.register_autograd makes (private; PyTorch 2.4+)
            from torch._library.autograd import Info, make_autograd_impl
            general = make_autograd_impl(getattr(torch.ops.kiln, self.short).default,
                                         Info(backward, setup_context))
        except (ImportError, AttributeError, TypeError):  # moved or changed: the public way
            torch.library.register_autograd(self.name, backward, setup_context=setup_context,
                                            lib=_library)
            return
        impl = self.impl
        plain = _PLAIN_KEYSETS
        grad_enabled = torch._C.is_grad_enabled
        any_requires_grad = torch._C._any_requires_grad

        def autograd(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            if keyset.raw_repr() in plain and not (grad_enabled() and any_requires_grad(*args)):
                return impl(*args, **kwargs)
            return general(keyset, *args, **kwargs)

        _library.impl(self.short, autograd, "Autograd", with_keyset=True)


def _op(schema: str) -> Callable[[Callable[..., Any]], _Op]:
    return lambda impl: _Op(schema, impl)


def _d(t: Optional[Tensor]) -> Optional[Tensor]:
    """t without its autograd history: an operator's implementation runs below autograd, and
    PyTorch exports no tensor that requires a gradient through DLPack."""
    return t.detach() if t is not None and t.requires_grad else t


_CPU = _shared_runtime("cpu")


def _row_op(entry: Callable[..., Any], x: Tensor, *rest: Any) -> Tensor:
    """A row operation (softmax, norms) on a CPU tensor without kiln.lib's Python layer: a new
    contiguous result like x, the C++ entry point (which checks the arguments and names them),
    and the wait."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    entry(_CPU, x, y, *rest)
    _CPU.sync()
    return y


def _f32(x: Tensor) -> Tensor:
    """x in f32 (itself when it is), converted by kiln's copy."""
    if x.dtype == torch.float32:
        return x
    return _lib.copy(x, torch.empty(x.shape, dtype=torch.float32, device=x.device))


def _rows_axes(x: Tensor) -> List[int]:
    return list(range(x.dim() - 1))


# ---- matmul ---------------------------------------------------------------------------------

def _matmul_shape(a: Tensor, b: Tensor, transpose_a: bool, transpose_b: bool) -> List[int]:
    torch._check(a.dim() >= 2 and b.dim() >= 2, lambda: "kiln::matmul takes matrices")
    m = a.shape[-1] if transpose_a else a.shape[-2]
    n = b.shape[-2] if transpose_b else b.shape[-1]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return list(batch) + [m, n]


@_op("matmul(Tensor a, Tensor b, Tensor? bias=None, bool transpose_a=False, "
     "bool transpose_b=False, float alpha=1.0, str epilogue=\"none\", "
     "bool allow_tf32=False) -> Tensor")
def _matmul(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, transpose_a: bool = False,
            transpose_b: bool = False, alpha: float = 1.0, epilogue: str = "none",
            allow_tf32: bool = False) -> Tensor:
    return _lib.matmul(_d(a), _d(b), alpha=alpha, transpose_a=transpose_a,
                       transpose_b=transpose_b, bias=_d(bias), epilogue=epilogue,
                       allow_tf32=allow_tf32)


@_matmul.register_fake
def _(a, b, bias=None, transpose_a=False, transpose_b=False, alpha=1.0, epilogue="none",
      allow_tf32=False):
    return a.new_empty(_matmul_shape(a, b, transpose_a, transpose_b))


def _matmul_setup(ctx, inputs, output):
    a, b, bias, ta, tb, alpha, epilogue, tf32 = inputs
    ctx.flags = (ta, tb, alpha, epilogue, tf32, bias is not None)
    ctx.save_for_backward(a, b, bias, output)


def _gelu_grad(z: Tensor) -> Tensor:
    """d/dz of GELU's tanh form (kiln's epilogue)."""
    k = 0.7978845608028654  # sqrt(2 / pi)
    inner = k * (z + 0.044715 * z ** 3)
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z)


def _matmul_backward(ctx, g):
    ta, tb, alpha, epilogue, tf32, has_bias = ctx.flags
    a, b, bias, y = ctx.saved_tensors
    if epilogue == "relu":
        g = g * (y > 0).to(g.dtype)
    elif epilogue == "gelu":  # the product before the epilogue, again
        z = torch.ops.kiln.matmul(a, b, bias, ta, tb, alpha, "none", tf32)
        g = (g.float() * _gelu_grad(z.float())).to(g.dtype)
    mm = torch.ops.kiln.matmul
    da = db = dbias = None
    if ctx.needs_input_grad[0]:
        da = mm(b, g, None, tb, True, alpha, "none", tf32) if ta else \
            mm(g, b, None, False, not tb, alpha, "none", tf32)
        da = da.sum_to_size(a.shape)
    if ctx.needs_input_grad[1]:
        db = mm(g, a, None, True, ta, alpha, "none", tf32) if tb else \
            mm(a, g, None, not ta, False, alpha, "none", tf32)
        db = db.sum_to_size(b.shape)
    if has_bias and ctx.needs_input_grad[2]:
        dbias = g.float().reshape(-1, g.shape[-1]).sum(0).to(bias.dtype)
    return da, db, dbias, None, None, None, None, None


_matmul.register_autograd(_matmul_backward, setup_context=_matmul_setup)


def matmul(a: Tensor, b: Tensor, bias: Optional[Tensor] = None, *, transpose_a: bool = False,
           transpose_b: bool = False, alpha: float = 1.0, epilogue: str = "none",
           allow_tf32: bool = False) -> Tensor:
    """torch.ops.kiln.matmul: epilogue(alpha op(a) op(b) + bias) (kiln.lib.matmul), with
    gradients for a, b and bias."""
    return torch.ops.kiln.matmul(a, b, bias, transpose_a, transpose_b, alpha, epilogue,
                                 allow_tf32)


# ---- convolution ------------------------------------------------------------------------------

def _conv_opts(stride: List[int], padding: List[int], dilation: List[int], groups: int) -> Dict:
    return dict(stride=list(stride), padding=list(padding), dilation=list(dilation),
                groups=int(groups))


# ---- attention --------------------------------------------------------------------------------

@_op("attention(Tensor q, Tensor k, Tensor v, Tensor? bias=None, bool causal=False, "
     "int window_left=-1, int window_right=-1, float? scale=None) -> Tensor")
def _attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor] = None,
               causal: bool = False, window_left: int = -1, window_right: int = -1,
               scale: Optional[float] = None) -> Tensor:
    b = _f32(_d(bias)) if bias is not None else None
    return _lib.attention(_d(q), _d(k), _d(v), causal=causal, window_left=window_left,
                          window_right=window_right, scale=scale, bias=b)


@_attention.register_fake
def _(q, k, v, bias=None, causal=False, window_left=-1, window_right=-1, scale=None):
    return q.new_empty(q.shape)


_VARLEN = ("Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, int max_seqlen_q=0, "
           "int max_seqlen_k=0")


@_op("attention_forward(Tensor q, Tensor k, Tensor v, Tensor? bias=None, bool causal=False, "
     "int window_left=-1, int window_right=-1, float? scale=None, " + _VARLEN +
     ") -> (Tensor, Tensor)")
def _attention_forward(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor] = None,
                       causal: bool = False, window_left: int = -1, window_right: int = -1,
                       scale: Optional[float] = None, cu_seqlens_q: Optional[Tensor] = None,
                       cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                       max_seqlen_k: int = 0) -> Tuple[Tensor, Tensor]:
    b = _f32(_d(bias)) if bias is not None else None
    return _lib.attention(_d(q), _d(k), _d(v), causal=causal, window_left=window_left,
                          window_right=window_right, scale=scale, bias=b, return_lse=True,
                          cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@_attention_forward.register_fake
def _(q, k, v, bias=None, causal=False, window_left=-1, window_right=-1, scale=None,
      cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@_op("attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse, "
     "Tensor? bias=None, bool causal=False, int window_left=-1, int window_right=-1, "
     "float? scale=None, " + _VARLEN + ") -> (Tensor, Tensor, Tensor)")
def _attention_backward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, dout: Tensor, lse: Tensor,
                        bias: Optional[Tensor] = None, causal: bool = False,
                        window_left: int = -1, window_right: int = -1,
                        scale: Optional[float] = None, cu_seqlens_q: Optional[Tensor] = None,
                        cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
                        max_seqlen_k: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    b = _f32(_d(bias)) if bias is not None else None
    return _lib.attention_backward(_d(q), _d(k), _d(v), _d(out), _d(dout), _d(lse),
                                   causal=causal, window_left=window_left,
                                   window_right=window_right, scale=scale, bias=b,
                                   cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                   max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)


@_attention_backward.register_fake
def _(q, k, v, out, dout, lse, bias=None, causal=False, window_left=-1, window_right=-1,
      scale=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, bias, causal, window_left, window_right, scale, cu_q, cu_k, max_q, max_k = inputs
    out, lse = output
    ctx.flags = (causal, window_left, window_right, scale, max_q, max_k)
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, bias, out, lse, cu_q, cu_k)


def _attention_grad(ctx, g, g_lse):
    causal, window_left, window_right, scale, max_q, max_k = ctx.flags
    q, k, v, bias, out, lse, cu_q, cu_k = ctx.saved_tensors
    if bias is not None and ctx.needs_input_grad[3]:
        raise RuntimeError("kiln.torch.attention: the bias gets no gradient (kiln's backward "
                           "computes dq, dk and dv); pass a bias that does not require one")
    dq, dk, dv = torch.ops.kiln.attention_backward(q, k, v, out, g.to(q.dtype), lse, bias,
                                                   causal, window_left, window_right, scale,
                                                   cu_q, cu_k, max_q, max_k)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None


_attention_forward.register_autograd(_attention_grad, setup_context=_attention_setup)


def attention(q: Tensor, k: Tensor, v: Tensor, bias: Optional[Tensor] = None, *,
              causal: bool = False, window_left: int = -1, window_right: int = -1,
              scale: Optional[float] = None, cu_seqlens_q: Optional[Tensor] = None,
              cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0,
              max_seqlen_k: int = 0) -> Tensor:
    """scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale) on
    kiln (kiln.lib.attention: q [B, Hq, Sq, D], k and v [B, Hk, Sk, D], f16 or bf16 (f32 on the
    CPU), any strides with the last one 1; grouped-query heads; sliding windows; variable
    lengths packed in one item with cu_seqlens_q/k, int32 offsets), with gradients for q, k and
    v (kiln.lib.attention_backward; the bias gets none). Through torch.ops.kiln.attention_forward,
    which also returns the log-sum-exp the backward pass needs; torch.ops.kiln.attention is the
    forward alone (without variable lengths)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen or (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))):
        return torch.ops.kiln.attention_forward(q, k, v, bias, causal, window_left,
                                                window_right, scale, cu_seqlens_q, cu_seqlens_k,
                                                max_seqlen_q, max_seqlen_k)[0]
    return torch.ops.kiln.attention(q, k, v, bias, causal, window_left, window_right, scale)


@_op("conv(Tensor x, Tensor w, Tensor? bias=None, int[] stride=[1], int[] padding=[0], "
     "int[] dilation=[1], int groups=1, str epilogue=\"none\") -> Tensor")
def _conv(x: Tensor, w: Tensor, bias: Optional[Tensor] = None, stride: List[int] = (1,),
          padding: List[int] = (0,), dilation: List[int] = (1,), groups: int = 1,
          epilogue: str = "none") -> Tensor:
    b = _f32(_d(bias)) if bias is not None else None
    return _lib.conv(_d(x), _d(w), bias=b, epilogue=epilogue,
                     **_conv_opts(stride, padding, dilation, groups))


@_conv.register_fake
def _(x, w, bias=None, stride=(1,), padding=(0,), dilation=(1,), groups=1, epilogue="none"):
    return x.new_empty(_lib.conv_output_shape(x.shape, w.shape,
                                              **_conv_opts(stride, padding, dilation, groups)))


@_op("conv_backward_input(Tensor dy, Tensor w, int[] input_shape, int[] stride, int[] padding, "
     "int[] dilation, int groups) -> Tensor")
def _conv_backward_input(dy: Tensor, w: Tensor, input_shape: List[int], stride: List[int],
                         padding: List[int], dilation: List[int], groups: int) -> Tensor:
    return _lib.conv_backward_input(_d(dy), _d(w), input_shape=list(input_shape),
                                    **_conv_opts(stride, padding, dilation, groups))


@_conv_backward_input.register_fake
def _(dy, w, input_shape, stride, padding, dilation, groups):
    return dy.new_empty(list(input_shape))


@_op("conv_backward_weight(Tensor x, Tensor dy, int[] weight_shape, int[] stride, "
     "int[] padding, int[] dilation, int groups) -> Tensor")
def _conv_backward_weight(x: Tensor, dy: Tensor, weight_shape: List[int], stride: List[int],
                          padding: List[int], dilation: List[int], groups: int) -> Tensor:
    return _lib.conv_backward_weight(_d(x), _d(dy), weight_shape=list(weight_shape),
                                     **_conv_opts(stride, padding, dilation, groups))


@_conv_backward_weight.register_fake
def _(x, dy, weight_shape, stride, padding, dilation, groups):
    return x.new_empty(list(weight_shape))


def _conv_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups, epilogue = inputs
    ctx.flags = (list(stride), list(padding), list(dilation), groups, epilogue)
    ctx.save_for_backward(x, w, bias, output)


def _conv_backward(ctx, g):
    stride, padding, dilation, groups, epilogue = ctx.flags
    x, w, bias, y = ctx.saved_tensors
    if epilogue == "relu":
        g = g * (y > 0).to(g.dtype)
    elif epilogue in ("gelu", "silu"):  # the convolution before the epilogue, again
        z = torch.ops.kiln.conv(x, w, bias, stride, padding, dilation, groups, "none").float()
        if epilogue == "gelu":
            g = (g.float() * _gelu_grad(z)).to(g.dtype)
        else:
            s = torch.sigmoid(z)
            g = (g.float() * (s * (1 + z * (1 - s)))).to(g.dtype)
    dx = dw = dbias = None
    if ctx.needs_input_grad[0]:
        dx = torch.ops.kiln.conv_backward_input(g, w, list(x.shape), stride, padding, dilation,
                                                groups)
    if ctx.needs_input_grad[1]:
        dw = torch.ops.kiln.conv_backward_weight(x, g, list(w.shape), stride, padding, dilation,
                                                 groups)
    if bias is not None and ctx.needs_input_grad[2]:
        dims = [d for d in range(g.dim()) if d != 1]
        dbias = g.float().sum(dims).to(bias.dtype)
    return dx, dw, dbias, None, None, None, None, None


_conv.register_autograd(_conv_backward, setup_context=_conv_setup)


def conv(x: Tensor, w: Tensor, bias: Optional[Tensor] = None, *, stride: Sequence[int] = (1,),
         padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), groups: int = 1,
         epilogue: str = "none") -> Tensor:
    """torch.ops.kiln.conv: epilogue(conv(x, w) + bias) (kiln.lib.conv; x [N, C, *spatial] in
    any memory format, as torch.nn.functional.conv1d/2d/3d), with gradients for x, w and bias
    (kiln's conv_backward_input and conv_backward_weight)."""
    as_list = lambda v: [v] if isinstance(v, int) else list(v)  # noqa: E731
    return torch.ops.kiln.conv(x, w, bias, as_list(stride), as_list(padding), as_list(dilation),
                               groups, epilogue)


# ---- softmax and log_softmax ------------------------------------------------------------------

@_op("softmax(Tensor x) -> Tensor")
def _softmax(x: Tensor) -> Tensor:
    if x.is_cpu:
        return _row_op(_lib._L.softmax, _d(x))
    return _lib.softmax(_d(x))


@_op("log_softmax(Tensor x) -> Tensor")
def _log_softmax(x: Tensor) -> Tensor:
    if x.is_cpu:
        return _row_op(_lib._L.log_softmax, _d(x))
    return _lib.log_softmax(_d(x))


@_op("softmax_backward(Tensor g, Tensor y, bool log) -> Tensor")
def _softmax_backward(g: Tensor, y: Tensor, log: bool) -> Tensor:
    """The gradient of softmax (log=False: y * (g - sum(g y))) or of log_softmax (log=True:
    g - exp(y) sum(g)) along the last axis, from the output y; in f32, rounded to y's type."""
    g32, y32 = _f32(_d(g)), _f32(_d(y))
    if log:
        s = _lib.reduce("sum", g32, axes=-1, keepdim=True)
        dx = _lib.map(["exp", ("mul", "y"), ("rsub", "z")], y32, y=s, z=g32)
    else:
        s = _lib.reduce("sum", _lib.binary("mul", g32, y32), axes=-1, keepdim=True)
        dx = _lib.map([("sub", "y"), ("mul", "z")], g32, y=s, z=y32)
    return dx if y.dtype == torch.float32 else dx.to(y.dtype)


for _sm in (_softmax, _log_softmax):
    _sm.register_fake(lambda x: torch.empty_like(x, memory_format=torch.contiguous_format))
_softmax_backward.register_fake(
    lambda g, y, log: torch.empty_like(y, memory_format=torch.contiguous_format))


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


_softmax.register_autograd(
    lambda ctx, g: torch.ops.kiln.softmax_backward(g, ctx.saved_tensors[0], False),
    setup_context=_save_output)
_log_softmax.register_autograd(
    lambda ctx, g: torch.ops.kiln.softmax_backward(g, ctx.saved_tensors[0], True),
    setup_context=_save_output)


def softmax(x: Tensor) -> Tensor:
    """torch.ops.kiln.softmax: softmax along the last axis, with its gradient."""
    return torch.ops.kiln.softmax(x)


def log_softmax(x: Tensor) -> Tensor:
    """torch.ops.kiln.log_softmax: log_softmax along the last axis, with its gradient."""
    return torch.ops.kiln.log_softmax(x)


# ---- layer_norm and rms_norm ----------------------------------------------------------------

@_op("layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor")
def _layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
                eps: float = 1e-5) -> Tensor:
    if x.is_cpu:
        return _row_op(_lib._L.layer_norm, _d(x), _d(weight), _d(bias), float(eps))
    return _lib.layer_norm(_d(x), weight=_d(weight), bias=_d(bias), eps=eps)


@_op("rms_norm(Tensor x, Tensor? weight=None, float eps=1e-05) -> Tensor")
def _rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    if x.is_cpu:
        return _row_op(_lib._L.rms_norm, _d(x), _d(weight), None, float(eps))
    return _lib.rms_norm(_d(x), weight=_d(weight), eps=eps)


@_op("norm_backward(Tensor g, Tensor x, Tensor? weight, float eps, bool rms) -> (Tensor, "
     "Tensor, Tensor)")
def _norm_backward(g: Tensor, x: Tensor, weight: Optional[Tensor], eps: float,
                   rms: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Gradients of layer_norm (rms=False) or rms_norm (rms=True) along the last axis with
    respect to x, weight and bias (the last two [C]; zeros of shape [C] when there is no
    weight); in f32, dx rounded to x's type, dweight and dbias f32."""
    x, g, weight = _d(x), _d(g), _d(weight)
    x32, g32 = _f32(x), _f32(g)
    if rms:
        r = _lib.map([("add", "s0"), "rsqrt"],
                     _lib.reduce("mean", _lib.unary("square", x32), axes=-1, keepdim=True),
                     scalars=[eps])
        xhat = _lib.binary("mul", x32, r)
    else:
        mean = _lib.reduce("mean", x32, axes=-1, keepdim=True)
        var = _lib.reduce("var", x32, axes=-1, keepdim=True, correction=0)
        r = _lib.map([("add", "s0"), "rsqrt"], var, scalars=[eps])
        xhat = _lib.map([("sub", "y"), ("mul", "z")], x32, y=mean, z=r)
    dxhat = g32 if weight is None else _lib.binary("mul", g32, _f32(weight))
    m2 = _lib.reduce("mean", _lib.binary("mul", dxhat, xhat), axes=-1, keepdim=True)
    t = _lib.map([("mul", "y"), ("rsub", "z")], xhat, y=m2, z=dxhat)  # dxhat - xhat m2
    if rms:
        dx = _lib.binary("mul", t, r)
    else:
        m1 = _lib.reduce("mean", dxhat, axes=-1, keepdim=True)
        dx = _lib.map([("sub", "y"), ("mul", "z")], t, y=m1, z=r)
    rows = _rows_axes(x)
    c = x.shape[-1]
    if rows:
        dweight = _lib.reduce("sum", _lib.binary("mul", g32, xhat), axes=rows)
        dbias = _lib.reduce("sum", g32, axes=rows)
    else:
        dweight = _lib.binary("mul", g32, xhat)
        dbias = g32.clone()
    if weight is None:
        dweight = torch.zeros(c, dtype=torch.float32, device=x.device)
    return (dx if x.dtype == torch.float32 else dx.to(x.dtype)), dweight, dbias


@_norm_backward.register_fake
def _(g, x, weight, eps, rms):
    c = x.shape[-1]
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(c, dtype=torch.float32), x.new_empty(c, dtype=torch.float32))


_layer_norm.register_fake(
    lambda x, weight=None, bias=None, eps=1e-5:
    torch.empty_like(x, memory_format=torch.contiguous_format))
_rms_norm.register_fake(
    lambda x, weight=None, eps=1e-5: torch.empty_like(x, memory_format=torch.contiguous_format))


def _norm_setup(ctx, inputs, output):
    x, weight, eps = inputs[0], inputs[1], inputs[-1]
    ctx.eps = eps
    ctx.save_for_backward(x, weight)


def _norm_grads(ctx, g, rms):
    x, weight = ctx.saved_tensors
    dx, dw, db = torch.ops.kiln.norm_backward(g, x, weight, ctx.eps, rms)
    dw = None if weight is None else dw.to(weight.dtype)
    return dx, dw, db


def _rms_norm_backward(ctx, g):
    dx, dw, _ = _norm_grads(ctx, g, True)
    return dx, dw, None


def _layer_norm_setup(ctx, inputs, output):
    _norm_setup(ctx, inputs, output)
    ctx.bias_dtype = inputs[2].dtype if inputs[2] is not None else None


def _layer_norm_backward(ctx, g):
    dx, dw, db = _norm_grads(ctx, g, False)
    db = db.to(ctx.bias_dtype) if ctx.bias_dtype is not None else None
    return dx, dw, db, None


_layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)
_rms_norm.register_autograd(_rms_norm_backward, setup_context=_norm_setup)


def layer_norm(x: Tensor, weight: Optional[Tensor] = None, bias: Optional[Tensor] = None,
               eps: float = 1e-5) -> Tensor:
    """torch.ops.kiln.layer_norm over the last axis, with gradients for x, weight and bias."""
    return torch.ops.kiln.layer_norm(x, weight, bias, eps)


def rms_norm(x: Tensor, weight: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """torch.ops.kiln.rms_norm over the last axis, with gradients for x and weight."""
    return torch.ops.kiln.rms_norm(x, weight, eps)


# ---- pooling --------------------------------------------------------------------------------

def _pool_shape(x, kernel, stride, padding, dilation, ceil_mode, layout):
    return list(_lib.pool2d_output_shape([int(s) for s in x.shape], kernel=kernel,
                                         stride=stride or None, padding=padding,
                                         dilation=dilation, ceil_mode=ceil_mode, layout=layout))


@_op("max_pool2d(Tensor x, int[] kernel, int[] stride, int[] padding, int[] dilation, "
     "bool ceil_mode=False, str layout=\"nchw\") -> (Tensor, Tensor)")
def _max_pool2d(x: Tensor, kernel: List[int], stride: List[int], padding: List[int],
                dilation: List[int], ceil_mode: bool = False,
                layout: str = "nchw") -> Tuple[Tensor, Tensor]:
    return _lib.max_pool2d(_d(x), kernel=tuple(kernel), stride=tuple(stride) or None,
                           padding=tuple(padding), dilation=tuple(dilation),
                           ceil_mode=ceil_mode, layout=layout, return_indices=True)


@_max_pool2d.register_fake
def _(x, kernel, stride, padding, dilation, ceil_mode=False, layout="nchw"):
    shape = _pool_shape(x, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation),
                        ceil_mode, layout)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


def _planes(t: Tensor, layout: str) -> Tensor:
    """t as [planes, H * W]: NCHW as it is, NHWC with the channels moved before H and W."""
    if layout == "nhwc":
        t = t.movedim(-1, -3)
    return t.reshape(-1, t.shape[-2] * t.shape[-1])


def _max_pool2d_setup(ctx, inputs, output):
    x, layout = inputs[0], inputs[-1]
    ctx.layout = layout
    ctx.x_shape = x.shape
    ctx.save_for_backward(output[1])


def _max_pool2d_backward(ctx, g, g_indices):
    (indices,) = ctx.saved_tensors
    layout = ctx.layout
    dx = torch.zeros(ctx.x_shape, dtype=g.dtype, device=g.device)
    planes = dx.movedim(-1, -3) if layout == "nhwc" else dx
    flat = planes.reshape(-1, planes.shape[-2] * planes.shape[-1])
    flat = flat.scatter_add(1, _planes(indices, layout), _planes(g, layout))
    planes = flat.reshape(planes.shape)
    dx = planes.movedim(-3, -1) if layout == "nhwc" else planes
    return dx.contiguous(), None, None, None, None, None, None


_max_pool2d.register_autograd(_max_pool2d_backward, setup_context=_max_pool2d_setup)


@_op("avg_pool2d(Tensor x, int[] kernel, int[] stride, int[] padding, "
     "bool ceil_mode=False, str layout=\"nchw\", bool count_include_pad=True, "
     "int divisor=0) -> Tensor")
def _avg_pool2d(x: Tensor, kernel: List[int], stride: List[int], padding: List[int],
                ceil_mode: bool = False, layout: str = "nchw", count_include_pad: bool = True,
                divisor: int = 0) -> Tensor:
    return _lib.avg_pool2d(_d(x), kernel=tuple(kernel), stride=tuple(stride) or None,
                           padding=tuple(padding), ceil_mode=ceil_mode, layout=layout,
                           count_include_pad=count_include_pad, divisor=divisor)


@_avg_pool2d.register_fake
def _(x, kernel, stride, padding, ceil_mode=False, layout="nchw", count_include_pad=True,
      divisor=0):
    return x.new_empty(_pool_shape(x, tuple(kernel), tuple(stride), tuple(padding), (1, 1),
                                   ceil_mode, layout))


def _avg_pool2d_setup(ctx, inputs, output):
    ctx.args = inputs[1:]
    ctx.save_for_backward(inputs[0])


def _avg_pool2d_backward(ctx, g):
    (x,) = ctx.saved_tensors
    kernel, stride, padding, ceil_mode, layout, count_include_pad, divisor = ctx.args
    nchw = x.movedim(-1, -3) if layout == "nhwc" else x
    gn = g.movedim(-1, -3) if layout == "nhwc" else g
    dx = torch.ops.aten.avg_pool2d_backward(gn, nchw, list(kernel), list(stride or kernel),
                                            list(padding), ceil_mode, count_include_pad,
                                            divisor or None)
    if layout == "nhwc":
        dx = dx.movedim(-3, -1)
    return dx.contiguous(), None, None, None, None, None, None, None


_avg_pool2d.register_autograd(_avg_pool2d_backward, setup_context=_avg_pool2d_setup)


def _pair(v: Any) -> List[int]:
    return [int(v), int(v)] if isinstance(v, int) else [int(s) for s in v]


def max_pool2d(x: Tensor, kernel: Any = 2, stride: Any = None, padding: Any = 0,
               dilation: Any = 1, ceil_mode: bool = False, layout: str = "nchw",
               return_indices: bool = False) -> Any:
    """torch.ops.kiln.max_pool2d (kiln.lib.max_pool2d), with its gradient; returns the values,
    or (values, i64 indices) with return_indices."""
    out, idx = torch.ops.kiln.max_pool2d(x, _pair(kernel), _pair(stride) if stride else [],
                                         _pair(padding), _pair(dilation), ceil_mode, layout)
    return (out, idx) if return_indices else out


def avg_pool2d(x: Tensor, kernel: Any = 2, stride: Any = None, padding: Any = 0,
               ceil_mode: bool = False, layout: str = "nchw", count_include_pad: bool = True,
               divisor: int = 0) -> Tensor:
    """torch.ops.kiln.avg_pool2d (kiln.lib.avg_pool2d), with its gradient."""
    return torch.ops.kiln.avg_pool2d(x, _pair(kernel), _pair(stride) if stride else [],
                                     _pair(padding), ceil_mode, layout, count_include_pad,
                                     divisor)


# ---- elementwise, reductions, random numbers (no gradients) ---------------------------------

@_op("map(str chain, Tensor x, Tensor? y=None, Tensor? z=None, float[]? scalars=None) -> Tensor")
def _map(chain: str, x: Tensor, y: Optional[Tensor] = None, z: Optional[Tensor] = None,
         scalars: Optional[List[float]] = None) -> Tensor:
    return _lib.map(_steps(chain), _d(x), y=_d(y), z=_d(z), scalars=scalars or ())


def _steps(chain: str) -> List[Any]:
    """'exp,mul:y' as ['exp', ('mul', 'y')]."""
    return [tuple(s.split(":", 1)) if ":" in s else s for s in chain.split(",") if s]


@_map.register_fake
def _(chain, x, y=None, z=None, scalars=None):
    shape = torch.broadcast_shapes(*[t.shape for t in (x, y, z) if t is not None])
    return x.new_empty(shape)


@_op("unary(str op, Tensor x) -> Tensor")
def _unary(op: str, x: Tensor) -> Tensor:
    return _lib.unary(op, _d(x))


_unary.register_fake(lambda op, x: x.new_empty(x.shape))


@_op("binary(str op, Tensor a, Tensor b) -> Tensor")
def _binary(op: str, a: Tensor, b: Tensor) -> Tensor:
    return _lib.binary(op, _d(a), _d(b))


_binary.register_fake(lambda op, a, b: a.new_empty(torch.broadcast_shapes(a.shape, b.shape)))


@_op("reduce(str op, Tensor x, int[] axes, bool keepdim=False, int correction=1) -> Tensor")
def _reduce(op: str, x: Tensor, axes: List[int], keepdim: bool = False,
            correction: int = 1) -> Tensor:
    return _lib.reduce(op, _d(x), axes=axes, keepdim=keepdim, correction=correction)


@_reduce.register_fake
def _(op, x, axes, keepdim=False, correction=1):
    shape = _lib.reduce_output_shape([int(s) for s in x.shape], axes, keepdim)
    dtype = _lib.reduce_output_type(op, _KILN_DTYPES.get(x.dtype, "f32"))
    return x.new_empty(shape, dtype=getattr(torch, _lib._TORCH[dtype]))


@_op("random(str kind, int[] shape, ScalarType dtype, Device device, int seed, "
     "int offset, float p0, float p1) -> Tensor")
def _random(kind: str, shape: List[int], dtype: torch.dtype, device: torch.device, seed: int,
            offset: int, p0: float, p1: float) -> Tensor:
    out = torch.empty(shape, dtype=dtype, device=device)
    getattr(_lib, kind)(out, seed=seed, offset=offset, **(
        {"mean": p0, "stddev": p1} if kind == "normal" else {"low": p0, "high": p1}))
    return out


_random.register_fake(
    lambda kind, shape, dtype, device, seed, offset, p0, p1:
    torch.empty(shape, dtype=dtype, device=device))


def map(chain: Sequence[str], x: Tensor, y: Optional[Tensor] = None,
        z: Optional[Tensor] = None, scalars: Sequence[float] = ()) -> Tensor:
    """torch.ops.kiln.map: kiln.lib.map with each step as text ('exp', 'mul:y', 'add:s0'); the
    operator takes them joined by commas ('exp,mul:y')."""
    return torch.ops.kiln.map(",".join(chain), x, y, z, [float(s) for s in scalars])


def unary(op: str, x: Tensor) -> Tensor:
    """torch.ops.kiln.unary: kiln.lib.unary."""
    return torch.ops.kiln.unary(op, x)


def binary(op: str, a: Tensor, b: Tensor) -> Tensor:
    """torch.ops.kiln.binary: kiln.lib.binary (broadcasting)."""
    return torch.ops.kiln.binary(op, a, b)


def reduce(op: str, x: Tensor, axes: Any = None, keepdim: bool = False,
           correction: int = 1) -> Tensor:
    """torch.ops.kiln.reduce: kiln.lib.reduce ('sum', 'mean', 'max', 'min', 'prod', 'argmax',
    'argmin', 'var')."""
    return torch.ops.kiln.reduce(op, x, _lib._axes(axes), keepdim, correction)


def uniform(shape: Sequence[int], dtype: torch.dtype = torch.float32, device: Any = "cpu",
            seed: int = 0, offset: int = 0, low: float = 0.0, high: float = 1.0) -> Tensor:
    """torch.ops.kiln.random('uniform', ...): kiln.lib.uniform into a new tensor (the same bits
    on every device)."""
    return torch.ops.kiln.random("uniform", list(shape), dtype, torch.device(device), seed,
                                 offset, low, high)


def normal(shape: Sequence[int], dtype: torch.dtype = torch.float32, device: Any = "cpu",
           seed: int = 0, offset: int = 0, mean: float = 0.0, stddev: float = 1.0) -> Tensor:
    """torch.ops.kiln.random('normal', ...): kiln.lib.normal into a new tensor."""
    return torch.ops.kiln.random("normal", list(shape), dtype, torch.device(device), seed,
                                 offset, mean, stddev)


# ---- a user's own kernel --------------------------------------------------------------------

def custom_op(name: str, kernel: str, *, inputs: Sequence[str],
              outputs: Callable[..., Any], grid: Callable[..., Tuple[Any, Any]],
              comptime: Optional[Dict[str, Any]] = None,
              num_outputs: int = 1) -> Callable[..., Any]:
    """Registers the DSL kernel `kernel` (a registered name) as the PyTorch operator `name`
    ("namespace::op") and returns a function that calls it.

    The operator takes the tensors named by `inputs`; `outputs(*inputs)` makes its
    `num_outputs` new output tensors (one tensor, or a tuple of them, with new_empty: it is
    also the fake implementation torch.compile traces with); `grid(*inputs)` gives
    (cubes, cube_dim). The kernel is launched with the inputs, then the outputs, then the
    `comptime` values by name: CPU tensors on the 'cpu' runtime, CUDA tensors on 'cuda:N' on
    PyTorch's current stream; the operator returns when the kernel is done (its faults are
    raised as kiln.Error).

    >>> row_sum = kiln.torch.custom_op(
    ...     "mylib::row_sum", "row_sum", inputs=["a"],
    ...     outputs=lambda a: a.new_empty(a.shape[0]),
    ...     grid=lambda a: (a.shape[0], 256), comptime={"units": 256})
    >>> row_sum(torch.randn(8, 100))
    """
    names = list(inputs)
    if not names or any(not isinstance(n, str) or not n.isidentifier() for n in names):
        raise ValueError(f"inputs names the operator's tensor arguments, got {inputs!r}")
    namespace, _, op_name = name.partition("::")
    if not namespace or not op_name:
        raise ValueError(f"name is 'namespace::op', got {name!r}")
    if num_outputs < 1:
        raise ValueError(f"num_outputs is 1 or more, got {num_outputs}")
    values = dict(comptime or {})
    single = num_outputs == 1

    def made(*tensors: Tensor) -> Tuple[Tensor, ...]:
        result = outputs(*tensors)
        result = (result,) if isinstance(result, Tensor) else tuple(result)
        if len(result) != num_outputs:
            raise ValueError(f"{name}: outputs() made {len(result)} tensors, not {num_outputs}")
        return result

    # The CPU launch, resolved once and waiting for its kernel (so it reads the tensors in place).
    launch_cpu = _shared_runtime("cpu").launcher(kernel, wait=True, **values)
    any_requires_grad = torch._C._any_requires_grad

    def run(*tensors: Tensor) -> Any:
        outs = made(*tensors)
        if any_requires_grad(*tensors):  # below autograd: read, not recorded
            tensors = tuple(map_(_d, tensors))
        cubes, cube_dim = grid(*tensors)
        if tensors[0].is_cpu:
            launch_cpu(cubes, cube_dim, *tensors, *outs)
        else:
            device = tensors[0].device
            if device.type != "cuda":
                raise _lib._error(f"{name}: a PyTorch tensor on {device} has no kiln device "
                                  "(cpu and cuda have)")
            rt = _shared_runtime(f"cuda:{device.index or 0}")
            stream = rt.wrap_stream(torch.cuda.current_stream(device).cuda_stream)
            rt.launch_on(stream, kernel, cubes, cube_dim, *tensors, *outs, **values)
            rt.sync(stream)  # a kernel's faults (checked mode, asserts) come back here
        return outs[0] if single else outs

    returns = "Tensor" if single else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
    library = torch.library.Library(namespace, "FRAGMENT")
    library.define(op_name + "(" + ", ".join(f"Tensor {n}" for n in names) + ") -> " + returns)
    library.impl(op_name, run, "CompositeExplicitAutograd")
    torch.library.register_fake(name, lib=library)(
        lambda *t: made(*t)[0] if single else made(*t))
    op = getattr(getattr(torch.ops, namespace), op_name).default

    def call(*tensors: Tensor) -> Any:
        return op(*tensors)

    call.__name__ = op_name
    call.__doc__ = f"The PyTorch operator {name}: kiln kernel '{kernel}'."
    call._library = library  # the registration lives as long as the function
    return call
