// The CUDA driver path on machines with no GPU, through fake drivers (fake_cuda.cpp) chosen
// with KILN_CUDA_DRIVER: a fake device whose memory is host memory and whose launches record
// their arguments; a driver that finds no device; a driver too old for kiln; no driver. Each
// tag runs as its own ctest test with its driver (tests/CMakeLists.txt).
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <numeric>

#include "compiler/dsl/dsl.h"
#include "runtime/cuda/device.h"
#include "runtime/disk_cache.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

// One TMA box of src (8 x 32 f32, 128-byte swizzle) into shared memory and out.
using namespace kiln::dsl;
void fake_tma(Tensor<const f32> src, Tensor<f32> out) {
  auto s = shared_array<f32>(256);
  auto bar = shared_array<u64>(1);
  auto v = tma_view(src, {8, 32}, Swizzle::B128);
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, v.box_bytes());
  tma_load(s, 0u, v, {0, 0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 256u, 64u, [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(fake_tma, "src: rank=2, out").cube_dim(64);

// The same box from a view that fills with NaN outside the tensor, with no swizzle.
void fake_tma_nan(Tensor<const f32> src, Tensor<f32> out) {
  auto s = shared_array<f32>(256);
  auto bar = shared_array<u64>(1);
  auto v = tma_view(src, {8, 32}, Swizzle::None, TmaFill::Nan);
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, v.box_bytes());
  tma_load(s, 0u, v, {0, 0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  for_range(unit_pos(), 256u, 64u, [&](u32 i) { out[i] = s[i]; });
}
KILN_KERNEL(fake_tma_nan, "src: rank=2, out").cube_dim(64);

// A rank-3 box of 2 x 4 x `row` bytes with `swizzle`, of any element type: the encode call's
// data type, dimensions, strides, box and swizzle for each.
template <class T>
void fake_tma_layout(Tensor<const T> src, Tensor<T> out, int swizzle, int row) {
  const int per_row = row / static_cast<int>(sizeof(host_of_t<T>));
  auto s = shared_array<T>(static_cast<uint32_t>(8 * per_row + 128));
  auto bar = shared_array<u64>(1);
  auto v = tma_view(src, {2, 4, per_row}, static_cast<Swizzle>(swizzle));
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, v.box_bytes());
  tma_load(s, 0u, v, {0, 0, 0}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  out[unit_pos()] = s[unit_pos()];
}
KILN_KERNEL_GENERIC(fake_tma_layout, "src: rank=3, out, swizzle = 0, row = 16", f16, bf16, f32, f64,
                    i8, u8, i16, u16, i32, u32, i64, u64, f8e4m3, f8e5m2)
    .cube_dim(32);

// An im2col box of a rank-5 bf16 image (N D H W C) with different corners per dimension, a
// 64-byte swizzle and a NaN fill: the encode call's corners go innermost first.
void fake_im2col(Tensor<const bf16> x, Tensor<bf16> out) {
  auto s = shared_array<bf16>(128 * 32);
  auto bar = shared_array<u64>(1);
  auto v = tma_im2col_view(x, 128, 32, {-3, -2, -1}, {4, 5, 6}, Swizzle::B64, TmaFill::Nan);
  mbarrier_init(bar, 0u);
  mbarrier_arrive_expect_tx(bar, 0u, v.box_bytes());
  tma_load(s, 0u, v, {0, 0, 0, 0, 0}, {1u, 2u, 3u}, bar, 0u);
  mbarrier_wait(bar, 0u, 0u);
  out[unit_pos()] = s[unit_pos()];
}
KILN_KERNEL(fake_im2col, "x: rank=5, out").cube_dim(32);

namespace kiln {
namespace {

using Catch::Contains;
using ir::ElemType;

struct FakeLaunch {
  unsigned grid[3], block[3], shared;
  uint64_t slots[64];
  int count;
  void* stream;
  unsigned char params[1024];
};
struct FakeTensorMap {
  int data_type;
  unsigned rank;
  void* address;
  uint64_t dims[5], strides[4];
  uint32_t box[5], element_strides[5];
  int interleave, swizzle, l2, oob;
  int calls;
  int im2col;
  int lower[3], upper[3];
  unsigned channels, pixels;
};
const FakeTensorMap& last_tensor_map() {
  void* lib = dlopen(std::getenv("KILN_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  auto fn = reinterpret_cast<const FakeTensorMap* (*)()>(dlsym(lib, "fake_cuda_last_tensor_map"));
  REQUIRE(fn);
  return *fn();
}
const FakeLaunch& last_launch() {
  void* lib = dlopen(std::getenv("KILN_CUDA_DRIVER"), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  auto fn = reinterpret_cast<const FakeLaunch* (*)()>(dlsym(lib, "fake_cuda_last_launch"));
  REQUIRE(fn);
  return *fn();
}

const DeviceEntry* cuda_entry(const std::vector<DeviceEntry>& list) {
  for (const auto& d : list)
    if (d.name.rfind("cuda", 0) == 0) return &d;
  return nullptr;
}

Runtime open_gpu(RuntimeOptions o = {}) {
  auto rt = Runtime::open("cuda:0", std::move(o));
  INFO((rt.ok() ? std::string() : rt.error().message));
  REQUIRE(rt.ok());
  (void)kernels::builtin_names();
  return std::move(*rt);
}

// ---- a fake device ------------------------------------------------------------------------------

TEST_CASE("the fake GPU is listed with its properties", "[fake]") {
  const auto list = devices();
  const DeviceEntry* d = cuda_entry(list);
  REQUIRE(d);
  CHECK(d->name == "cuda:0");
  CHECK(d->available);
  CHECK(d->info.description == "kiln fake GPU");
  CHECK(d->info.dlpack_type == 2);
  CHECK(d->info.arch == "sm_90a");
  CHECK(d->info.cores == 80);
  CHECK(d->info.memory_bytes == (uint64_t{1} << 30));
  CHECK(list[0].name == "cpu");  // the CPU is unaffected
}

TEST_CASE("device names are checked", "[fake]") {
  auto one = Runtime::open("cuda:1");
  REQUIRE_FALSE(one.ok());
  CHECK_THAT(one.error().message,
             Contains("there is no cuda:1; this machine has 1 CUDA device (cuda:0)"));
  auto bad = Runtime::open("cuda:x");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Contains("write cuda:N"));
  auto rt = open_gpu();
  CHECK(rt.device().name == "cuda:0");
  CHECK(rt.max_lanes(ElemType::F32) == 4);  // 16-byte vector accesses
  CHECK(rt.max_lanes(ElemType::F16) == 8);
}

TEST_CASE("device memory: transfers, views, pool statistics and out-of-memory", "[fake]") {
  auto rt = open_gpu();
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), 0.0f);
  Tensor t = test::f32_tensor(rt, host);
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 256 == 0);
  CHECK(test::to_host<float>(t) == host);
  auto part = t.slice(0, 10, 20);
  REQUIRE(part.ok());
  CHECK(test::to_host<float>(*part)[0] == 10.0f);
  auto strided = t.slice(0, 0, 1000, 2);
  REQUIRE(strided.ok());
  std::vector<float> half(500);
  auto st = strided->download(std::span<float>(half));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("strided view on cuda:0"));
  CHECK(rt.memory_stats().in_use >= 4000);
  // The fake device has 1 GiB: 2 GiB is out of memory, reported with the driver's words.
  auto big = rt.empty(ElemType::F32, {int64_t{1} << 29});
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().kind == ErrorKind::OutOfMemory);
  CHECK_THAT(big.error().message, Contains("CUDA_ERROR_OUT_OF_MEMORY") && Contains("cuda:0"));
  Tensor after = test::f32_tensor(rt, {1.0f, 2.0f});  // still works
  CHECK(test::to_host<float>(after) == std::vector<float>{1.0f, 2.0f});
  // Freed memory is reused only after the device is idle (a fence), then without asking the driver.
  const uint64_t reused = rt.memory_stats().reused;
  {
    auto tmp = rt.empty(ElemType::F32, {4096});
    REQUIRE(tmp.ok());
  }
  {
    auto tmp = rt.empty(ElemType::F32, {4096});
    REQUIRE(tmp.ok());
  }
  CHECK(rt.memory_stats().reused == reused + 1);
  rt.trim();
}

TEST_CASE("a launch compiles a CUBIN, loads it and passes its arguments in slots",
          "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  const int64_t n = 4096;
  Tensor x = test::f32_tensor(rt, std::vector<float>(n, 1.0f));
  Tensor y = test::f32_tensor(rt, std::vector<float>(n, 2.0f));
  const int w = rt.line_width({&x, &y});
  CHECK(w == 4);
  auto axpy = test::kernel(rt, "axpy");
  KILN_REQUIRE_OK(rt.launch(axpy, static_cast<uint32_t>(n / w / 256), 256, x, y, 3.0f));
  const FakeLaunch& l = last_launch();
  CHECK(l.grid[0] == 4);
  CHECK(l.block[0] == 256);
  CHECK(l.shared == 0);
  CHECK(l.slots[3] == reinterpret_cast<uint64_t>(x.data()));
  CHECK(l.slots[4] == uint64_t(n / 4));  // x: lines
  CHECK(l.slots[8] == reinterpret_cast<uint64_t>(y.data()));
  float a;
  const uint32_t bits = static_cast<uint32_t>(l.slots[13]);
  std::memcpy(&a, &bits, 4);
  CHECK(a == 3.0f);
  CHECK(l.slots[14] != 0);  // the stream's report buffer
  KILN_REQUIRE_OK(rt.sync());
  const CompileReport& r = last_compile_report();
  CHECK(r.kernel == "axpy");
  CHECK_FALSE(r.from_disk);
  // The CUBIN went into the disk cache, under its own kind.
  bool cuda_entry_found = false;
  auto listing = DiskCache::global()->list(true);
  REQUIRE(listing);
  for (const auto& e : *listing) {
    if (e.kind == "cuda") cuda_entry_found = e.problem.empty();
  }
  CHECK(cuda_entry_found);
}

TEST_CASE(
    "a TMA launch encodes a tensor map per view, once per tensor, and passes it after the slots",
    "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  auto src = rt.empty(ElemType::F32, {20, 40});
  REQUIRE(src.ok());
  Tensor out = test::f32_tensor(rt, std::vector<float>(256, 0.0f));
  auto k = test::kernel(rt, "fake_tma");
  const int calls = last_tensor_map().calls;
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, *src, out));
  const FakeTensorMap& m = last_tensor_map();
  CHECK(m.calls == calls + 1);
  // The driver's order: innermost dimension first; strides of the outer dimensions in bytes.
  CHECK(m.data_type == 7);  // CU_TENSOR_MAP_DATA_TYPE_FLOAT32
  CHECK(m.rank == 2);
  CHECK(m.address == src->data());
  CHECK(m.dims[0] == 40);
  CHECK(m.dims[1] == 20);
  CHECK(m.strides[0] == 160);
  CHECK(m.box[0] == 32);
  CHECK(m.box[1] == 8);
  CHECK(m.element_strides[0] == 1);
  CHECK(m.element_strides[1] == 1);
  CHECK(m.interleave == 0);
  CHECK(m.swizzle == 3);  // CU_TENSOR_MAP_SWIZZLE_128B
  CHECK(m.oob == 0);      // zeros outside the tensor
  // The encoded map is in the parameter, at the offset the generated kernel reads it from.
  const FakeLaunch& l = last_launch();
  const unsigned char marker = static_cast<unsigned char>(0xA0 + m.calls);
  bool found = false;
  for (size_t at = 0; at + 128 <= sizeof l.params; at += 128) {
    bool all = true;
    for (size_t i = 0; i < 128; ++i) all = all && l.params[at + i] == marker;
    if (all) {
      found = true;
      // 3 + 7 (src) + 5 (out) slots and the 2 of the report are 136 bytes: the map is at 256.
      CHECK(at == 256);
    }
  }
  CHECK(found);
  KILN_REQUIRE_OK(rt.sync());
  // The same tensor again: the map comes from the context's cache, with no driver call, and is
  // in the parameter as before. Another tensor (or view) is encoded once more.
  const int encoded = m.calls;  // m is the fake driver's record, which later calls overwrite
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, *src, out));
  CHECK(last_tensor_map().calls == encoded);
  const FakeLaunch& again = last_launch();
  for (size_t i = 0; i < 128; ++i) REQUIRE(again.params[256 + i] == marker);
  auto other = rt.empty(ElemType::F32, {20, 40});
  REQUIRE(other.ok());
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, *other, out));
  CHECK(last_tensor_map().calls == encoded + 1);
  CHECK(last_tensor_map().address == other->data());
  auto rows = src->slice(0, 4, 20);  // the same data from row 4 on: another address and shape
  REQUIRE(rows.ok());
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, *rows, out));
  CHECK(last_tensor_map().calls == encoded + 2);
  CHECK(last_tensor_map().dims[1] == 16);
  KILN_REQUIRE_OK(rt.launch(k, 1, 64, *src, out));
  CHECK(last_tensor_map().calls == encoded + 2);
  KILN_REQUIRE_OK(rt.sync());
  // A NaN fill is the driver's NAN_REQUEST_ZERO_FMA (1), and another map than the zero fill's
  // of the same tensor.
  KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "fake_tma_nan"), 1, 64, *src, out));
  CHECK(last_tensor_map().calls == encoded + 3);
  CHECK(last_tensor_map().oob == 1);
  CHECK(last_tensor_map().swizzle == 0);
  KILN_REQUIRE_OK(rt.sync());
  // A tensor TMA cannot read is refused before the driver sees it, naming the argument.
  auto odd = rt.empty(ElemType::F32, {8, 10});
  REQUIRE(odd.ok());
  Status st = rt.launch(k, 1, 64, *odd, out);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("argument 'src'"));
  CHECK(last_tensor_map().calls == encoded + 3);
}

