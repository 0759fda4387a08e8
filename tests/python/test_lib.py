"""kiln.lib from Python against NumPy: odd shapes, strided views, broadcasting, every dtype the
library takes, results of the inputs' kind, and errors that name the argument.

Run by ctest as `python_lib` (Debian's python3 and NumPy 1, PYTHONPATH=build/python) and inside
`python_package` (the pip-installed package, NumPy 2), or directly:
    PYTHONPATH=build/python python3 -m pytest tests/python/test_lib.py
"""
import numpy as np
import pytest

import kiln
from kiln import lib

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=tol, atol=tol)


# ---- matmul -----------------------------------------------------------------------------------

@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (37, 53, 29), (64, 64, 64), (5, 300, 3)])
def test_matmul_odd_shapes(m, k, n):
    a, b = rand(m, k), rand(k, n)
    c = lib.matmul(a, b)
    assert isinstance(c, np.ndarray) and c.shape == (m, n) and c.dtype == np.float32
    close(c, a.astype(np.float64) @ b, 1e-4)


def test_matmul_transposes_views_and_batch_broadcasting():
    a = rand(2, 1, 7, 5)   # transposed: [.., K=7, M=5]
    b = rand(3, 4, 7)      # transposed: [.., N=4, K=7]
    c = lib.matmul(a, b, transpose_a=True, transpose_b=True)
    assert c.shape == (2, 3, 5, 4)
    close(c, np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2), 1e-4)
    big = rand(20, 30)
    view = big[1::2, ::3]  # strides (60, 3) elements: read as it is
    w = rand(10, 6)
    close(lib.matmul(view, w), view @ w, 1e-4)


def test_matmul_alpha_beta_bias_and_epilogues():
    a, b = rand(9, 13), rand(13, 11)
    c = rand(9, 11)
    want = 0.5 * (a @ b) + 2.0 * c
    got = lib.matmul(a, b, c.copy(), alpha=0.5, beta=2.0)
    close(got, want, 1e-4)
    bias = rand(11)
    close(lib.matmul(a, b, bias=bias, epilogue="relu"), np.maximum(a @ b + bias, 0), 1e-4)
    z = a @ b
    gelu = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    close(lib.matmul(a, b, epilogue="gelu"), gelu, 1e-4)


def test_matmul_per_tensor_scales_and_split_k():
    a, b = rand(12, 40), rand(40, 9)
    close(lib.matmul(a, b, scale_a=0.5, scale_b=3.0, alpha=2.0), 3.0 * (a @ b), 1e-4)
    close(lib.matmul(a, b, split_k=2), a @ b, 1e-4)  # the CPU does not split: the same product
    with pytest.raises(kiln.Error, match="scale_a \\(inf\\)"):
        lib.matmul(a, b, scale_a=float("inf"))
    with pytest.raises(kiln.Error, match="split_k is -1"):
        lib.matmul(a, b, split_k=-1)


