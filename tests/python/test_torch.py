"""kiln with PyTorch: kiln.lib on torch tensors, the operators kiln.torch registers (opcheck,
gradients against PyTorch's autograd, torch.compile(fullgraph=True) of a small model against
eager PyTorch), and a user's DSL kernel as an operator.

Run by ctest as `python_torch`, in the virtual environment `python_package` installed kiln into,
with PyTorch from PyPI (skipped, with the reason, when it cannot be installed).
"""
import numpy as np
import pytest
import torch
from torch.library import opcheck

import kiln
import kiln.torch as kt
from kiln import lib

torch.manual_seed(0)


def close(got, want, tol=1e-5):
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


# ---- kiln.lib on torch tensors -----------------------------------------------------------------

def test_torch_in_torch_out_of_every_float_type():
    for dtype, tol in ((torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 5e-2)):
        a, b = torch.randn(17, 33, dtype=dtype), torch.randn(33, 9, dtype=dtype)
        c = lib.matmul(a, b)
        assert isinstance(c, torch.Tensor) and c.dtype == dtype and c.shape == (17, 9)
        close(c, a.float() @ b.float(), tol)
        s = lib.softmax(a)
        assert s.dtype == dtype
        close(s, torch.softmax(a.float(), -1), tol)


def test_strided_views_and_broadcasting_of_torch_tensors():
    base = torch.randn(12, 40)
    x = base[::3, 1::2]  # a view: strides (120, 2)
    close(lib.layer_norm(x), torch.nn.functional.layer_norm(x, (20,)), 1e-5)
    w = torch.randn(20)
    close(lib.binary("mul", x, w[None]), x * w, 1e-6)
    close(lib.reduce("max", x, axes=0), x.amax(0), 0)
    close(lib.reduce("var", x, axes=-1), x.var(-1), 1e-5)
    o = torch.empty(4, 20).t()  # an output that is a transposed view
    lib.copy(x.t(), o)
    close(o, x.t(), 0)


def test_grouped_matmul_on_torch_tensors_as_torch_grouped_mm_takes_them():
    a, b = torch.randn(40, 16, dtype=torch.bfloat16), torch.randn(3, 16, 24, dtype=torch.bfloat16)
    offs = torch.tensor([12, 12, 37], dtype=torch.int32)  # an empty group; rows 37.. in none
    c = lib.grouped_matmul(a, b, offs, out_dtype="f32")
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and c.shape == (40, 24)
    want = torch.zeros(40, 24)
    start = 0
    for g, end in enumerate(offs.tolist()):
        want[start:end] = a[start:end].float() @ b[g].float()
        start = end
    close(c, want, 1e-4)


def test_attention_against_scaled_dot_product_attention():
    q = torch.randn(2, 4, 45, 64, dtype=torch.bfloat16)
    k, v = torch.randn(2, 2, 60, 64, dtype=torch.bfloat16), torch.randn(2, 2, 60, 64, dtype=torch.bfloat16)
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    for causal in (False, True):
        # PyTorch's causal mask is top-left aligned; kiln's (and FlashAttention's) aligns the
        # last query with the last key: the same when Sq == Sk, so compare with an explicit mask.
        mask = torch.ones(45, 60, dtype=torch.bool).tril(60 - 45) if causal else None
        want = torch.nn.functional.scaled_dot_product_attention(q.float(), kr.float(), vr.float(),
                                                                attn_mask=mask)
        close(kt.attention(q, k, v, causal=causal), want, 3e-2)
    opcheck(torch.ops.kiln.attention.default, (q, k, v), {"causal": True})
    # BSHD data as a transposed view.
    qb = q.transpose(1, 2).contiguous().transpose(1, 2)
    close(kt.attention(qb, k, v), kt.attention(q, k, v), 0)