TEST_CASE("the tensor-map encode call for every element type and swizzle", "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  struct Type {
    ElemType elem;
    int driver;  // CU_TENSOR_MAP_DATA_TYPE_*
  };
  // UINT8 0, UINT16 1, UINT32 2, INT32 3, UINT64 4, INT64 5, FLOAT16 6, FLOAT32 7, FLOAT64 8,
  // BFLOAT16 9; the 8-bit floats and signed 8/16-bit integers travel as their unsigned bits.
  const Type types[] = {{ElemType::F16, 6},    {ElemType::BF16, 9},  {ElemType::F32, 7},
                        {ElemType::F64, 8},    {ElemType::I8, 0},    {ElemType::U8, 0},
                        {ElemType::I16, 1},    {ElemType::U16, 1},   {ElemType::I32, 3},
                        {ElemType::U32, 2},    {ElemType::I64, 5},   {ElemType::U64, 4},
                        {ElemType::F8E4M3, 0}, {ElemType::F8E5M2, 0}};
  auto k = test::kernel(rt, "fake_tma_layout");
  for (const Type& t : types)
    for (int swizzle : {0, 32, 64, 128}) {
      const int row = swizzle ? swizzle : 16;
      const auto esize = static_cast<uint64_t>(ir::elem_bytes(t.elem));
      const int64_t inner = 2 * row / static_cast<int64_t>(esize);  // two boxes' rows wide
      INFO(ir::elem_name(t.elem) << ", swizzle " << swizzle);
      auto src = rt.empty(t.elem, {3, 5, inner});
      REQUIRE(src.ok());
      auto out = rt.empty(t.elem, {32});
      REQUIRE(out.ok());
      const int before = last_tensor_map().calls;
      KILN_REQUIRE_OK(rt.launch(k, 1, 32, *src, *out, swizzle, row));
      const FakeTensorMap& m = last_tensor_map();
      REQUIRE(m.calls == before + 1);
      CHECK(m.data_type == t.driver);
      CHECK(m.rank == 3);
      CHECK(m.address == src->data());
      CHECK((m.dims[0] == static_cast<uint64_t>(inner) && m.dims[1] == 5 && m.dims[2] == 3));
      CHECK(m.strides[0] == static_cast<uint64_t>(inner) * esize);
      CHECK(m.strides[1] == static_cast<uint64_t>(inner) * esize * 5);
      CHECK((m.box[0] == row / esize && m.box[1] == 4 && m.box[2] == 2));
      CHECK(m.swizzle == (swizzle == 0 ? 0 : swizzle == 32 ? 1 : swizzle == 64 ? 2 : 3));
      CHECK(m.interleave == 0);
      CHECK(m.oob == 0);
      KILN_REQUIRE_OK(rt.sync());
    }
}

