// Matrix fragments (docs/dsl.md "Matrices") against a double-precision reference: every input
// type, every fragment shape, row- and column-major tiles, partial tiles at the matrix edges,
// accumulating into loaded values, loads from shared memory, and accumulator casts. Built into
// test_cpu (the CPU backend) and into test_gpu, which runs it on the CUDA emulator (mma.sync as
// the PTX ISA defines it) and on a GPU when there is one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "compiler/dsl/dsl.h"
#include "ir/float16.h"
#include "tests/compiler/cpu/cpu_test_util.h"

using namespace kiln::dsl;
namespace ir = kiln::ir;
namespace test = kiln::test;
namespace dsl = kiln::dsl;
using kiln::HostArg;
using kiln::TensorView;

namespace {

// C = init + A * B (or C += A * B), one tile per plane, two planes per cube stacked in m. A is
// M x K (a_col: a holds A^T), B is K x N (b_col: b holds B^T), C is M x N (c_col: c holds C^T).
// With via_shared, each step's A and B tiles go through shared memory (on a GPU, 16-bit tiles
// then load with ldmatrix).
template <class T>
void t_frag(Tensor<const T> a, Tensor<const T> b, Tensor<mma_acc_t<T>> c, int fm, int fn, int kmul,
            bool a_col, bool b_col, bool c_col, bool accumulate, int init, bool via_shared) {
  using Acc = mma_acc_t<T>;
  const int fk = mma_k_step<T>() * kmul;
  auto fa = matrix_a<T>(fm, fn, fk);
  auto fb = matrix_b<T>(fm, fn, fk);
  auto acc = accumulator<Acc>(fm, fn, fk);
  auto tiles = shared_array<T>(static_cast<uint32_t>(2 * (fm * fk + fk * fn)));
  u32 m = select(a_col, a.shape(1), a.shape(0)), k = select(a_col, a.shape(0), a.shape(1));
  u32 n = select(c_col, c.shape(0), c.shape(1));
  u32 lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
  u32 p = plane_pos();
  u32 row0 = (cube_pos_y() * 2u + p) * fm, col0 = cube_pos_x() * fn;
  u32 rows = select(row0 < m, m - row0, 0u), cols = select(col0 < n, n - col0, 0u);
  if (accumulate) {
    if (c_col)
      load(acc, c, col0 * ldc + row0, ldc, rows, cols, Layout::Col);
    else
      load(acc, c, row0 * ldc + col0, ldc, rows, cols);
  } else {
    fill(acc, Acc(init));
  }
  for_range(0u, k, static_cast<uint32_t>(fk), [&](u32 k0) {
    u32 left = k - k0;
    if (via_shared) {
      // Each plane copies its A and B tiles (zero outside the matrices) into its part of
      // `tiles`, laid out as in memory (A^T and B^T with a_col and b_col), and loads from there.
      const uint32_t asz = static_cast<uint32_t>(fm * fk), bsz = static_cast<uint32_t>(fk * fn);
      const uint32_t ufm = static_cast<uint32_t>(fm), ufn = static_cast<uint32_t>(fn),
                     ufk = static_cast<uint32_t>(fk);
      u32 abase = p * (asz + bsz), bbase = abase + asz;
      for_range(plane_lane(), asz, 32u, [&](u32 e) {
        u32 r = a_col ? e % ufm : e / ufk, cc = a_col ? e / ufm : e % ufk;
        u32 idx = a_col ? (k0 + cc) * lda + row0 + r : (row0 + r) * lda + k0 + cc;
        tiles[abase + e] = select(r < rows && cc < left, a[min(idx, a.len() - 1u)], T(0));
      });
      for_range(plane_lane(), bsz, 32u, [&](u32 e) {
        u32 kk = b_col ? e % ufk : e / ufn, j = b_col ? e / ufk : e % ufn;
        u32 idx = b_col ? (col0 + j) * ldb + k0 + kk : (k0 + kk) * ldb + col0 + j;
        tiles[bbase + e] = select(kk < left && j < cols, b[min(idx, b.len() - 1u)], T(0));
      });
      sync_cube();
      load(fa, tiles, abase, a_col ? ufm : ufk, a_col ? Layout::Col : Layout::Row);
      load(fb, tiles, bbase, b_col ? ufk : ufn, b_col ? Layout::Col : Layout::Row);
      sync_cube();
    } else {
      if (a_col)
        load(fa, a, k0 * lda + row0, lda, rows, left, Layout::Col);
      else
        load(fa, a, row0 * lda + k0, lda, rows, left);
      if (b_col)
        load(fb, b, col0 * ldb + k0, ldb, left, cols, Layout::Col);
      else
        load(fb, b, k0 * ldb + col0, ldb, left, cols);
    }
    mma(acc, fa, fb);
  });
  if (c_col)
    store(c, col0 * ldc + row0, ldc, rows, cols, acc, Layout::Col);
  else
    store(c, row0 * ldc + col0, ldc, rows, cols, acc);
}
KILN_KERNEL_GENERIC(t_frag,
                    "a: rank=2, b: rank=2, c: rank=2, fm = 16, fn = 16, kmul = 1, a_col = false, "
                    "b_col = false, c_col = false, accumulate = false, init = 0, "
                    "via_shared = false",
                    f16, bf16, f32, i8, u8, f8e4m3, f8e5m2)
    .cube_dim(64);

// An f16 multiply whose f32 accumulator is converted to D (f16, bf16, i32 or an f8 type) and
// stored.
template <class D>
void t_frag_cast(Tensor<const f16> a, Tensor<const f16> b, Tensor<D> c) {
  auto fa = matrix_a<f16>(16, 16, 16);
  auto fb = matrix_b<f16>(16, 16, 16);
  auto acc = accumulator<f32>(16, 16, 16);
  auto out = accumulator<D>(16, 16, 16);
  fill(acc, 0.0f);
  load(fa, a, 0u, 16u);
  load(fb, b, 0u, 16u);
  mma(acc, fa, fb);
  convert(out, acc);
  store(c, 0u, 16u, out);
}
// A 16 x 16 tile read from a tensor that may be too short for it (checked mode).
void t_frag_short(Tensor<const f16> a, Tensor<f32> c) {
  auto fa = matrix_a<f16>(16, 16, 16);
  auto fb = matrix_b<f16>(16, 16, 16);
  auto acc = accumulator<f32>(16, 16, 16);
  fill(acc, 0.0f);
  fill(fb, f16(1.0f));
  load(fa, a, 0u, 16u);
  mma(acc, fa, fb);
  store(c, 0u, 16u, acc);
}
KILN_KERNEL(t_frag_short, "a, c").cube_dim(32);

// Plane 1 returns early (every unit of it: a plane-uniform return), after a unit-level loop;
// only plane 0 stores its tile.
void t_frag_return(Tensor<f32> c) {
  auto acc = accumulator<f32>(16, 16, 16);
  c[unit_pos() + 512u] = 1.0f;
  if_(plane_pos() == 1u, [&] { return_(); });
  c[unit_pos() + 512u] = 2.0f;
  fill(acc, 3.0f);
  store(c, plane_pos() * 256u, 16u, acc);
}
KILN_KERNEL(t_frag_return, "c").cube_dim(64);

KILN_KERNEL_GENERIC(t_frag_cast, "a: rank=2, b: rank=2, c: rank=2", f16, bf16, i32, f8e4m3, f8e5m2)
    .cube_dim(32);

// A and B filled with one value each (at k = 2 steps): every element of C is k * x * y. `a` is
// not read; its element type picks the instance.
template <class T>
void t_frag_fill_ab(Tensor<const T> a, Tensor<mma_acc_t<T>> c, int x, int y) {
  (void)a;
  const int k = 2 * mma_k_step<T>();
  auto fa = matrix_a<T>(16, 16, k);
  auto fb = matrix_b<T>(16, 16, k);
  auto acc = accumulator<mma_acc_t<T>>(16, 16, k);
  fill(fa, T(x));
  fill(fb, T(y));
  fill(acc, mma_acc_t<T>(0));
  mma(acc, fa, fb);
  store(c, 0u, 16u, acc);
}
KILN_KERNEL_GENERIC(t_frag_fill_ab, "a: rank=2, c: rank=2, x = 1, y = 1", f16, bf16, f32, i8, u8,
                    f8e4m3, f8e5m2)
    .cube_dim(32);

// Host storage of an element type, filled from doubles and read back as doubles.
struct Buffer {
  ir::ElemType type;
  std::vector<uint8_t> bytes;
  size_t n = 0;
  Buffer(ir::ElemType t, size_t count) : type(t), bytes(count * ir::elem_bytes(t)), n(count) {}
  void set(size_t i, double v) {
    switch (type) {
      case ir::ElemType::F16: {
        const uint16_t h = kiln::f16_bits(v);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case ir::ElemType::BF16: {
        const uint16_t h = kiln::bf16_bits(v);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case ir::ElemType::F32: {
        const float f = static_cast<float>(v);
        std::memcpy(&bytes[i * 4], &f, 4);
        break;
      }
      case ir::ElemType::I8:
      case ir::ElemType::U8:
        bytes[i] = static_cast<uint8_t>(static_cast<int>(v));
        break;
      case ir::ElemType::F8E4M3:
        bytes[i] = kiln::e4m3_bits(v);
        break;
      case ir::ElemType::F8E5M2:
        bytes[i] = kiln::e5m2_bits(v);
        break;
      case ir::ElemType::I32: {
        const auto x = static_cast<int32_t>(v);
        std::memcpy(&bytes[i * 4], &x, 4);
        break;
      }
      default:
        FAIL("unexpected element type");
    }
  }
  double get(size_t i) const {
    switch (type) {
      case ir::ElemType::F16: {
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        return kiln::f16_value(h);
      }
      case ir::ElemType::BF16: {
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        return kiln::bf16_value(h);
      }
      case ir::ElemType::F32: {
        float f;
        std::memcpy(&f, &bytes[i * 4], 4);
        return f;
      }
      case ir::ElemType::I8:
        return static_cast<int8_t>(bytes[i]);
      case ir::ElemType::U8:
        return bytes[i];
      case ir::ElemType::F8E4M3:
        return kiln::e4m3_value(bytes[i]);
      case ir::ElemType::F8E5M2:
        return kiln::e5m2_value(bytes[i]);
      case ir::ElemType::I32: {
        int32_t x;
        std::memcpy(&x, &bytes[i * 4], 4);
        return x;
      }
      default:
        return 0;
    }
  }
  TensorView view(int64_t rows, int64_t cols) { return TensorView(bytes.data(), {rows, cols}); }
};

// Random inputs: small integers for integer types (exact products and sums), else uniform in
// [-1, 1] rounded to the type.
void randomize(Buffer& b) {
  const bool ints = ir::is_int(b.type);
  const bool u = b.type == ir::ElemType::U8;
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::uniform_int_distribution<int> di(u ? 0 : -128, u ? 255 : 127);
  for (size_t i = 0; i < b.n; ++i) b.set(i, ints ? di(test::rng()) : d(test::rng()));
  for (size_t i = 0; i < b.n; ++i) b.set(i, b.get(i));  // as stored
}

struct Config {
  int fm, fn, kmul;
  bool a_col, b_col, c_col, accumulate, via_shared;
  int init;
};

void check_frag(const char* dtype, const Config& cfg, int64_t M, int64_t N, int64_t K) {
  const ir::ElemType t = *ir::parse_elem_type(dtype);
  const ir::ElemType ct = ir::is_int(t) ? ir::ElemType::I32 : ir::ElemType::F32;
  INFO(dtype << " frag " << cfg.fm << "x" << cfg.fn << " kmul " << cfg.kmul << " a_col "
             << cfg.a_col << " b_col " << cfg.b_col << " c_col " << cfg.c_col << " accumulate "
             << cfg.accumulate << " shared " << cfg.via_shared << " init " << cfg.init << ", M "
             << M << " N " << N << " K " << K);
  dsl::SpecOptions o;
  o.dtype["a"] = dtype;
  o.dtype["b"] = dtype;
  o.set["fm"] = std::to_string(cfg.fm);
  o.set["fn"] = std::to_string(cfg.fn);
  o.set["kmul"] = std::to_string(cfg.kmul);
  o.set["a_col"] = cfg.a_col ? "true" : "false";
  o.set["b_col"] = cfg.b_col ? "true" : "false";
  o.set["c_col"] = cfg.c_col ? "true" : "false";
  o.set["accumulate"] = cfg.accumulate ? "true" : "false";
  o.set["via_shared"] = cfg.via_shared ? "true" : "false";
  o.set["init"] = std::to_string(cfg.init);
  auto kern = test::compile_kernel("t_frag", o);
  Buffer a(t, static_cast<size_t>(M * K)), b(t, static_cast<size_t>(K * N)),
      c(ct, static_cast<size_t>(M * N));
  randomize(a);
  randomize(b);
  for (size_t i = 0; i < c.n; ++i)
    c.set(i, ir::is_int(ct) ? static_cast<double>(i % 97) - 48 : 0.25 * static_cast<double>(i % 9));
  const Buffer c0 = c;
  auto ai = [&](int64_t i, int64_t k) {
    const double x = a.get(static_cast<size_t>(cfg.a_col ? k * M + i : i * K + k));
    return t == ir::ElemType::F32 ? kiln::round_to_tf32(x) : x;
  };
  auto bi = [&](int64_t k, int64_t j) {
    const double x = b.get(static_cast<size_t>(cfg.b_col ? j * K + k : k * N + j));
    return t == ir::ElemType::F32 ? kiln::round_to_tf32(x) : x;
  };
  auto ci = [&](int64_t i, int64_t j) {
    return static_cast<size_t>(cfg.c_col ? j * M + i : i * N + j);
  };
  std::vector<HostArg> args{a.view(cfg.a_col ? K : M, cfg.a_col ? M : K),
                            b.view(cfg.b_col ? N : K, cfg.b_col ? K : N),
                            c.view(cfg.c_col ? N : M, cfg.c_col ? M : N)};
  const auto tiles_n = static_cast<uint32_t>((N + cfg.fn - 1) / cfg.fn);
  const auto tiles_m = static_cast<uint32_t>((M + 2 * cfg.fm - 1) / (2 * cfg.fm));
  test::run(*kern, {tiles_n, tiles_m, 1}, args);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = cfg.accumulate ? c0.get(ci(i, j)) : cfg.init, mag = std::fabs(want);
      for (int64_t k = 0; k < K; ++k) {
        want += ai(i, k) * bi(k, j);
        mag += std::fabs(ai(i, k) * bi(k, j));
      }
      if (ir::is_int(ct))
        want = static_cast<double>(static_cast<int32_t>(static_cast<int64_t>(want)));
      const double got = c.get(ci(i, j));
      INFO("C(" << i << ", " << j << ") = " << got << ", want " << want);
      REQUIRE(std::fabs(got - want) <= (ir::is_int(ct) ? 0.0 : 1e-5 * mag + 1e-6));
    }
}

}  // namespace

TEST_CASE("matrix fragments: every input type and shape against a double reference",
          "[cpu][matrix]") {
  const Config shapes[] = {
      {16, 8, 1, false, false, false, false, false, 0},
      {16, 16, 2, false, true, false, false, false, 3},
      {32, 32, 1, false, false, false, true, false, 0},
      {32, 16, 1, true, false, true, false, false, -2},
      {16, 32, 1, false, false, false, false, true, 0},
      {32, 16, 2, true, true, false, true, true, 1},
      {16, 8, 1, true, false, true, false, true, 2},
  };
  for (const char* dtype : {"f16", "bf16", "f32", "i8", "u8", "f8e4m3", "f8e5m2"})
    for (const Config& cfg : shapes) {
      // Sizes that are no multiple of the tile: partial tiles on every edge.
      check_frag(dtype, cfg, 2 * 2 * cfg.fm + 5, 3 * cfg.fn - 3, 3 * mma_k_step<f16>() + 7);
    }
}

TEST_CASE("matrix fragments: a tile smaller than the fragment, and K below one step",
          "[cpu][matrix]") {
  check_frag("f16", {16, 16, 1, false, false, false, false, false, 0}, 3, 5, 7);
  check_frag("f32", {32, 32, 2, true, true, true, true, false, 0}, 1, 1, 1);
}

TEST_CASE("matrix fragments: accumulators convert to f16, bf16, i32 and the f8 types",
          "[cpu][matrix]") {
  // f8: sums up to 1024 pass f8e4m3's largest value (448), so saturation is checked too.
  for (const char* dtype : {"f16", "bf16", "i32", "f8e4m3", "f8e5m2"}) {
    INFO(dtype);
    const ir::ElemType ot = *ir::parse_elem_type(dtype);
    dsl::SpecOptions o;
    o.dtype["c"] = dtype;
    auto kern = test::compile_kernel("t_frag_cast", o);
    Buffer a(ir::ElemType::F16, 256), b(ir::ElemType::F16, 256), c(ot, 256);
    // Quarters in [-8, 8]: products and sums are exact in f32, so the only rounding is the
    // conversion, and it must round exactly as the type does.
    std::uniform_int_distribution<int> d(-32, 32);
    for (size_t i = 0; i < 256; ++i) {
      a.set(i, d(test::rng()) / 4.0);
      b.set(i, d(test::rng()) / 4.0);
    }
    std::vector<HostArg> args{a.view(16, 16), b.view(16, 16), c.view(16, 16)};
    test::run(*kern, {1, 1, 1}, args);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double s = 0;
        for (int k = 0; k < 16; ++k) s += a.get(size_t(i * 16 + k)) * b.get(size_t(k * 16 + j));
        const float f = static_cast<float>(s);
        Buffer want(ot, 1);
        want.set(0, ot == ir::ElemType::I32 ? std::trunc(f) : f);
        INFO("C(" << i << ", " << j << ")");
        REQUIRE(c.get(size_t(i * 16 + j)) == want.get(0));
      }
  }
}

