// The rule for views at the launch boundary (docs/runtime.md "Views"): a kernel that indexes a
// tensor flat takes only dense row-major views, one that indexes through strides takes any view,
// and no kernel writes a view whose elements overlap. A property test launches both kinds on
// random views of a canary-filled buffer: each launch computes what a reference computes from
// the view's elements, or is refused, and no byte outside the output view's elements changes.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "compiler/dsl/registry.h"
#include "ir/view_use.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;
using ir::ElemType;

constexpr float kCanary = -777.0f;

// A tensor of `n` canaries.
Tensor canaries(Runtime& rt, int64_t n) {
  return test::tensor_from(rt, ElemType::F32, std::vector<float>(static_cast<size_t>(n), kCanary),
                           {n});
}

Tensor view_of(const Tensor& base, std::vector<int64_t> shape, std::vector<int64_t> strides,
               int64_t offset) {
  auto t = Tensor::make(base.device_ptr(), base.buffer(), base.dtype(), shape, strides, offset);
  INFO((t.ok() ? std::string() : t.error().message));
  REQUIRE(t.ok());
  return *t;
}

Status add1(Runtime& rt, const char* kernel, const Tensor& x, const Tensor& y) {
  auto k = test::kernel(rt, kernel);
  const auto n = static_cast<uint32_t>(std::max<int64_t>(y.numel(), 1));
  KILN_TRY(rt.launch(k, Dim3((n + 63) / 64), Dim3(64), x, y));
  return rt.sync();
}

TEST_CASE("view_use tells flat indexing from strided indexing", "[views]") {
  auto rt = test::open_cpu();
  auto uses = [&](const char* name, int rank) {
    const dsl::KernelDef* d = dsl::Registry::global().find(name);
    REQUIRE(d);
    dsl::TraceRequest req;
    for (int i = 0; i < 2; ++i)
      req.args.push_back(dsl::ArgDesc{ElemType::F32, static_cast<uint8_t>(rank), 1, i == 0});
    req.cube_dim = {64, 1, 1};
    auto k = dsl::trace(*d, d->instantiations.front(), req);
    INFO((k.ok() ? std::string() : k.error().message));
    REQUIRE(k.ok());
    return ir::view_use(*k);
  };
  auto flat = uses("rt_flat_add1", 1);
  CHECK(flat[0].flat);
  CHECK_FALSE(flat[0].written);
  CHECK(flat[1].flat);
  CHECK(flat[1].written);
  auto strided = uses("rt_strided_add1", 2);
  CHECK_FALSE(strided[0].flat);
  CHECK(strided[0].strided);
  CHECK_FALSE(strided[1].flat);
  CHECK(strided[1].written);
  auto one = uses("rt_strided_add1_1d", 1);
  CHECK_FALSE(one[0].flat);
  CHECK_FALSE(one[1].flat);
}

TEST_CASE("a flat kernel refuses strided views and names the argument", "[views]") {
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  Tensor base = canaries(rt, 64);
  Tensor dense = view_of(base, {16}, {1}, 0);
  Tensor every_other = view_of(base, {16}, {2}, 32);
  auto st = add1(rt, "rt_flat_add1", every_other, dense);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("argument 'x'"));
  CHECK_THAT(st.error().message, Contains("strides [2]"));
  CHECK_THAT(st.error().message, Contains("contiguous"));
  // An output between whose elements the kernel would write: refused, nothing written.
  st = add1(rt, "rt_flat_add1", dense, every_other);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("argument 'y'"));
  for (float v : test::to_host<float>(base)) REQUIRE(v == kCanary);
  // A broadcast (stride 0) output: refused.
  st = add1(rt, "rt_flat_add1", dense, view_of(base, {16}, {0}, 0));
  REQUIRE_FALSE(st.ok());
  // The same views through t(i): honored.
  KILN_REQUIRE_OK(add1(rt, "rt_strided_add1_1d", dense, every_other));
  auto host = test::to_host<float>(base);
  for (int i = 0; i < 64; ++i)
    REQUIRE(host[static_cast<size_t>(i)] == (i >= 32 && i % 2 == 0 ? kCanary + 1.0f : kCanary));
}