TEST_CASE("an im2col view is encoded with cuTensorMapEncodeIm2col, corners innermost first",
          "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  auto x = rt.empty(ElemType::BF16, {2, 6, 7, 8, 64});  // N D H W C
  REQUIRE(x.ok());
  auto out = rt.empty(ElemType::BF16, {32});
  REQUIRE(out.ok());
  auto k = test::kernel(rt, "fake_im2col");
  const int before = last_tensor_map().calls;
  KILN_REQUIRE_OK(rt.launch(k, 1, 32, *x, *out));
  const FakeTensorMap& m = last_tensor_map();
  REQUIRE(m.calls == before + 1);
  CHECK(m.im2col == 1);
  CHECK(m.data_type == 9);  // BFLOAT16
  CHECK(m.rank == 5);
  CHECK(m.address == x->data());
  CHECK((m.dims[0] == 64 && m.dims[1] == 8 && m.dims[2] == 7 && m.dims[3] == 6 && m.dims[4] == 2));
  CHECK((m.strides[0] == 128 && m.strides[1] == 128 * 8 && m.strides[2] == 128 * 8 * 7 &&
         m.strides[3] == 128 * 8 * 7 * 6));
  // The view says D, H, W: (-3, -2, -1) and (4, 5, 6); the driver takes W, H, D.
  CHECK((m.lower[0] == -1 && m.lower[1] == -2 && m.lower[2] == -3));
  CHECK((m.upper[0] == 6 && m.upper[1] == 5 && m.upper[2] == 4));
  CHECK(m.channels == 32);
  CHECK(m.pixels == 128);
  CHECK(m.swizzle == 2);  // CU_TENSOR_MAP_SWIZZLE_64B
  CHECK(m.oob == 1);      // NaN
  CHECK(m.interleave == 0);
  for (int d = 0; d < 5; ++d) CHECK(m.element_strides[d] == 1);
  KILN_REQUIRE_OK(rt.sync());
  // Encoded once per tensor, as tiled maps are.
  KILN_REQUIRE_OK(rt.launch(k, 1, 32, *x, *out));
  CHECK(last_tensor_map().calls == before + 1);
  KILN_REQUIRE_OK(rt.sync());
  // An image that does not start on 16 bytes is refused before the driver sees it, naming the
  // argument (test_im2col checks the empty bounding box, on the same path).
  auto flat = rt.empty(ElemType::BF16, {2 * 6 * 7 * 8 * 64 + 8});
  REQUIRE(flat.ok());
  auto shifted = flat->slice(0, 1, 2 * 6 * 7 * 8 * 64 + 1);
  REQUIRE(shifted.ok());
  auto img = shifted->reshape({2, 6, 7, 8, 64});
  REQUIRE(img.ok());
  Status st = rt.launch(k, 1, 32, *img, *out);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Contains("argument 'x'"));
  CHECK_THAT(st.error().message, Contains("16 bytes"));
  CHECK(last_tensor_map().calls == before + 1);
}