def test_matmul_f16_and_an_f32_result():
    a, b = rand(16, 24, dtype=np.float16), rand(24, 8, dtype=np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    c16 = lib.matmul(a, b)
    assert c16.dtype == np.float16
    close(c16, want, 1e-2)
    c32 = lib.matmul(a, b, out_dtype="f32")
    assert c32.dtype == np.float32
    close(c32, want, 1e-5)


def test_grouped_matmul_groups_of_rows():
    a, b = rand(50, 12), rand(4, 12, 9)
    offsets = np.array([10, 10, 31, 45], np.int32)  # group 1 is empty; rows 45.. in none
    c = lib.grouped_matmul(a, b, offsets)
    assert c.shape == (50, 9) and c.dtype == np.float32
    want = np.zeros((50, 9))
    start = 0
    for g, end in enumerate(offsets):
        want[start:end] = a[start:end].astype(np.float64) @ b[g]
        start = end
    close(c, want, 1e-4)
    bias = rand(4, 9)
    bt = np.ascontiguousarray(np.swapaxes(b, 1, 2))  # [G, N, K]
    got = lib.grouped_matmul(a, bt, offsets, transpose_b=True, bias=bias, epilogue="relu")
    start = 0
    for g, end in enumerate(offsets):
        want[start:end] = np.maximum(want[start:end] + bias[g], 0)
        start = end
    close(got, want, 1e-4)
    with pytest.raises(kiln.Error, match=r"offsets\[1\] is 5: the groups' ends must not"):
        lib.grouped_matmul(a, b, np.array([10, 5, 31, 45], np.int32))
    with pytest.raises(kiln.Error, match=r"it must be i32\[G\]"):
        lib.grouped_matmul(a, b, np.array([10, 10, 31, 45], np.int64))


def conv_ref(x, w, stride=1, padding=0, dilation=1, groups=1):
    """A 2-d convolution in float64 with NumPy, PyTorch's semantics."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    oh = (h - dilation * (r - 1) - 1) // stride + 1
    ow = (wd - dilation * (s - 1) - 1) // stride + 1
    y = np.zeros((n, k, oh, ow))
    kg = k // groups
    for o in range(k):
        g = o // kg
        for i in range(r):
            for j in range(s):
                patch = x[:, g * cg:(g + 1) * cg, i * dilation:i * dilation + stride * oh:stride,
                          j * dilation:j * dilation + stride * ow:stride]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    return y


def test_conv_forward_and_both_gradients():
    x, w = rand(2, 6, 9, 8), rand(4, 3, 3, 3)
    opts = dict(stride=2, padding=1, groups=2)
    y = lib.conv(x, w, **opts)
    want = conv_ref(x, w, 2, 1, 1, 2)
    assert y.shape == want.shape == lib.conv_output_shape(x.shape, w.shape, **opts)
    close(y, want, 1e-4)
    bias = rand(4)
    close(lib.conv(x, w, bias=bias, epilogue="relu", **opts),
          np.maximum(want + bias[None, :, None, None], 0), 1e-4)
    # The gradients are the forward's adjoints: <conv(x), dy> = <x, dx> = <w, dw>.
    dy = rand(*y.shape)
    dx = lib.conv_backward_input(dy, w, input_shape=x.shape, **opts)
    dw, dbias = lib.conv_backward_weight(x, dy, weight_shape=w.shape, bias=True, **opts)
    forward = float(np.sum(want * dy))
    assert abs(float(np.sum(x.astype(np.float64) * dx)) - forward) < 1e-3 * max(1, abs(forward))
    assert abs(float(np.sum(w.astype(np.float64) * dw)) - forward) < 1e-3 * max(1, abs(forward))
    close(dbias, dy.astype(np.float64).sum(axis=(0, 2, 3)), 1e-4)


def test_conv_same_padding_nhwc_and_errors():
    x, w = rand(1, 7, 7, 5), rand(8, 5, 3, 3)  # NHWC x
    y = lib.conv(x, w, padding="same", layout="nhwc")
    assert y.shape == (1, 7, 7, 8)
    want = conv_ref(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), w, 1, 1)
    close(y, want.transpose(0, 2, 3, 1), 1e-4)
    with pytest.raises(kiln.Error, match="groups is 3"):
        lib.conv(rand(1, 4, 5, 5), rand(6, 4, 3, 3), groups=3)
    with pytest.raises(kiln.Error, match="padding is 'full'"):
        lib.conv(rand(1, 4, 5, 5), rand(6, 4, 3, 3), padding="full")
    with pytest.raises(kiln.Error, match="needs dx or input_shape"):
        lib.conv_backward_input(rand(1, 6, 3, 3), rand(6, 4, 3, 3))


def attention_ref(q, k, v, causal=False, bias=None):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if causal:
        sq, sk = s.shape[-2:]
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    return p / p.sum(axis=-1, keepdims=True) @ v, (m + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]


def test_attention_gqa_causal_bias_lse_and_bshd_views():
    q, k, v = rand(2, 4, 37, 64, dtype=np.float16), rand(2, 2, 50, 64, dtype=np.float16), \
        rand(2, 2, 50, 64, dtype=np.float16)
    bias = rand(1, 4, 37, 50)
    out, lse = lib.attention(q, k, v, causal=True, bias=bias, out_dtype="f32", return_lse=True)
    want, want_lse = attention_ref(q, k, v, causal=True, bias=bias)
    assert out.shape == q.shape and out.dtype == np.float32 and lse.shape == (2, 4, 37)
    close(out, want, 5e-3)
    close(lse, want_lse, 1e-4)
    # BSHD buffers, passed as BHSD views.
    qb, kb, vb = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v))
    out2 = np.zeros(qb.shape, np.float16)
    lib.attention(qb.transpose(0, 2, 1, 3), kb.transpose(0, 2, 1, 3), vb.transpose(0, 2, 1, 3),
                  out2.transpose(0, 2, 1, 3))
    close(out2.transpose(0, 2, 1, 3), attention_ref(q, k, v)[0], 5e-3)
    # f32 inputs (the CPU): f32 throughout.
    q, k, v = rand(1, 2, 8, 32), rand(1, 1, 19, 32), rand(1, 1, 19, 32)
    out = lib.attention(q, k, v, causal=True)
    assert out.dtype == np.float32
    close(out, attention_ref(q, k, v, causal=True)[0], 1e-5)
    with pytest.raises(kiln.Error, match="attention takes f16, bf16 or"):
        lib.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))


def test_attention_backward_against_central_differences_of_the_reference():
    q, k, v = rand(1, 2, 9, 32, dtype=np.float16), rand(1, 1, 13, 32, dtype=np.float16), \
        rand(1, 1, 13, 32, dtype=np.float16)
    dout = rand(1, 2, 9, 32, dtype=np.float16)
    out, lse = lib.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = lib.attention_backward(q, k, v, out, dout, lse, causal=True, grad_dtype="f32")
    assert dq.shape == q.shape and dk.shape == k.shape and dq.dtype == np.float32
    loss = lambda q_, k_, v_: float((attention_ref(q_, k_, v_, causal=True)[0] * dout).sum())
    x = [np.asarray(t, np.float64) for t in (q, k, v)]
    for i, got in enumerate((dq, dk, dv)):
        want = np.zeros(x[i].shape)
        for e in np.ndindex(*x[i].shape):
            keep = x[i][e]
            x[i][e] = keep + 1e-4
            up = loss(*x)
            x[i][e] = keep - 1e-4
            want[e] = (up - loss(*x)) / 2e-4
            x[i][e] = keep
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    with pytest.raises(kiln.Error, match="dout holds f32"):
        lib.attention_backward(q, k, v, out, dout.astype(np.float32), lse)


def test_attention_with_variable_lengths_is_each_sequence_alone():
    lens_q, lens_k = [5, 0, 40, 17], [9, 3, 40, 0]
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q = rand(1, 4, int(cu_q[-1]), 64, dtype=np.float16)
    k, v = (rand(1, 2, int(cu_k[-1]), 64, dtype=np.float16) for _ in range(2))
    dout = rand(*q.shape, dtype=np.float16)
    out, lse = lib.attention(q, k, v, causal=True, return_lse=True, cu_seqlens_q=cu_q,
                             cu_seqlens_k=cu_k)
    dq, dk, dv = lib.attention_backward(q, k, v, out, dout, lse, causal=True, cu_seqlens_q=cu_q,
                                        cu_seqlens_k=cu_k, grad_dtype="f32")
    for b in range(len(lens_q)):
        rq, rk = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lens_q[b] == 0:
            assert not dk[:, :, rk].any()  # keys no query sees: no gradient
            continue
        args = (np.ascontiguousarray(q[:, :, rq]), np.ascontiguousarray(k[:, :, rk]),
                np.ascontiguousarray(v[:, :, rk]))
        o1, l1 = lib.attention(*args, causal=True, return_lse=True)
        np.testing.assert_array_equal(out[:, :, rq], o1)
        np.testing.assert_array_equal(lse[:, :, rq], l1)
        g = lib.attention_backward(*args, o1, np.ascontiguousarray(dout[:, :, rq]), l1,
                                   causal=True, grad_dtype="f32")
        for got, want, r in zip((dq, dk, dv), g, (rq, rk, rk)):
            np.testing.assert_array_equal(got[:, :, r], want)
    with pytest.raises(kiln.Error, match="cu_seqlens_q\\[0\\] is 62; the offsets start at 0"):
        lib.attention(q, k, v, cu_seqlens_q=cu_q[::-1].copy(), cu_seqlens_k=cu_k)


def test_matmul_errors_name_the_argument():
    a = rand(5, 7)
    with pytest.raises(kiln.Error, match="columns of the first") as e:
        lib.matmul(a, rand(3, 3))
    assert e.value.kind == "invalid argument"
    with pytest.raises(kiln.Error, match="argument 'b' is a list"):
        lib.matmul(a, [1, 2])
    with pytest.raises(kiln.Error, match="argument 'a' has shape \\[7\\]"):
        lib.matmul(rand(7), rand(7, 2))
    ro = np.zeros((5, 2), np.float32)
    ro.flags.writeable = False
    with pytest.raises(kiln.Error, match="'c' (is read-only|cannot be passed)"):
        lib.matmul(a, rand(7, 2), ro)
    with pytest.raises(kiln.Error, match="epilogue is 'tanh'; it is one of 'none', 'relu'"):
        lib.matmul(a, rand(7, 2), epilogue="tanh")
    with pytest.raises(kiln.Error, match="f64"):
        lib.matmul(a.astype(np.float64), rand(7, 2).astype(np.float64))


# ---- elementwise ------------------------------------------------------------------------------

def test_map_chains_with_broadcasting_and_scalars():
    x, y = rand(4, 1, 6), rand(5, 1)
    got = lib.map([("mul", "s0"), ("add", "y"), "tanh", ("max", "s1")], x, y=y,
                  scalars=[0.5, -0.25])
    assert got.shape == (4, 5, 6)
    close(got, np.maximum(np.tanh(x * 0.5 + y), -0.25), 1e-5)


@pytest.mark.parametrize("op,ref", [
    ("neg", np.negative), ("abs", np.abs), ("exp", np.exp), ("sqrt", lambda v: np.sqrt(np.abs(v))),
    ("relu", lambda v: np.maximum(v, 0)), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("floor", np.floor)])
def test_unary(op, ref):
    x = rand(3, 17)
    if op == "sqrt":
        x = np.abs(x)
    close(lib.unary(op, x), ref(x), 1e-5)


@pytest.mark.parametrize("op,ref", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum),
    ("lt", lambda a, b: (a < b).astype(np.float32)), ("rsub", lambda a, b: b - a)])
def test_binary_broadcasts(op, ref):
    a, b = rand(3, 1, 5), rand(4, 1)
    close(lib.binary(op, a, b), ref(a, b), 1e-6)


def test_copy_of_a_transposed_view_converts_types():
    x = rand(6, 9) * 10
    dst = np.empty((9, 6), np.int32)
    assert lib.copy(x.T, dst) is dst
    np.testing.assert_array_equal(dst, np.trunc(x.T).astype(np.int32))


def test_elementwise_errors():
    with pytest.raises(kiln.Error, match="chain\\[1\\] is 'expo'; it is one of 'neg'"):
        lib.map(["exp", "expo"], rand(3))
    with pytest.raises(kiln.Error, match="chain\\[0\\] is 3"):
        lib.map([3], rand(3))
    with pytest.raises(kiln.Error, match="broadcast"):
        lib.binary("add", rand(3), rand(4))
    assert "relu" in lib.OPS and "sum" in lib.REDUCE_OPS


# ---- softmax and norms ------------------------------------------------------------------------

def softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_and_log_softmax_on_a_strided_view():
    base = rand(7, 40)
    x = base[:, 1::2]
    close(lib.softmax(x), softmax_ref(x), 1e-6)
    close(lib.log_softmax(x), np.log(softmax_ref(x.astype(np.float64))), 1e-5)
    y = x.copy()
    lib.softmax(y, y)  # in place
    close(y, softmax_ref(x), 1e-6)


def test_layer_norm_and_rms_norm():
    x, w, b = rand(3, 5, 33), rand(33), rand(33)
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    close(lib.layer_norm(x, weight=w, bias=b, eps=1e-5), (x - mean) / np.sqrt(var + 1e-5) * w + b,
          1e-4)
    close(lib.rms_norm(x, weight=w), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w,
          1e-4)
    with pytest.raises(kiln.Error, match="rms_norm"):
        kiln._kiln._lib.rms_norm(kiln.runtime(), x, np.empty_like(x), None, b, 1e-5)


# ---- reductions -------------------------------------------------------------------------------

@pytest.mark.parametrize("op,ref", [
    ("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min), ("prod", np.prod)])
@pytest.mark.parametrize("axes", [None, 1, (0, 2), -1])
def test_reductions(op, ref, axes):
    x = rand(3, 4, 5) if op != "prod" else (rand(3, 4, 5) * 0.1 + 1)
    got = lib.reduce(op, x, axes=axes)
    want = ref(x.astype(np.float64), axis=axes)
    assert np.shape(got) == np.shape(want)
    close(got, want, 1e-5)


def test_keepdim_var_arg_and_integer_sums():
    x = rand(6, 7)
    close(lib.reduce("var", x, axes=1, keepdim=True), x.var(1, ddof=1, keepdims=True), 1e-5)
    idx = lib.reduce("argmax", x, axes=0)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, x.argmax(0))
    i = RNG.integers(-100, 100, (5, 9)).astype(np.int32)
    s = lib.reduce("sum", i, axes=1)
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, i.sum(1))
    assert lib.reduce_output_shape((2, 3, 4), [1], True) == (2, 1, 4)
    assert lib.reduce_output_type("argmin", "f16") == "i64"
    with pytest.raises(kiln.Error, match="op is 'median'"):
        lib.reduce("median", x)


# ---- pooling ----------------------------------------------------------------------------------

def pool_ref(x, k, s, p, mode):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    pad = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)),
                 constant_values=-np.inf if mode == "max" else 0)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = pad[:, :, i * s:i * s + k, j * s:j * s + k]
            out[:, :, i, j] = win.max((2, 3)) if mode == "max" else win.mean((2, 3))
    return out


@pytest.mark.parametrize("k,s,p", [(2, 2, 0), (3, 2, 1), (3, 1, 1)])
def test_pooling_against_loops(k, s, p):
    x = rand(2, 3, 11, 9)
    close(lib.max_pool2d(x, kernel=k, stride=s, padding=p), pool_ref(x, k, s, p, "max"), 1e-6)
    close(lib.avg_pool2d(x, kernel=k, stride=s, padding=p), pool_ref(x, k, s, p, "avg"), 1e-5)


def test_max_pool_indices_and_nhwc():
    x = rand(1, 2, 6, 6)
    out, idx = lib.max_pool2d(x, kernel=2, return_indices=True)
    assert idx.dtype == np.int64
    planes = x.reshape(1, 2, 36)
    np.testing.assert_array_equal(np.take_along_axis(planes, idx.reshape(1, 2, 9), 2),
                                  out.reshape(1, 2, 9))
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    close(lib.max_pool2d(nhwc, kernel=2, layout="nhwc").transpose(0, 3, 1, 2), out, 0)
    assert lib.pool2d_output_shape((1, 2, 6, 6), kernel=3, stride=2, padding=1) == (1, 2, 3, 3)
    with pytest.raises(kiln.Error, match="padding"):
        lib.max_pool2d(x, kernel=2, padding=2)


# ---- random numbers ---------------------------------------------------------------------------

def test_random_numbers_depend_on_seed_and_offset_only():
    u = lib.uniform(shape=(4096,), seed=7, low=-1, high=3)
    assert u.dtype == np.float32 and u.min() >= -1 and u.max() < 3
    np.testing.assert_array_equal(u, lib.uniform(shape=(4096,), seed=7, low=-1, high=3))
    assert not np.array_equal(u, lib.uniform(shape=(4096,), seed=7, offset=1, low=-1, high=3))
    n = lib.normal(np.empty(1 << 16, np.float32), seed=3, mean=2.0, stddev=0.5)
    assert abs(n.mean() - 2.0) < 0.01 and abs(n.std() - 0.5) < 0.01
    with pytest.raises(kiln.Error, match="give `out`"):
        lib.uniform()


# ---- kinds and runtimes ------------------------------------------------------------------------

def test_kiln_tensors_in_give_kiln_tensors_out_on_their_runtime():
    for device in ("cpu", "cuda-emu"):
        rt = kiln.Runtime(device)
        a, b = rand(8, 12), rand(12, 4)
        c = lib.matmul(rt.upload(a), rt.upload(b))
        assert isinstance(c, kiln.Tensor) and c.device == device
        rt.sync()
        close(c.numpy(), a @ b, 1e-4)
        s = lib.reduce("sum", c, axes=0)
        rt.sync()
        close(s.numpy(), (a @ b).sum(0), 1e-4)


def test_a_tensor_of_a_vanished_runtime_asks_for_runtime():
    rt = kiln.Runtime("cpu")
    t = rt.upload(rand(4))
    del rt
    import gc
    gc.collect()
    with pytest.raises(kiln.Error, match="pass runtime="):
        lib.softmax(t)


def test_numpy_arrays_on_another_runtime():
    emu = kiln.Runtime("cuda-emu")
    x = rand(3, 10)
    y = emu.upload(np.zeros_like(x))
    lib.softmax(emu.upload(x), y, runtime=emu)
    emu.sync()
    close(y.numpy(), softmax_ref(x), 1e-6)


# ---- every element type NumPy has, both ways ---------------------------------------------------

@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64"])
def test_every_numpy_type_round_trips(dtype):
    src = (RNG.standard_normal((5, 7)) * 50).astype(dtype)
    old_numpy = np.lib.NumpyVersion(np.__version__) < "1.25.0"
    if dtype == "bool" and old_numpy:  # NumPy 1.24 exports no bool array through DLPack
        with pytest.raises(kiln.Error, match="argument 'src' cannot be passed through DLPack"):
            lib.copy(src, np.zeros_like(src))
        return
    for device in ("cpu", "cuda-emu"):
        rt = kiln.Runtime(device)
        t = rt.upload(src)
        assert t.dtype == lib._FROM_NUMPY[np.dtype(dtype).name]
        np.testing.assert_array_equal(t.numpy(), src)
        if device == "cpu":
            np.testing.assert_array_equal(np.from_dlpack(t), src)
            dst = np.zeros_like(src)
            lib.copy(t, dst, runtime=rt)  # a kiln tensor into a NumPy array, on its runtime
            np.testing.assert_array_equal(dst, src)
    strided = np.zeros((5, 14), dtype)
    lib.copy(src, strided[:, ::2])
    np.testing.assert_array_equal(strided[:, ::2], src)


def test_a_runtime_on_another_stream():
    # What kiln.lib does with PyTorch's CUDA stream, on a stream of the CPU's own.
    for device in ("cpu", "cuda-emu"):
        rt = kiln.Runtime(device)
        on = rt.on_stream(rt.new_stream())
        assert on.device == device and on._device_key == rt._device_key
        x = rand(5, 12)
        y = lib.softmax(rt.upload(x), runtime=on)
        on.sync()  # waits for the stream the copy launches on
        close(y.numpy(), softmax_ref(x), 1e-6)
        with pytest.raises(kiln.Error, match="another Runtime"):
            kiln.Runtime(device).on_stream(rt.new_stream())