TEST_CASE("matrix fragments: A and B filled with one value, the extremes of 8-bit types",
          "[cpu][matrix]") {
  struct Case {
    const char* dtype;
    int x, y;
  };
  for (const Case& t :
       {Case{"i8", -128, -128}, Case{"i8", -128, 127}, Case{"i8", 127, 127}, Case{"u8", 255, 255},
        Case{"u8", 0, 255}, Case{"f16", -2, 3}, Case{"bf16", 5, -2}, Case{"f32", 3, 8},
        Case{"f8e4m3", -448, 448}, Case{"f8e5m2", 57344, -3}}) {
    INFO(t.dtype << " " << t.x << " * " << t.y);
    const ir::ElemType et = *ir::parse_elem_type(t.dtype);
    dsl::SpecOptions o;
    o.dtype["a"] = t.dtype;
    o.set["x"] = std::to_string(t.x);
    o.set["y"] = std::to_string(t.y);
    auto kern = test::compile_kernel("t_frag_fill_ab", o);
    const ir::ElemType ct = ir::is_int(et) ? ir::ElemType::I32 : ir::ElemType::F32;
    Buffer a(et, 1), c(ct, 256);
    std::vector<HostArg> args{a.view(1, 1), c.view(16, 16)};
    test::run(*kern, {1, 1, 1}, args);
    const double k = 2.0 * (ir::is_int(et) || ir::is_f8(et) ? 32
                            : et == ir::ElemType::F32       ? 8
                                                            : 16);
    for (size_t i = 0; i < 256; ++i) REQUIRE(c.get(i) == k * t.x * t.y);
  }
}