TEST_CASE("GPU launch errors: alignment, grid limits, streams of another device", "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  Tensor x = test::f32_tensor(rt, std::vector<float>(1028, 1.0f));
  auto shifted = x.slice(0, 1, 1025);  // 4 bytes past a 16-byte boundary
  REQUIRE(shifted.ok());
  auto y = rt.empty(ElemType::F32, {1024});
  REQUIRE(y.ok());
  LaunchOptions o;
  o.lines = {{"x", 4}, {"y", 4}};
  auto st = rt.launch_with(o, test::kernel(rt, "axpy"), 1, 256, *shifted, *y, 1.0f);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains("argument 'x'") && Contains("4 bytes past a 16-byte boundary"));
  CHECK(rt.line_width({&*shifted, &*y}) == 1);  // the helper picks a width that works
  auto grid = rt.launch(test::kernel(rt, "rt_fill_n"), Dim3(1, 70000, 1), 64, *y, 16u, 1.0f);
  REQUIRE_FALSE(grid.ok());
  CHECK_THAT(grid.error().message, Contains("1x70000x1 cubes") && Contains("65535 in y"));
#if KILN_TEST_HAVE_CPU  // streams of another device: the CPU's
  auto cpu = Runtime::open("cpu");
  REQUIRE(cpu.ok());
  LaunchOptions other;
  Stream cpu_stream = cpu->default_stream();
  other.stream = &cpu_stream;
  auto wrong = rt.launch_with(other, test::kernel(rt, "rt_fill_n"), 1, 64, *y, 16u, 1.0f);
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.error().message, Contains("a stream of another Runtime"));
  Stream gpu_stream = rt.default_stream();
  other.stream = &gpu_stream;
  auto cy = cpu->empty(ElemType::F32, {64});
  REQUIRE(cy.ok());
  auto wrong2 = cpu->launch_with(other, test::kernel(*cpu, "rt_fill_n"), 1, 64, *cy, 16u, 1.0f);
  REQUIRE_FALSE(wrong2.ok());
  CHECK_THAT(wrong2.error().message, Contains("a stream of another Runtime"));