def test_attention_gradients_against_scaled_dot_product_attention():
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.randn(2, 4, 37, 64, dtype=dtype, requires_grad=True)
        k = torch.randn(2, 2, 50, 64, dtype=dtype, requires_grad=True)
        v = torch.randn(2, 2, 50, 64, dtype=dtype, requires_grad=True)
        g = torch.randn(2, 4, 37, 64, dtype=dtype)
        mask = torch.ones(37, 50, dtype=torch.bool).tril(50 - 37)
        kt.attention(q, k, v, causal=True).backward(g)
        qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
        torch.nn.functional.scaled_dot_product_attention(
            qf, kf.repeat_interleave(2, dim=1), vf.repeat_interleave(2, dim=1),
            attn_mask=mask).backward(g.float())
        for got, want in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad)):
            assert got.dtype == dtype
            # bf16 gradients: P and dS rounded to 8 bits before their products, then the result.
            torch.testing.assert_close(got.float(), want, rtol=5e-2, atol=2e-2 * want.abs().max())
    q, k, v = (torch.randn(1, 2, 20, 32, dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.ops.kiln.attention_forward(q, k, v)
    opcheck(torch.ops.kiln.attention_forward.default, (q, k, v), {"causal": True})
    opcheck(torch.ops.kiln.attention_backward.default, (q, k, v, out, torch.randn_like(q), lse))


def test_attention_in_f32_with_gradients_against_scaled_dot_product_attention():
    # f32 inputs run on the CPU, f32 throughout: as close as PyTorch's own math path.
    q = torch.randn(2, 4, 29, 64, requires_grad=True)
    k, v = (torch.randn(2, 2, 41, 64, requires_grad=True) for _ in range(2))
    g = torch.randn(2, 4, 29, 64)
    mask = torch.ones(29, 41, dtype=torch.bool).tril(41 - 29)
    out = kt.attention(q, k, v, causal=True)
    assert out.dtype == torch.float32
    out.backward(g)
    qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(
        qf, kf.repeat_interleave(2, dim=1), vf.repeat_interleave(2, dim=1), attn_mask=mask)
    want.backward(g)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    for got, ref in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * ref.abs().max())


def test_attention_with_variable_lengths_and_its_gradients():
    lens = [7, 0, 30]
    cu = torch.tensor([0, 7, 7, 37], dtype=torch.int32)
    q = torch.randn(37, 2, 32, dtype=torch.bfloat16, requires_grad=True)  # THD, packed
    k = torch.randn(37, 2, 32, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(37, 2, 32, dtype=torch.bfloat16, requires_grad=True)
    bhsd = lambda t: t.permute(1, 0, 2).unsqueeze(0)  # noqa: E731
    out = kt.attention(bhsd(q), bhsd(k), bhsd(v), causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu)
    g = torch.randn_like(out)
    out.backward(g)
    start = 0
    for n in lens:
        if n:
            qs, ks, vs = (t.detach()[start:start + n].clone().requires_grad_() for t in (q, k, v))
            o = kt.attention(bhsd(qs), bhsd(ks), bhsd(vs), causal=True)
            o.backward(g[:, :, start:start + n])
            torch.testing.assert_close(out[:, :, start:start + n], o, rtol=0, atol=0)
            for got, want in ((q.grad, qs.grad), (k.grad, ks.grad), (v.grad, vs.grad)):
                torch.testing.assert_close(got[start:start + n], want, rtol=0, atol=0)
        start += n


def test_conv_and_its_gradients_against_torch():
    x = torch.randn(2, 6, 11, 9, requires_grad=True)
    w = torch.randn(8, 3, 3, 2, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    opts = dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
    y = torch.nn.functional.conv2d(x, w, b, **opts)
    got = lib.conv(x.detach(), w.detach(), bias=b.detach(), **opts)
    close(got, y.detach(), 1e-4)
    dy = torch.randn_like(y)
    y.backward(dy)
    dx = lib.conv_backward_input(dy, w.detach(), input_shape=x.shape, **opts)
    dw, db = lib.conv_backward_weight(x.detach(), dy, weight_shape=w.shape, bias=True, **opts)
    close(dx, x.grad, 1e-4)
    close(dw, w.grad, 1e-4)
    close(db, b.grad, 1e-4)


def test_torch_errors_name_the_argument():
    with pytest.raises(kiln.Error, match="has no kiln device"):
        lib.softmax(torch.empty(3, device="meta"))
    with pytest.raises(kiln.Error, match="'b' is .*f64|f64"):
        lib.matmul(torch.randn(2, 3), torch.randn(3, 2, dtype=torch.float64))
    with pytest.raises(kiln.Error, match="argument 'weight' is a list"):
        lib.layer_norm(torch.randn(2, 3), weight=[1.0, 2.0, 3.0])


# ---- the operators --------------------------------------------------------------------------

def samples():
    x = torch.randn(3, 5, 12)
    img = torch.randn(2, 3, 9, 9)
    return [
        (torch.ops.kiln.matmul.default, (torch.randn(4, 5), torch.randn(5, 6), torch.randn(6))),
        (torch.ops.kiln.matmul.default,
         (torch.randn(2, 1, 5, 4), torch.randn(3, 6, 5), None, True, True, 0.5, "gelu")),
        (torch.ops.kiln.conv.default, (img, torch.randn(4, 3, 3, 3), torch.randn(4), [2], [1],
                                       [1], 1, "relu")),
        (torch.ops.kiln.conv_backward_input.default,
         (torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3), [2, 3, 9, 9], [2], [1], [1], 1)),
        (torch.ops.kiln.conv_backward_weight.default,
         (img, torch.randn(2, 4, 5, 5), [4, 3, 3, 3], [2], [1], [1], 1)),
        (torch.ops.kiln.softmax.default, (x,)),
        (torch.ops.kiln.log_softmax.default, (x,)),
        (torch.ops.kiln.softmax_backward.default, (torch.randn(3, 7), torch.rand(3, 7), False)),
        (torch.ops.kiln.layer_norm.default, (x, torch.randn(12), torch.randn(12), 1e-5)),
        (torch.ops.kiln.rms_norm.default, (x, torch.randn(12), 1e-6)),
        (torch.ops.kiln.norm_backward.default, (torch.randn(4, 8), torch.randn(4, 8), None, 1e-5,
                                                False)),
        (torch.ops.kiln.max_pool2d.default, (img, [3, 3], [2, 2], [1, 1], [1, 1], False, "nchw")),
        (torch.ops.kiln.avg_pool2d.default, (img, [2, 2], [], [0, 0], False, "nchw", True, 0)),
        (torch.ops.kiln.map.default, ("mul:s0,exp,add:y", x, torch.randn(12), None, [0.5])),
        (torch.ops.kiln.unary.default, ("tanh", x)),
        (torch.ops.kiln.binary.default, ("sub", x, torch.randn(5, 1))),
        (torch.ops.kiln.reduce.default, ("sum", x, [0, 2], True, 1)),
        (torch.ops.kiln.reduce.default, ("argmax", x, [1], False, 1)),
        (torch.ops.kiln.random.default, ("normal", [4, 6], torch.float32, torch.device("cpu"), 3,
                                         0, 0.0, 1.0)),
    ]


@pytest.mark.parametrize("op,args", samples(), ids=lambda v: str(v)[:40])
def test_opcheck(op, args):
    # Gradients are checked against PyTorch below; opcheck's tests of schema, fake tensors,
    # autograd registration and AOT dispatch here.
    opcheck(op, args, test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                  "test_aot_dispatch_dynamic"))


def grads(fn, *inputs, upstream=None):
    """fn's output and the gradients of (output * upstream).sum() for each input."""
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in inputs]
    out = fn(*leaves)
    out = out[0] if isinstance(out, tuple) else out
    up = upstream if upstream is not None else torch.randn_like(out)
    (out * up).sum().backward()
    return out, [t.grad if t is not None else None for t in leaves], up