TEST_CASE("matrix fragments: a plane that returned runs no fragment op", "[cpu][matrix]") {
  auto kern = test::compile_kernel("t_frag_return");
  std::vector<float> c(576, -1.0f);
  test::run(*kern, {1, 1, 1}, {test::tensor(c)});
  for (size_t i = 0; i < 256; ++i) REQUIRE(c[i] == 3.0f);
  for (size_t i = 256; i < 512; ++i) REQUIRE(c[i] == -1.0f);
  for (size_t u = 0; u < 64; ++u) REQUIRE(c[512 + u] == (u < 32 ? 2.0f : 1.0f));
}

#ifndef KILN_TEST_CUDA
// Where the CPU has no bf16 conversion instruction, LLVM's x86 backend calls __truncsfbf2 for
// the bf16 vector operations it widens to f32; the JIT supplies it (compiler/cpu/abi.h). A Zen 3
// host, whose GCC 12 runtime has no such function, failed to link every bf16 fragment kernel.
TEST_CASE("matrix fragments: bf16 on a CPU without bf16 conversions", "[cpu][matrix]") {
  kiln::cpu::Target plain = test::host();
  plain.features += ",-avx512bf16,-avxneconvert";
  test::TargetScope scope(plain);
  check_frag("bf16", {16, 16, 2, false, true, false, false, false, 3}, 37, 45, 55);
  check_frag("bf16", {32, 16, 1, true, false, true, false, true, -2}, 69, 45, 55);
}