#endif
}

TEST_CASE("prints and checked-mode faults written by the device arrive at sync", "[fake][nvrtc]") {
  test::ScopedCache cache;
  std::vector<std::string> lines;
  RuntimeOptions ro;
  ro.checked = true;
  ro.print = [&](const std::string& s) { lines.push_back(s); };
  auto rt = open_gpu(ro);
  Tensor x = test::f32_tensor(rt, {1.0f, 2.0f, 3.0f, 4.0f});
  ::setenv("FAKE_CUDA_REPORT", "8", 1);  // rt_print_assert's report slot: 3 + 5 for x
  KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "rt_print_assert"), 1, 4, x));
  ::unsetenv("FAKE_CUDA_REPORT");
  const Status st = rt.sync();
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().kind == ErrorKind::KernelFault);
  CHECK_THAT(st.error().message,
             Contains(test::marker_loc("tests/runtime/runtime_kernels.cpp", "PRINT_LOAD") +
                      ": error: out-of-bounds load of tensor 'x' in kernel 'rt_print_assert': line "
                      "index 7 is not "
                      "below 5 (cube 3, unit 4); the access was skipped"));
  CHECK(lines == std::vector<std::string>{"unit 42 sees 0"});
  KILN_REQUIRE_OK(rt.sync());  // delivered once; the buffer was reset
}

