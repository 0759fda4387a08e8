// Tensors: creation, views, host transfers, wrapping host memory; devices.
#include <catch2/catch.hpp>

#include <numeric>

#include "runtime/api/dlpack.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using ir::ElemType;
using test::open_cpu;
using test::to_host;

TEST_CASE("devices lists the CPU and says why CUDA is absent", "[runtime][devices]") {
  const auto list = devices();
  REQUIRE(list.size() >= 2);
  CHECK(list[0].name == "cpu");
  CHECK(list[0].available);
  CHECK(list[0].info.cores >= 1);
  CHECK(list[0].info.vector_bits >= 128);
  CHECK(list[0].info.memory_bytes > 0);
  bool cuda_listed = false;
  for (const auto& d : list)
    if (d.name.rfind("cuda", 0) == 0) {
      cuda_listed = true;
      if (!d.available) CHECK_FALSE(d.reason.empty());
    }
  CHECK(cuda_listed);
}

TEST_CASE("opening an unknown or absent device is an error that says why", "[runtime][devices]") {
  auto bad = Runtime::open("tpu");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("unknown device 'tpu'"));
  auto rt = open_cpu();
  CHECK(rt.device().name == "cpu");
  CHECK(rt.device().lane_units);
}

TEST_CASE(
    "cpu:NAME runs another CPU's code when this CPU has its features, else says which it "
    "lacks",
    "[runtime][devices]") {
  // x86-64-v3 (AVX2, FMA): every x86 machine kiln is tested on has it.
  auto v3 = Runtime::open("cpu:x86-64-v3");
  if (!v3.ok()) {
    WARN("skipped: " << v3.error().message);
  } else {
    CHECK(v3->device().name == "cpu:x86-64-v3");
    CHECK(v3->device().vector_bits == 256);
    CHECK(v3->max_lanes(ElemType::F32) == 8);
    std::vector<float> host(256);
    std::iota(host.begin(), host.end(), 1.0f);
    Tensor x = test::f32_tensor(*v3, host);
    Tensor y = test::f32_tensor(*v3, std::vector<float>(256, 0.0f));
    auto k = test::kernel(*v3, "rt_affine");
    KILN_REQUIRE_OK(v3->launch(k, 1, 64, x, y, 2.0f, 3));
    const auto out = to_host<float>(y);
    for (size_t i = 0; i < host.size(); ++i) CHECK(out[i] == 2.0f * host[i] + 3.0f);
  }
  // Diamond Rapids' AVX10.2 and AMX-FP8: none of the machines this runs on has them.
  auto future = Runtime::open("cpu:diamondrapids");
  if (future.ok()) {
    WARN("skipped: this CPU runs Diamond Rapids' code, so its refusal cannot be checked");
  } else {
    CHECK_THAT(future.error().message, Catch::Contains("cpu:diamondrapids cannot run here"));
    CHECK_THAT(future.error().message, Catch::Contains("avx10.2"));
  }
  auto unknown = Runtime::open("cpu:nope");
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().message, Catch::Contains("unknown CPU 'nope'"));
}

TEST_CASE("tensors upload and download in row-major order", "[runtime][tensor]") {
  auto rt = open_cpu();
  std::vector<float> host(24);
  std::iota(host.begin(), host.end(), 0.0f);
  Tensor t = test::tensor_from(rt, ElemType::F32, host, {2, 3, 4});
  CHECK(t.rank() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.stride(0) == 12);
  CHECK(t.stride(1) == 4);
  CHECK(t.stride(2) == 1);
  CHECK(t.is_contiguous());
  CHECK(t.describe() == "f32[2, 3, 4]");
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  CHECK(to_host<float>(t) == host);
  // A host buffer of the wrong size is refused, naming both sizes.
  std::vector<float> small(10);
  auto st = t.download(std::span<float>(small));
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message, Catch::Contains("40 bytes") && Catch::Contains("96 bytes"));
}

TEST_CASE("views share memory: slice, transpose, permute, reshape", "[runtime][tensor]") {
  auto rt = open_cpu();
  std::vector<int32_t> host(12);
  std::iota(host.begin(), host.end(), 0);
  Tensor t = test::tensor_from(rt, ElemType::I32, host, {3, 4});

  auto row1 = t.slice(0, 1, 2);
  REQUIRE(row1.ok());
  CHECK(to_host<int32_t>(*row1) == std::vector<int32_t>{4, 5, 6, 7});
  auto cols = t.slice(1, 1, 4, 2);  // columns 1 and 3
  REQUIRE(cols.ok());
  CHECK_FALSE(cols->is_contiguous());
  CHECK(to_host<int32_t>(*cols) == std::vector<int32_t>{1, 3, 5, 7, 9, 11});

  auto tt = t.transpose(0, 1);
  REQUIRE(tt.ok());
  CHECK(tt->shape(0) == 4);
  CHECK(to_host<int32_t>(*tt) == std::vector<int32_t>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(tt->data() == t.data());

  auto r = t.reshape({2, 6});
  REQUIRE(r.ok());
  CHECK(to_host<int32_t>(*r) == host);
  auto bad = tt->reshape({12});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("contiguous"));
  CHECK_FALSE(t.reshape({5, 2}).ok());
  CHECK_FALSE(t.slice(1, 2, 9).ok());
  CHECK_FALSE(t.permute({0, 0}).ok());

  // Writing through a strided view changes the parent.
  const std::vector<int32_t> minus{-1, -3, -5, -7, -9, -11};
  KILN_REQUIRE_OK(cols->upload(std::span<const int32_t>(minus)));
  CHECK(to_host<int32_t>(t) == std::vector<int32_t>{0, -1, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11});
}

