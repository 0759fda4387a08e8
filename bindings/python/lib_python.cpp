// kiln._kiln._lib: the kernel library's entry points (kiln::lib) as the extension module sees
// them: a runtime, every tensor given (kiln tensors or anything with __dlpack__, imported
// without a copy), options by keyword. kiln/lib.py is the public face: it picks the runtime,
// makes the outputs of the inputs' kind and names the arguments as these do.
#include <pybind11/stl.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bindings/python/common.h"
#include "kernels/lib/attention.h"
#include "kernels/lib/conv.h"
#include "kernels/lib/elementwise.h"
#include "kernels/lib/matmul.h"
#include "kernels/lib/norm.h"
#include "kernels/lib/pool.h"
#include "kernels/lib/random.h"
#include "kernels/lib/reduce.h"

namespace kiln::python {

namespace {

using kiln::lib::Arg;
using kiln::lib::Op;
using kiln::lib::ReduceOp;

// ---- names of the library's enums ---------------------------------------------------------

template <class E>
using Names = std::initializer_list<std::pair<const char*, E>>;

const Names<Op> kOps = {
    {"neg", Op::Neg},     {"abs", Op::Abs},         {"square", Op::Square}, {"recip", Op::Recip},
    {"sqrt", Op::Sqrt},   {"rsqrt", Op::Rsqrt},     {"exp", Op::Exp},       {"exp2", Op::Exp2},
    {"log", Op::Log},     {"log2", Op::Log2},       {"sin", Op::Sin},       {"cos", Op::Cos},
    {"tanh", Op::Tanh},   {"sigmoid", Op::Sigmoid}, {"relu", Op::Relu},     {"gelu", Op::Gelu},
    {"silu", Op::Silu},   {"floor", Op::Floor},     {"ceil", Op::Ceil},     {"round", Op::Round},
    {"trunc", Op::Trunc}, {"add", Op::Add},         {"sub", Op::Sub},       {"mul", Op::Mul},
    {"div", Op::Div},     {"max", Op::Max},         {"min", Op::Min},       {"pow", Op::Pow},
    {"eq", Op::Eq},       {"ne", Op::Ne},           {"lt", Op::Lt},         {"le", Op::Le},
    {"gt", Op::Gt},       {"ge", Op::Ge},           {"rsub", Op::RSub},     {"rdiv", Op::RDiv}};
const Names<Arg> kArgs = {{"x", Arg::X},   {"y", Arg::Y},   {"z", Arg::Z},  {"s0", Arg::S0},
                          {"s1", Arg::S1}, {"s2", Arg::S2}, {"s3", Arg::S3}};
const Names<ReduceOp> kReduceOps = {{"sum", ReduceOp::Sum},       {"mean", ReduceOp::Mean},
                                    {"max", ReduceOp::Max},       {"min", ReduceOp::Min},
                                    {"prod", ReduceOp::Prod},     {"argmax", ReduceOp::ArgMax},
                                    {"argmin", ReduceOp::ArgMin}, {"var", ReduceOp::Var}};
const Names<lib::Epilogue> kEpilogues = {{"none", lib::Epilogue::None},
                                         {"relu", lib::Epilogue::Relu},
                                         {"gelu", lib::Epilogue::Gelu},
                                         {"silu", lib::Epilogue::Silu}};
const Names<lib::Layout> kLayouts = {{"nchw", lib::Layout::Nchw}, {"nhwc", lib::Layout::Nhwc}};

template <class E>
std::vector<std::string> names_of(const Names<E>& names) {
  std::vector<std::string> out;
  for (const auto& [n, e] : names) out.emplace_back(n);
  return out;
}

// `text` as one of `names`; an error naming the argument and listing the choices otherwise.
template <class E>
E parse(const Names<E>& names, const std::string& text, std::string_view what) {
  for (const auto& [n, e] : names)
    if (text == n) return e;
  std::string list;
  for (const auto& [n, e] : names) list += fmt::format("{}'{}'", list.empty() ? "" : ", ", n);
  raise_invalid(fmt::format("{} is '{}'; it is one of {}", what, text, list));
}

// A tensor argument, named as the C++ entry point names it.
Tensor tensor(Runtime& rt, py::handle v, const char* name) {
  if (std::optional<Tensor> t = import_fast(rt, v)) return std::move(*t);  // kiln, PyTorch
  if (!py::isinstance<Tensor>(v) && !PyCapsule_CheckExact(v.ptr()) && !py::hasattr(v, "__dlpack__"))
    raise_invalid(
        fmt::format("argument '{}' is a {}, not a tensor: pass a kiln.Tensor or an "
                    "object with __dlpack__ (a NumPy array, a PyTorch tensor)",
                    name, type_name(v)));
  try {
    return import_any(rt, v);
  } catch (py::error_already_set& e) {
    // The producer refused to export it (NumPy 1: a read-only array): say which argument.
    if (!e.matches(PyExc_BufferError)) throw;
    const std::string why = py::str(e.value()).cast<std::string>();
    raise_invalid(fmt::format("argument '{}' cannot be passed through DLPack: {}{}", name, why,
                              why.find("readonly") != std::string::npos
                                  ? " (a read-only array cannot be an output; an input can be "
                                    "copied first)"
                                  : ""));
  }
}
std::optional<Tensor> optional_tensor(Runtime& rt, py::handle v, const char* name) {
  if (v.is_none()) return std::nullopt;
  return tensor(rt, v, name);
}

// A pair of sizes (height, width): an int for both, or two ints.
std::array<int64_t, 2> pair(py::handle v, const char* what) {
  const std::vector<int64_t> d = dims(v, what);
  if (d.size() == 1) return {d[0], d[0]};
  if (d.size() != 2)
    raise_invalid(fmt::format("{} is an int or (height, width), not {}", what,
                              py::repr(v).cast<std::string>()));
  return {d[0], d[1]};
}

// Runs a library call with the GIL released (it may compile), raising its error.
template <class F>
void run(F&& f) {
  Status st;
  {
    py::gil_scoped_release nogil;
    st = f();
  }
  check(st);
}

py::tuple shape_tuple(const std::vector<int64_t>& s) {
  return py::tuple(py::cast(s));
}

// A convolution's options from Python: stride, padding (ints, or "same"), padding_end (None:
// symmetric), dilation, groups, layout.
lib::ConvOptions conv_options(py::handle stride, py::handle padding, py::handle padding_end,
                              py::handle dilation, int64_t groups, const std::string& layout) {
  lib::ConvOptions o;
  o.stride = dims(stride, "stride");
  if (py::isinstance<py::str>(padding)) {
    const std::string p = padding.cast<std::string>();
    if (p == "same")
      o.same = true;
    else if (p != "valid")
      raise_invalid(
          fmt::format("padding is '{}'; it is an int, a tuple of ints, 'valid' or 'same'", p));
    o.padding = {0};
  } else {
    o.padding = dims(padding, "padding");
  }
  if (!padding_end.is_none()) o.padding_end = dims(padding_end, "padding_end");
  o.dilation = dims(dilation, "dilation");
  o.groups = groups;
  o.layout = parse(kLayouts, layout, "layout");
  return o;
}

lib::Pool2dOptions pool_options(py::handle kernel, py::handle stride, py::handle padding,
                                py::handle dilation, bool ceil_mode, const std::string& layout,
                                bool count_include_pad, int64_t divisor) {
  lib::Pool2dOptions o;
  o.kernel = pair(kernel, "kernel");
  o.stride = stride.is_none() ? std::array<int64_t, 2>{0, 0} : pair(stride, "stride");
  o.padding = pair(padding, "padding");
  o.dilation = pair(dilation, "dilation");
  o.ceil_mode = ceil_mode;
  o.layout = parse(kLayouts, layout, "layout");
  o.count_include_pad = count_include_pad;
  o.divisor = divisor;
  return o;
}

lib::ReduceOptions reduce_options(const std::vector<int>& axes, bool keepdim, int64_t correction) {
  lib::ReduceOptions o;
  o.axes = axes;
  o.keepdim = keepdim;
  o.correction = correction;
  return o;
}

// kiln::lib::AttentionOptions from the Python arguments, with the tensors it points to.
struct AttentionArgs {
  std::optional<Tensor> bias, cu_q, cu_k;
  lib::AttentionOptions o;
  void fill(Runtime& rt, py::handle b, py::handle cq, py::handle ck, double scale, bool causal,
            int64_t window_left, int64_t window_right, int64_t max_q, int64_t max_k) {
    bias = optional_tensor(rt, b, "bias");
    cu_q = optional_tensor(rt, cq, "cu_seqlens_q");
    cu_k = optional_tensor(rt, ck, "cu_seqlens_k");
    o.scale = scale;
    o.causal = causal;
    o.window_left = window_left;
    o.window_right = window_right;
    o.bias = bias ? &*bias : nullptr;
    o.cu_seqlens_q = cu_q ? &*cu_q : nullptr;
    o.cu_seqlens_k = cu_k ? &*cu_k : nullptr;
    o.max_seqlen_q = max_q;
    o.max_seqlen_k = max_k;
  }
};

void bind_elementwise(py::module_& m) {
  m.def(
      "map",
      [](Runtime& rt, const std::vector<std::pair<std::string, std::string>>& chain, py::handle x,
         py::handle out, py::handle y, py::handle z, const std::vector<float>& scalars) {
        std::vector<lib::Step> steps;
        for (size_t i = 0; i < chain.size(); ++i) {
          const std::string what = fmt::format("chain[{}]", i);
          lib::Step s{parse(kOps, chain[i].first, what), Arg::None};
          if (!chain[i].second.empty()) s.arg = parse(kArgs, chain[i].second, what + "'s operand");
          steps.push_back(s);
        }
        const Tensor tx = tensor(rt, x, "x");
        Tensor tout = tensor(rt, out, "out");
        const std::optional<Tensor> ty = optional_tensor(rt, y, "y");
        const std::optional<Tensor> tz = optional_tensor(rt, z, "z");
        lib::MapInputs in;
        in.y = ty ? &*ty : nullptr;
        in.z = tz ? &*tz : nullptr;
        in.scalars = scalars;
        run([&] { return lib::map(rt, steps, tx, tout, in); });
      },
      py::arg("rt"), py::arg("chain"), py::arg("x"), py::arg("out"), py::arg("y"), py::arg("z"),
      py::arg("scalars"));
  m.def("unary", [](Runtime& rt, const std::string& op, py::handle x, py::handle out) {
    const Op o = parse(kOps, op, "op");
    const Tensor tx = tensor(rt, x, "x");
    Tensor tout = tensor(rt, out, "out");
    run([&] { return lib::unary(rt, o, tx, tout); });
  });
  m.def("binary",
        [](Runtime& rt, const std::string& op, py::handle a, py::handle b, py::handle out) {
          const Op o = parse(kOps, op, "op");
          const Tensor ta = tensor(rt, a, "a"), tb = tensor(rt, b, "b");
          Tensor tout = tensor(rt, out, "out");
          run([&] { return lib::binary(rt, o, ta, tb, tout); });
        });
  m.def("copy", [](Runtime& rt, py::handle src, py::handle dst) {
    const Tensor ts = tensor(rt, src, "src");
    Tensor td = tensor(rt, dst, "dst");
    run([&] { return lib::copy(rt, ts, td); });
  });
  m.def("broadcast_shape", [](py::handle a, py::handle b) {
    const std::vector<int64_t> da = dims(a, "a"), db = dims(b, "b");
    return shape_tuple(take(lib::broadcast_shape(da, db)));
  });
}

void bind_matmul_and_norms(py::module_& m) {
  m.def(
      "matmul",
      [](Runtime& rt, py::handle a, py::handle b, py::handle c, float alpha, float beta,
         bool transpose_a, bool transpose_b, py::handle bias, const std::string& epilogue,
         bool allow_tf32, float scale_a, float scale_b, int split_k) {
        lib::MatmulOptions o;
        o.alpha = alpha;
        o.beta = beta;
        o.scale_a = scale_a;
        o.scale_b = scale_b;
        o.split_k = split_k;
        o.transpose_a = transpose_a;
        o.transpose_b = transpose_b;
        o.epilogue = parse(kEpilogues, epilogue, "epilogue");
        o.allow_tf32 = allow_tf32;
        const Tensor ta = tensor(rt, a, "a"), tb = tensor(rt, b, "b");
        Tensor tc = tensor(rt, c, "c");
        const std::optional<Tensor> tbias = optional_tensor(rt, bias, "bias");
        o.bias = tbias ? &*tbias : nullptr;
        run([&] { return lib::matmul(rt, ta, tb, tc, o); });
      },
      py::arg("rt"), py::arg("a"), py::arg("b"), py::arg("c"), py::arg("alpha"), py::arg("beta"),
      py::arg("transpose_a"), py::arg("transpose_b"), py::arg("bias"), py::arg("epilogue"),
      py::arg("allow_tf32"), py::arg("scale_a"), py::arg("scale_b"), py::arg("split_k"));
  m.def(
      "grouped_matmul",
      [](Runtime& rt, py::handle a, py::handle b, py::handle offsets, py::handle c, float alpha,
         float beta, bool transpose_b, py::handle bias, const std::string& epilogue,
         bool allow_tf32, float scale_a, float scale_b) {
        lib::MatmulOptions o;
        o.alpha = alpha;
        o.beta = beta;
        o.scale_a = scale_a;
        o.scale_b = scale_b;
        o.transpose_b = transpose_b;
        o.epilogue = parse(kEpilogues, epilogue, "epilogue");
        o.allow_tf32 = allow_tf32;
        const Tensor ta = tensor(rt, a, "a"), tb = tensor(rt, b, "b"),
                     toffs = tensor(rt, offsets, "offsets");
        Tensor tc = tensor(rt, c, "c");
        const std::optional<Tensor> tbias = optional_tensor(rt, bias, "bias");
        o.bias = tbias ? &*tbias : nullptr;
        run([&] { return lib::grouped_matmul(rt, ta, tb, toffs, tc, o); });
      },
      py::arg("rt"), py::arg("a"), py::arg("b"), py::arg("offsets"), py::arg("c"), py::arg("alpha"),
      py::arg("beta"), py::arg("transpose_b"), py::arg("bias"), py::arg("epilogue"),
      py::arg("allow_tf32"), py::arg("scale_a"), py::arg("scale_b"));
  for (const char* name : {"softmax", "log_softmax"}) {
    const bool log = std::string_view(name) == "log_softmax";
    m.def(name, [log](Runtime& rt, py::handle x, py::handle y) {
      const Tensor tx = tensor(rt, x, "x");
      Tensor ty = tensor(rt, y, "y");
      run([&] { return log ? lib::log_softmax(rt, tx, ty) : lib::softmax(rt, tx, ty); });
    });
  }
  for (const char* name : {"layer_norm", "rms_norm"}) {
    const bool rms = std::string_view(name) == "rms_norm";
    m.def(name, [rms](Runtime& rt, py::handle x, py::handle y, py::handle weight, py::handle bias,
                      float eps) {
      const Tensor tx = tensor(rt, x, "x");
      Tensor ty = tensor(rt, y, "y");
      const std::optional<Tensor> w = optional_tensor(rt, weight, "weight");
      const std::optional<Tensor> b = optional_tensor(rt, bias, "bias");
      lib::NormOptions o;
      o.weight = w ? &*w : nullptr;
      o.bias = b ? &*b : nullptr;
      o.eps = eps;
      run([&] { return rms ? lib::rms_norm(rt, tx, ty, o) : lib::layer_norm(rt, tx, ty, o); });
    });
  }
}

void bind_reduce_pool_random(py::module_& m) {
  m.def("reduce", [](Runtime& rt, const std::string& op, py::handle x, py::handle out,
                     const std::vector<int>& axes, bool keepdim, int64_t correction) {
    const ReduceOp o = parse(kReduceOps, op, "op");
    const Tensor tx = tensor(rt, x, "x");
    Tensor tout = tensor(rt, out, "out");
    const lib::ReduceOptions options = reduce_options(axes, keepdim, correction);
    run([&] { return lib::reduce(rt, o, tx, tout, options); });
  });
  m.def("reduce_output_shape", [](py::handle shape, const std::vector<int>& axes, bool keepdim) {
    const std::vector<int64_t> d = dims(shape, "shape");
    return shape_tuple(take(lib::reduce_output_shape(d, reduce_options(axes, keepdim, 1))));
  });
  m.def("reduce_output_type", [](const std::string& op, const std::string& dtype) {
    return std::string(ir::elem_name(
        take(lib::reduce_output_type(parse(kReduceOps, op, "op"), parse_dtype(dtype)))));
  });
  m.def("conv_output_shape", [](py::handle x, py::handle w, py::handle stride, py::handle padding,
                                py::handle padding_end, py::handle dilation, int64_t groups,
                                const std::string& layout) {
    const lib::ConvOptions o = conv_options(stride, padding, padding_end, dilation, groups, layout);
    return shape_tuple(take(lib::conv_output_shape(dims(x, "x"), dims(w, "w"), o)));
  });
  m.def("conv", [](Runtime& rt, py::handle x, py::handle w, py::handle y, py::handle bias,
                   py::handle residual, py::handle stride, py::handle padding,
                   py::handle padding_end, py::handle dilation, int64_t groups,
                   const std::string& layout, const std::string& epilogue) {
    lib::ConvOptions o = conv_options(stride, padding, padding_end, dilation, groups, layout);
    o.epilogue = parse(kEpilogues, epilogue, "epilogue");
    const Tensor tx = tensor(rt, x, "x"), tw = tensor(rt, w, "w");
    Tensor ty = tensor(rt, y, "y");
    const std::optional<Tensor> tb = optional_tensor(rt, bias, "bias"),
                                tr = optional_tensor(rt, residual, "residual");
    o.bias = tb ? &*tb : nullptr;
    o.residual = tr ? &*tr : nullptr;
    run([&] { return lib::conv(rt, tx, tw, ty, o); });
  });
  m.def("conv_backward_input", [](Runtime& rt, py::handle dy, py::handle w, py::handle dx,
                                  py::handle stride, py::handle padding, py::handle padding_end,
                                  py::handle dilation, int64_t groups, const std::string& layout) {
    const lib::ConvOptions o = conv_options(stride, padding, padding_end, dilation, groups, layout);
    const Tensor tdy = tensor(rt, dy, "dy"), tw = tensor(rt, w, "w");
    Tensor tdx = tensor(rt, dx, "dx");
    run([&] { return lib::conv_backward_input(rt, tdy, tw, tdx, o); });
  });
  m.def("conv_backward_weight", [](Runtime& rt, py::handle x, py::handle dy, py::handle dw,
                                   py::handle dbias, py::handle stride, py::handle padding,
                                   py::handle padding_end, py::handle dilation, int64_t groups,
                                   const std::string& layout) {
    const lib::ConvOptions o = conv_options(stride, padding, padding_end, dilation, groups, layout);
    const Tensor tx = tensor(rt, x, "x"), tdy = tensor(rt, dy, "dy");
    Tensor tdw = tensor(rt, dw, "dw");
    std::optional<Tensor> tdb = optional_tensor(rt, dbias, "dbias");
    run([&] { return lib::conv_backward_weight(rt, tx, tdy, tdw, o, tdb ? &*tdb : nullptr); });
  });
  m.def("attention",
        [](Runtime& rt, py::handle q, py::handle k, py::handle v, py::handle out, py::handle bias,
           py::handle lse, double scale, bool causal, int64_t window_left, int64_t window_right,
           py::handle cu_q, py::handle cu_k, int64_t max_q, int64_t max_k) {
          AttentionArgs a;
          a.fill(rt, bias, cu_q, cu_k, scale, causal, window_left, window_right, max_q, max_k);
          const Tensor tq = tensor(rt, q, "q"), tk = tensor(rt, k, "k"), tv = tensor(rt, v, "v");
          Tensor tout = tensor(rt, out, "out");
          std::optional<Tensor> tl = optional_tensor(rt, lse, "lse");
          a.o.lse = tl ? &*tl : nullptr;
          run([&] { return lib::attention(rt, tq, tk, tv, tout, a.o); });
        });
  m.def("attention_backward",
        [](Runtime& rt, py::handle q, py::handle k, py::handle v, py::handle out, py::handle dout,
           py::handle lse, py::handle dq, py::handle dk, py::handle dv, py::handle bias,
           double scale, bool causal, int64_t window_left, int64_t window_right, py::handle cu_q,
           py::handle cu_k, int64_t max_q, int64_t max_k) {
          AttentionArgs a;
          a.fill(rt, bias, cu_q, cu_k, scale, causal, window_left, window_right, max_q, max_k);
          const Tensor tq = tensor(rt, q, "q"), tk = tensor(rt, k, "k"), tv = tensor(rt, v, "v");
          const Tensor tout = tensor(rt, out, "out"), tdout = tensor(rt, dout, "dout"),
                       tlse = tensor(rt, lse, "lse");
          Tensor tdq = tensor(rt, dq, "dq"), tdk = tensor(rt, dk, "dk"), tdv = tensor(rt, dv, "dv");
          run([&] {
            return lib::attention_backward(rt, tq, tk, tv, tout, tdout, tlse, tdq, tdk, tdv, a.o);
          });
        });
  m.def("pool2d_output_shape",
        [](py::handle shape, py::handle kernel, py::handle stride, py::handle padding,
           py::handle dilation, bool ceil_mode, const std::string& layout) {
          const std::vector<int64_t> d = dims(shape, "shape");
          const lib::Pool2dOptions o =
              pool_options(kernel, stride, padding, dilation, ceil_mode, layout, true, 0);
          return shape_tuple(take(lib::pool2d_output_shape(d, o)));
        });
  m.def("max_pool2d", [](Runtime& rt, py::handle in, py::handle out, py::handle indices,
                         py::handle kernel, py::handle stride, py::handle padding,
                         py::handle dilation, bool ceil_mode, const std::string& layout) {
    const lib::Pool2dOptions o =
        pool_options(kernel, stride, padding, dilation, ceil_mode, layout, true, 0);
    const Tensor tin = tensor(rt, in, "in");
    Tensor tout = tensor(rt, out, "out");
    std::optional<Tensor> ti = optional_tensor(rt, indices, "indices");
    run([&] { return lib::max_pool2d(rt, tin, tout, o, ti ? &*ti : nullptr); });
  });
  m.def("avg_pool2d", [](Runtime& rt, py::handle in, py::handle out, py::handle kernel,
                         py::handle stride, py::handle padding, bool ceil_mode,
                         const std::string& layout, bool count_include_pad, int64_t divisor) {
    const lib::Pool2dOptions o = pool_options(kernel, stride, padding, py::int_(1), ceil_mode,
                                              layout, count_include_pad, divisor);
    const Tensor tin = tensor(rt, in, "in");
    Tensor tout = tensor(rt, out, "out");
    run([&] { return lib::avg_pool2d(rt, tin, tout, o); });
  });
  for (const char* name : {"uniform", "normal"}) {
    const bool normal = std::string_view(name) == "normal";
    m.def(name, [normal](Runtime& rt, py::handle out, uint64_t seed, uint64_t offset, double p0,
                         double p1) {
      Tensor t = tensor(rt, out, "out");
      const lib::RandomOptions o{seed, offset};
      run([&] { return normal ? lib::normal(rt, t, o, p0, p1) : lib::uniform(rt, t, o, p0, p1); });
    });
  }
}

}  // namespace

void bind_lib(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_lib", "kiln::lib's entry points with every tensor given; kiln.lib is the public face.");
  m.attr("ops") = names_of(kOps);
  m.attr("args") = names_of(kArgs);
  m.attr("reduce_ops") = names_of(kReduceOps);
  m.attr("epilogues") = names_of(kEpilogues);
  bind_elementwise(m);
  bind_matmul_and_norms(m);
  bind_reduce_pool_random(m);
}

}  // namespace kiln::python