TEST_CASE("events and streams on the GPU", "[fake]") {
  auto rt = open_gpu();
  auto s = rt.new_stream();
  REQUIRE(s.ok());
  auto a = rt.record(*s);
  auto b = rt.record(*s);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto ms = Event::elapsed_ms(*a, *b);
  REQUIRE(ms.ok());
  CHECK(*ms == 0.25);  // what the fake driver measures
  KILN_REQUIRE_OK(rt.wait(rt.default_stream(), *b));
  KILN_REQUIRE_OK(rt.sync(*s));
#if KILN_TEST_HAVE_CPU  // events of another device: the CPU's
  auto cpu = Runtime::open("cpu");
  REQUIRE(cpu.ok());
  auto ce = cpu->record(cpu->default_stream());
  REQUIRE(ce.ok());
  CHECK_FALSE(Event::elapsed_ms(*a, *ce).ok());
  CHECK_FALSE(rt.wait(*s, *ce).ok());
#endif
}

TEST_CASE("launches on a CUstream the caller owns use it, and kiln leaves it alive",
          "[fake][nvrtc]") {
  test::ScopedCache cache;
  auto rt = open_gpu();
  Tensor x = test::f32_tensor(rt, std::vector<float>(1024, 1.0f));
  Tensor y = test::f32_tensor(rt, std::vector<float>(1024, 2.0f));
  auto axpy = test::kernel(rt, "axpy");
  void* theirs = reinterpret_cast<void*>(uintptr_t{0x5eed});  // never dereferenced by kiln
  {
    auto s = rt.wrap_stream(theirs);
    KILN_REQUIRE_OK(s);
    LaunchOptions o;
    o.stream = &*s;
    KILN_REQUIRE_OK(rt.launch_with(o, axpy, 1, 256, x, y, 3.0f));
    CHECK(last_launch().stream == theirs);
    KILN_REQUIRE_OK(rt.sync(*s));
  }  // the fake driver's cuStreamDestroy would free() it: a destroyed external stream crashes
  auto legacy = rt.wrap_stream(nullptr);  // the legacy default stream
  KILN_REQUIRE_OK(legacy);
  KILN_REQUIRE_OK(rt.sync(*legacy));
#if KILN_TEST_HAVE_CPU
  auto cpu = Runtime::open("cpu");
  REQUIRE(cpu.ok());
  auto none = cpu->wrap_stream(theirs);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().kind == ErrorKind::Unsupported);
  CHECK_THAT(none.error().message, Contains("cpu has no native streams to wrap"));