// On a CPU with AVX-512 VNNI, 8-bit fragments multiply with vpdpbusd (docs/backends.md); the
// other test cases run whichever path the host has. Here both run.
TEST_CASE("matrix fragments: 8-bit inputs with and without VNNI dot products", "[cpu][matrix]") {
  kiln::cpu::Target plain = test::host();
  plain.vnni = false;
  std::vector<const kiln::cpu::Target*> targets{&plain};
  if (test::host().vnni)
    targets.push_back(&test::host());
  else
    WARN("this CPU has no vpdpbusd: only the plain 32-bit path ran");
  // The 256-bit AVX-VNNI path (CPUs without AVX-512): the host with AVX-512 turned off, where
  // the host has AVX-VNNI.
  kiln::cpu::Target ymm = test::host();
  ymm.features += ",-avx512f";
  ymm.vector_bits = 256;
  if (test::host().vector_bits == 512 && ymm.features.find("+avxvnni") != std::string::npos)
    targets.push_back(&ymm);
  else
    WARN("this CPU has no AVX-VNNI next to AVX-512: the 256-bit vpdpbusd path did not run");
  const Config shapes[] = {
      {16, 8, 1, false, false, false, false, false, 5},
      {32, 16, 2, true, true, true, true, false, 0},
      {16, 32, 1, false, true, false, true, true, -3},
  };
  for (const kiln::cpu::Target* t : targets) {
    INFO((t->vnni ? "vpdpbusd" : "plain") << ", " << t->vector_bits << "-bit vectors");
    test::TargetScope scope(*t);
    for (const char* dtype : {"i8", "u8"})
      for (const Config& cfg : shapes)
        check_frag(dtype, cfg, 2 * 2 * cfg.fm + 3, 2 * cfg.fn + 1, 75);
  }
}