TEST_CASE("an output view that overlaps itself is refused", "[views]") {
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  Tensor base = canaries(rt, 64);
  Tensor x = view_of(base, {4, 4}, {4, 1}, 0);
  for (auto [shape, strides] :
       {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{4, 4}, {0, 1}},
        {{4, 4}, {1, 1}},
        {{4, 4}, {2, 1}},
        {{4, 4}, {1, 0}}}) {
    auto st = add1(rt, "rt_strided_add1", x, view_of(base, shape, strides, 20));
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("argument 'y'"));
    CHECK_THAT(st.error().message, Contains("more than once"));
  }
  // Reading a broadcast view is fine.
  KILN_REQUIRE_OK(add1(rt, "rt_strided_add1", view_of(base, {4, 4}, {0, 1}, 0),
                       view_of(base, {4, 4}, {1, 4}, 32)));
}

TEST_CASE("checked mode reports an index past a dimension of a strided view", "[views]") {
  test::ScopedCache cache;
  for (Runtime& rt : test::open_devices({"cpu", "cuda-emu"})) {
    INFO(rt.device().name);
    Tensor base = canaries(rt, 64);
    Tensor x = test::f32_tensor(rt, std::vector<float>(12, 5.0f));
    Tensor xv = view_of(x, {4, 3}, {3, 1}, 0);
    // y: 4 rows of 3 elements, every other element of rows 8 apart. y(r, 3) is r * 8 + 6:
    // inside the footprint (0 .. 28), between the view's elements.
    Tensor y = view_of(base, {4, 3}, {8, 2}, 0);
    LaunchOptions checked;
    checked.checked = true;
    KILN_REQUIRE_OK(rt.launch_with(checked, test::kernel(rt, "rt_strided_past_row"), 1, 64, xv, y));
    auto st = rt.sync();
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.error().message, Contains("runtime_kernels.cpp"));
    CHECK_THAT(st.error().message,
               Contains("index 1 of tensor 'y' is not below shape(1) (checked mode"));
    // The skipped writes changed nothing: y(r, 1) and y(r, 2) were written, the rest is
    // canaries.
    auto host = test::to_host<float>(base);
    for (int i = 0; i < 64; ++i) {
      const bool written = i < 32 && (i % 8 == 2 || i % 8 == 4);
      INFO(i);
      REQUIRE(host[static_cast<size_t>(i)] == (written ? 5.0f : kCanary));
    }
  }
}