def same_grads(kiln_fn, torch_fn, *inputs, tol=1e-4):
    out, got, up = grads(kiln_fn, *inputs)
    want_out, want, _ = grads(torch_fn, *inputs, upstream=up)
    close(out, want_out, tol)
    for g, w in zip(got, want):
        if w is not None:
            close(g, w, tol)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("epilogue", ["none", "relu", "gelu"])
def test_matmul_gradients(ta, tb, epilogue):
    a = torch.randn(2, 1, 6, 5) if ta else torch.randn(2, 1, 5, 6)
    b = torch.randn(3, 4, 6) if tb else torch.randn(3, 6, 4)
    bias = torch.randn(4)
    act = {"none": lambda v: v, "relu": torch.relu,
           "gelu": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[epilogue]

    def ref(a, b, bias):
        return act(0.5 * ((a.mT if ta else a) @ (b.mT if tb else b)) + bias)

    same_grads(lambda a, b, bias: kt.matmul(a, b, bias, transpose_a=ta, transpose_b=tb,
                                            alpha=0.5, epilogue=epilogue), ref, a, b, bias)


@pytest.mark.parametrize("epilogue", ["none", "relu", "gelu", "silu"])
def test_conv_gradients(epilogue):
    x, w, bias = torch.randn(2, 6, 9, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    act = {"none": lambda v: v, "relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[epilogue]
    opts = dict(stride=(2, 1), padding=(1, 2), groups=2)
    same_grads(lambda x, w, b: kt.conv(x, w, b, epilogue=epilogue, **opts),
               lambda x, w, b: act(torch.nn.functional.conv2d(x, w, b, **opts)), x, w, bias)
    # channels_last memory: the same operator reads the strides as they are
    xl = x.to(memory_format=torch.channels_last)
    close(kt.conv(xl, w, bias, **opts), torch.nn.functional.conv2d(x, w, bias, **opts), 1e-4)


def test_softmax_and_norm_gradients():
    x = torch.randn(4, 7, 19)
    same_grads(kt.softmax, lambda v: torch.softmax(v, -1), x)
    same_grads(kt.log_softmax, lambda v: torch.log_softmax(v, -1), x)
    w, b = torch.randn(19), torch.randn(19)
    same_grads(kt.layer_norm, lambda v, w, b: torch.nn.functional.layer_norm(v, (19,), w, b),
               x, w, b)
    same_grads(lambda v: kt.layer_norm(v), lambda v: torch.nn.functional.layer_norm(v, (19,)), x)
    same_grads(lambda v, w: kt.rms_norm(v, w, 1e-6),
               lambda v, w: torch.nn.functional.rms_norm(v, (19,), w, 1e-6), x, w)
    h = torch.randn(6, 32, dtype=torch.bfloat16)
    same_grads(kt.softmax, lambda v: torch.softmax(v.float(), -1).to(v.dtype), h, tol=3e-2)


def test_the_autograd_kernel_records_exactly_when_it_must():
    # The Autograd kernel calls the implementation itself for plain tensors that need no
    # gradient, and takes PyTorch's general path otherwise; both give the same values.
    assert kt._PLAIN_KEYSETS, "the key set probe found no plain CPU key set"
    x = torch.randn(3, 11)
    want = torch.softmax(x, -1)
    leaf = x.clone().requires_grad_()
    y = kt.softmax(leaf)  # recorded
    assert y.grad_fn is not None
    close(y.detach(), want)
    with torch.no_grad():  # not recorded, though the input requires a gradient
        y = kt.softmax(leaf)
    assert y.grad_fn is None and not y.requires_grad
    close(y, want)
    y = kt.softmax(x)  # plain, nothing to record
    assert y.grad_fn is None
    close(y, want)
    with torch.inference_mode():
        close(kt.softmax(x.clone()), want)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # another key set: the general path
        close(kt.softmax(x), want)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:  # the Python key: the fake implementation, not kiln
        f = kt.softmax(mode.from_tensor(x))
    assert f.shape == x.shape and type(f).__name__ == "FakeTensor"
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    with torch.no_grad():
        close(kt.matmul(a.requires_grad_(), b), a.detach() @ b)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_pooling_gradients(layout):
    x = torch.randn(2, 3, 10, 9)

    def to(v):  # NCHW -> the layout's view of the same numbers
        return v.permute(0, 2, 3, 1).contiguous() if layout == "nhwc" else v

    def back(v):
        return v.permute(0, 3, 1, 2) if layout == "nhwc" else v

    same_grads(lambda v: back(kt.max_pool2d(to(v), 3, 2, 1, layout=layout)),
               lambda v: torch.nn.functional.max_pool2d(v, 3, 2, 1), x)
    same_grads(lambda v: back(kt.avg_pool2d(to(v), 3, 2, 1, layout=layout,
                                            count_include_pad=False)),
               lambda v: torch.nn.functional.avg_pool2d(v, 3, 2, 1, count_include_pad=False), x)


def test_a_compiled_model_of_kiln_operators_matches_eager_pytorch():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(24, 32) / 5)
            self.b = torch.nn.Parameter(torch.randn(32))
            self.g = torch.nn.Parameter(torch.ones(32))
            self.beta = torch.nn.Parameter(torch.zeros(32))

        def forward(self, x, use_kiln=True):
            if use_kiln:
                h = kt.matmul(x, self.w, self.b, epilogue="gelu")
                return kt.softmax(kt.layer_norm(h, self.g, self.beta))
            h = torch.nn.functional.gelu(x @ self.w + self.b, approximate="tanh")
            return torch.softmax(torch.nn.functional.layer_norm(h, (32,), self.g, self.beta), -1)

    model = Block()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(16, 24)
    got = compiled(x)
    want = model(x, use_kiln=False)
    close(got, want, 1e-5)
    got.square().sum().backward()  # gradients through the compiled graph
    kiln_grad = model.w.grad.clone()
    model.zero_grad()
    want.square().sum().backward()
    close(kiln_grad, model.w.grad, 1e-4)


def test_random_operators_are_deterministic():
    u = kt.uniform([1000], seed=5, low=-2, high=2)
    assert u.dtype == torch.float32 and u.min() >= -2 and u.max() < 2
    torch.testing.assert_close(u, kt.uniform([1000], seed=5, low=-2, high=2), rtol=0, atol=0)
    n = kt.normal([1 << 15], dtype=torch.bfloat16, seed=1)
    assert n.dtype == torch.bfloat16 and abs(n.float().mean()) < 0.05
    np.testing.assert_array_equal(
        lib.uniform(shape=(1000,), seed=5, low=-2, high=2), u.numpy())


# ---- a user's own kernel --------------------------------------------------------------------

def test_a_dsl_kernel_as_an_operator():
    row_sum = kt.custom_op("kiln_test::row_sum", "row_sum", inputs=["a"],
                           outputs=lambda a: a.new_empty(a.shape[0]),
                           grid=lambda a: (a.shape[0], 64), comptime={"units": 64})
    a = torch.randn(37, 300)
    close(row_sum(a), a.sum(1), 1e-4)
    close(torch.ops.kiln_test.row_sum(a), a.sum(1), 1e-4)
    opcheck(torch.ops.kiln_test.row_sum.default, (a,),
            test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    compiled = torch.compile(lambda t: row_sum(t) * 2, fullgraph=True)
    close(compiled(a), a.sum(1) * 2, 1e-4)
    with pytest.raises(kiln.Error, match="no_such_kernel"):
        kt.custom_op("kiln_test::nothing", "no_such_kernel", inputs=["a"],
                     outputs=lambda a: a, grid=lambda a: (1, 1))
    with pytest.raises(ValueError, match="namespace::op"):
        kt.custom_op("row_sum2", "row_sum", inputs=["a"], outputs=lambda a: a,
                     grid=lambda a: (1, 1))