TEST_CASE("matrix fragments: checked mode reports the first element past the memory",
          "[cpu][matrix]") {
  {
    const bool checked = true;
    const dsl::KernelDef* def = dsl::Registry::global().find("t_frag_short");
    REQUIRE(def);
    auto sel = dsl::select(*def, {});
    REQUIRE(sel.ok());
    auto k = dsl::trace(*def, *sel->inst, sel->request);
    REQUIRE(k.ok());
    auto lowered = kiln::backend::find("cpu")->prepare(*k);
    REQUIRE(lowered.ok());
    kiln::cpu::CompileOptions o;
    o.target = test::host();
    o.checked = checked;
    auto kern = kiln::cpu::compile(*lowered, o);
    REQUIRE(kern.ok());
    std::vector<uint16_t> a(200, kiln::f16_bits(1.0));  // rows 12.5 to 15 are missing
    std::vector<float> c(256, -1.0f);
    auto r = test::try_run(**kern, {1, 1, 1}, {TensorView(a.data(), {200}), test::tensor(c)});
    REQUIRE(!r.ok());
    INFO(r.error().message);
    CHECK_THAT(r.error().message, Catch::Contains("frag.load") &&
                                      Catch::Contains("line index 200 is not below 200") &&
                                      Catch::Contains("tensor 'a'") &&
                                      Catch::Contains("tests/compiler/cpu/test_matrix.cpp:"));
  }
}
#endif