// Random views: shapes 0..5 a side, strides 0..9 (transposed, sliced, broadcast, overlapping),
// offsets; the flat and the strided kernel; every launch is correct or refused, and the
// buffer outside the output view's elements keeps its canaries.
TEST_CASE("property: launches on random views compute the reference or are refused", "[views]") {
  test::ScopedCache cache;
  auto rt = test::open_cpu();
  std::mt19937 rng(12345);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  constexpr int64_t kBuf = 256;
  int ran = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const bool flat = trial % 2 == 0;
    const int rank = flat ? pick(1, 2) : 2;
    std::vector<int64_t> shape(static_cast<size_t>(rank)), xs(shape.size()), ys(shape.size());
    for (int d = 0; d < rank; ++d) {
      shape[static_cast<size_t>(d)] = pick(0, 5);
      xs[static_cast<size_t>(d)] = pick(0, 9);
      ys[static_cast<size_t>(d)] = pick(0, 9);
    }
    if (pick(0, 2) == 0) {  // often dense
      int64_t s = 1;
      for (int d = rank; d-- > 0;) {
        ys[static_cast<size_t>(d)] = s;
        s *= shape[static_cast<size_t>(d)];
      }
    }
    auto reach = [&](const std::vector<int64_t>& st) {
      int64_t r = 0;
      for (size_t d = 0; d < shape.size(); ++d) r += (std::max<int64_t>(shape[d], 1) - 1) * st[d];
      return r;
    };
    const int64_t xo = pick(0, 10), yo = pick(0, 10);
    if (xo + reach(xs) >= kBuf || yo + reach(ys) >= kBuf) continue;
    std::vector<float> xin(kBuf), yin(kBuf, kCanary);
    for (int64_t i = 0; i < kBuf; ++i) xin[static_cast<size_t>(i)] = static_cast<float>(i);
    Tensor xb = test::tensor_from(rt, ElemType::F32, xin, {kBuf});
    Tensor yb = test::tensor_from(rt, ElemType::F32, yin, {kBuf});
    Tensor x = view_of(xb, shape, xs, xo), y = view_of(yb, shape, ys, yo);
    const char* kernel = flat ? "rt_flat_add1" : "rt_strided_add1";
    auto st = add1(rt, kernel, x, y);
    std::vector<float> after = test::to_host<float>(yb);
    // The output view's element offsets, and what each should hold.
    std::vector<int> hits(kBuf, 0);
    std::vector<float> want(kBuf, kCanary);
    const int64_t rows = rank == 2 ? shape[0] : 1, cols = shape.back();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t yoff = yo + (rank == 2 ? r * ys[0] : 0) + c * ys.back();
        const int64_t xoff = xo + (rank == 2 ? r * xs[0] : 0) + c * xs.back();
        hits[static_cast<size_t>(yoff)]++;
        want[static_cast<size_t>(yoff)] = static_cast<float>(xoff) + 1.0f;
      }
    INFO("trial " << trial << " kernel " << kernel << " shape " << x.describe() << " x strides "
                  << x.strides_text() << " y strides " << y.strides_text());
    if (!st.ok()) {
      ++refused;
      INFO(st.error().message);
      CHECK(after == yin);  // a refused launch writes nothing
      continue;
    }
    ++ran;
    for (int64_t i = 0; i < kBuf; ++i) {
      INFO("element " << i);
      REQUIRE(hits[static_cast<size_t>(i)] <= 1);  // an accepted output never overlaps itself
      REQUIRE(after[static_cast<size_t>(i)] == want[static_cast<size_t>(i)]);
    }
  }
  CHECK(ran > 50);
  CHECK(refused > 50);
}

TEST_CASE("wrap refuses strides whose reach overflows", "[views]") {
  auto rt = test::open_cpu();
  static float data[16];
  for (int64_t stride : {int64_t{1} << 40, INT64_MAX, INT64_MAX / 2}) {
    const int64_t shape[] = {4};
    const int64_t strides[] = {stride};
    auto t = rt.wrap(data, ElemType::F32, shape, strides, nullptr);
    INFO(stride);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message, Contains("check the shape and strides"));
  }
  const int64_t big[] = {int64_t{1} << 40, int64_t{1} << 40};
  REQUIRE_FALSE(rt.wrap(data, ElemType::F32, big, {}, nullptr).ok());
  // An empty tensor whose row-major strides would overflow: refused, not made with wrapped
  // strides.
  const int64_t empty_huge[] = {0, int64_t{1} << 40, int64_t{1} << 40};
  auto e = rt.empty(ElemType::F32, empty_huge);
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.error().message, Contains("overflow 64 bits"));
  // A view whose last element lies in a page that cannot be read (a guard page) is refused;
  // one that ends before it is not.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* mem = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  REQUIRE(::mprotect(static_cast<char*>(mem) + page, page, PROT_NONE) == 0);
  const int64_t fits[] = {static_cast<int64_t>(page / 4)}, past[] = {fits[0] + 1};
  CHECK(rt.wrap(mem, ElemType::F32, fits, {}, nullptr).ok());
  auto guarded = rt.wrap(mem, ElemType::F32, past, {}, nullptr);
  REQUIRE_FALSE(guarded.ok());
  CHECK_THAT(guarded.error().message, Contains("memory that cannot be read"));
  ::munmap(mem, 2 * page);
}

TEST_CASE("a tensor of another runtime on the same device is named as such", "[views]") {
  test::ScopedCache cache;
  auto a = test::open_cpu();
  auto b = test::open_cpu();
  Tensor x = canaries(a, 64), y = canaries(b, 64);
  auto st = add1(b, "rt_flat_add1", x, y);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("another Runtime"));
}

}  // namespace
}  // namespace kiln