#endif
}

TEST_CASE("a module the driver rejects is an error naming the kernel and the CUDA error",
          "[fake]") {
  auto dev = detail::CudaDevice::open(0, 0);
  REQUIRE(dev.ok());
  abi::KernelInfo info;
  info.name = "broken";
  info.symbol = "kiln_broken";
  std::vector<char> garbage(64, 'x');
  garbage.back() = '\0';  // neither a CUBIN nor PTX
  auto k = detail::load_cuda_kernel(**dev, garbage, info, {});
  REQUIRE_FALSE(k.ok());
  CHECK(k.error().kind == ErrorKind::Device);
  CHECK_THAT(k.error().message,
             Contains("loading kernel 'broken' (CUBIN) on cuda:0: CUDA_ERROR_INVALID_IMAGE"));
  info.shared_bytes = 1 << 20;
  auto big = detail::load_cuda_kernel(**dev, garbage, info, {});
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.error().message,
             Contains("needs 1048576 bytes of shared memory per cube; cuda:0 allows 232448"));
}

// ---- no device, an old driver, no driver --------------------------------------------------------

void check_absent(const std::string& reason) {
  const auto list = devices();
  const DeviceEntry* d = cuda_entry(list);
  REQUIRE(d);
  CHECK_FALSE(d->available);
  CHECK_THAT(d->reason, Contains(reason));
  auto rt = Runtime::open("cuda:0");
  REQUIRE_FALSE(rt.ok());
  CHECK_THAT(rt.error().message, Contains("device 'cuda:0' is not available") && Contains(reason));
  auto cpu = Runtime::open("cpu");  // nothing else is affected
#if KILN_TEST_HAVE_CPU
  CHECK(cpu.ok());
#else
  REQUIRE_FALSE(cpu.ok());
  CHECK_THAT(cpu.error().message, Contains("built without the CPU backend"));
#endif
}

TEST_CASE("a driver with no device makes CUDA absent", "[nodevice]") {
  check_absent("the CUDA driver found no device");
}
TEST_CASE("a driver without a needed function makes CUDA absent", "[old]") {
  check_absent("is too old: it lacks cuLaunchKernel");
}
TEST_CASE("no driver makes CUDA absent", "[absent]") {
  check_absent("no CUDA driver (");
}

}  // namespace
}  // namespace kiln