TEST_CASE("wrapping host memory makes no copy and releases it at the end", "[runtime][tensor]") {
  auto rt = open_cpu();
  std::vector<float> host(8, 1.0f);
  bool released = false;
  {
    auto t =
        rt.wrap(host.data(), ElemType::F32, std::vector<int64_t>{8}, {}, [&] { released = true; });
    REQUIRE(t.ok());
    CHECK(t->data() == host.data());
    auto k = test::kernel(rt, "rt_fill_n");
    KILN_REQUIRE_OK(rt.launch(k, 1, 64, *t, 8u, 5.0f));
    KILN_REQUIRE_OK(rt.sync());
  }
  CHECK(released);
  CHECK(host == std::vector<float>(8, 5.0f));
  // Misaligned and null pointers are refused.
  CHECK_FALSE(
      rt.wrap(reinterpret_cast<char*>(host.data()) + 1, ElemType::F32, std::vector<int64_t>{2})
          .ok());
  CHECK_FALSE(rt.wrap(nullptr, ElemType::F32, std::vector<int64_t>{2}).ok());
}

TEST_CASE("a borrowed DLPack tensor is used in place and never released", "[runtime][dlpack]") {
  auto rt = open_cpu();
  std::vector<float> host(12, 1.0f);
  int64_t shape[] = {3, 4};
  int64_t strides[] = {4, 1};
  DLTensor dl{};
  dl.data = host.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLFloat, 32, 1};
  dl.shape = shape;
  dl.strides = strides;
  {
    auto t = from_dlpack_borrowed(rt, dl);
    KILN_REQUIRE_OK(t);
    CHECK(t->data() == host.data());
    CHECK(t->shape()[0] == 3);
    auto k = test::kernel(rt, "rt_fill_n");
    KILN_REQUIRE_OK(rt.launch(k, 1, 64, t->reshape({12}).value(), 12u, 7.0f));
    KILN_REQUIRE_OK(rt.sync());
  }
  CHECK(host == std::vector<float>(12, 7.0f));  // nothing freed it: it is still the caller's
  // The same checks as an owned one: a negative stride, a type kiln lacks, read-only.
  strides[0] = -4;
  CHECK_THAT(from_dlpack_borrowed(rt, dl).error().message, Catch::Contains("negative"));
  strides[0] = 4;
  dl.dtype = {kDLComplex, 64, 1};
  CHECK_FALSE(from_dlpack_borrowed(rt, dl).ok());
  dl.dtype = {kDLFloat, 32, 1};
  auto ro = from_dlpack_borrowed(rt, dl, /*read_only=*/true);
  KILN_REQUIRE_OK(ro);
  CHECK(ro->read_only());
}

TEST_CASE("the runtime's pool is capped and survives out-of-memory", "[runtime][memory]") {
  RuntimeOptions o;
  o.memory_cap = 4 << 20;
  auto rt = open_cpu(o);
  auto a = rt.empty(ElemType::F32, {512, 1024});  // 2 MiB
  REQUIRE(a.ok());
  auto b = rt.empty(ElemType::F32, {1024, 1024});  // 4 MiB: over the cap
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().kind == ErrorKind::OutOfMemory);
  auto overflow = rt.empty(ElemType::F64, {int64_t{1} << 40, int64_t{1} << 40});
  REQUIRE_FALSE(overflow.ok());
  CHECK(overflow.error().kind == ErrorKind::OutOfMemory);
  CHECK_FALSE(rt.empty(ElemType::F32, {-1}).ok());
  // Kernels still run afterwards.
  std::vector<float> ones(64, 1.0f);
  Tensor y = test::f32_tensor(rt, ones);
  KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "rt_fill_n"), 1, 64, y, 64u, 3.0f));
  KILN_REQUIRE_OK(rt.sync());
  CHECK(to_host<float>(y) == std::vector<float>(64, 3.0f));
  const MemoryStats s = rt.memory_stats();
  CHECK(s.cap == (4u << 20));
  CHECK(s.in_use >= (2u << 20));
  *a = Tensor();
  rt.trim();
  CHECK(rt.memory_stats().reserved < (2u << 20));
}

}  // namespace
}  // namespace kiln
