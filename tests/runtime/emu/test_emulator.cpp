// The CUDA emulator (cuda-emu) catches what it claims to: deliberately broken kernels (a missing
// barrier, a shared-memory race, a plane operation under divergent control flow, units at
// different barriers or returning before one, accesses out of bounds in unchecked code) fail
// at sync with the kernel's source line, and their fixed versions pass. Kernels are DSL
// kernels, or the CUDA backend's source edited the way a hand-written kernel goes wrong.
#include <catch2/catch.hpp>

#include "compiler/cuda/emu/backend.h"
#include "compiler/dsl/dsl.h"
#include "compiler/dsl/registry.h"
#include "kernels/kernels.h"
#include "runtime/device.h"
#include "runtime/runtime.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

using namespace kiln::dsl;

// Each unit writes its slot of shared memory, then reads its neighbour's.
void emu_neighbour(Tensor<const f32> x, Tensor<f32> y, bool barrier) {
  auto s = shared_array<f32>(64);
  u32 u = unit_pos();
  s[u] = x[absolute_pos()];  // NEIGHBOUR_WRITE
  if (barrier) sync_cube();
  y[absolute_pos()] = s[(u + 1u) % 64u];  // NEIGHBOUR_READ
}
KILN_KERNEL(emu_neighbour, "x, y, barrier = false").cube_dim(64);

// Every unit writes the same shared element.
void emu_same_slot(Tensor<f32> y) {
  auto s = shared_array<u32>(1);
  s[0u] = unit_pos();  // SAME_SLOT_WRITE
  sync_cube();
  y[absolute_pos()] = cast<f32>(s[0u]);
}
KILN_KERNEL(emu_same_slot, "y").cube_dim(32);

// A local array of 4 written at n indices.
void emu_local(Tensor<f32> y, u32 n) {
  auto l = local_array<f32>(4);
  for_range(0u, n, [&](u32 k) { l[k] = cast<f32>(k); });  // LOCAL_STORE
  y[absolute_pos()] = l[0u];
}
KILN_KERNEL(emu_local, "y, n").cube_dim(1);

// A warpgroup multiply of a zero tile, with its fence, commit and wait in place or missing
// (mode 1: no fence; 2: the store before the wait; 3: a fill between the fence and the multiply).
void emu_wgmma(Tensor<f32> y, int mode) {
  auto acc = accumulator<f32>(16, 8, 16);
  auto s = shared_array<bf16>(64 * 16);
  for_range(unit_pos(), 64u * 16u, 128u, [&](u32 i) { s[i] = bf16(0.0f); });
  sync_cube();
  fill(acc, 1.0f);
  if (mode != 1) wgmma_fence();
  if (mode == 3) fill(acc, 2.0f);
  wgmma<bf16>(acc, wgmma_desc(s, 0u, 128u, 256u), wgmma_desc(s, 0u, 128u, 256u));  // WGMMA
  wgmma_commit();
  if (mode == 2) store(y, plane_pos() * 128u, 8u, acc);  // EARLY_STORE
  wgmma_wait(0);
  store(y, plane_pos() * 128u, 8u, acc);
}
KILN_KERNEL(emu_wgmma, "y, mode = 0").cube_dim(128);

namespace kiln {
namespace {

using Catch::Contains;

// The emulator, or why it is not here (then the test says "skipped: ...").
Runtime* emulator() {
  static std::optional<Runtime> rt;
  static std::once_flag once;
  std::call_once(once, [] {
    (void)kernels::builtin_names();  // registers the example kernels
    if (auto r = Runtime::open("cuda-emu"))
      rt.emplace(std::move(*r));
    else
      std::printf("skipped: %s\n", r.error().message.c_str());
  });
  return rt ? &*rt : nullptr;
}

std::string loc(const char* marker) {
  return test::marker_loc("tests/runtime/emu/test_emulator.cpp", marker);
}

TEST_CASE("a missing barrier is reported; with the barrier the kernel is right", "[emulator]") {
  Runtime* rt = emulator();
  if (!rt) return;
  std::vector<float> xs(128);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  Tensor x = test::f32_tensor(*rt, xs);
  Tensor y = test::f32_tensor(*rt, std::vector<float>(128, 0.0f));
  auto k = test::kernel(*rt, "emu_neighbour");
  KILN_REQUIRE_OK(rt->launch(k, 2, 64, x, y, false));
  const Status st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("NEIGHBOUR_READ") + ": error: kernel 'emu_neighbour' (cube 0, unit 0) "
                                              "reads shared memory that no unit of the cube has "
                                              "written yet") &&
                 Contains("a sync_cube is missing"));
  KILN_REQUIRE_OK(rt->launch(k, 2, 64, x, y, true));
  KILN_REQUIRE_OK(rt->sync());
  const auto got = test::to_host<float>(y);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == xs[i / 64 * 64 + (i + 1) % 64]);
}

TEST_CASE("two units writing the same shared bytes between barriers is a race", "[emulator]") {
  Runtime* rt = emulator();
  if (!rt) return;
  Tensor y = test::f32_tensor(*rt, std::vector<float>(32, 0.0f));
  KILN_REQUIRE_OK(rt->launch(test::kernel(*rt, "emu_same_slot"), 1, 32, y));
  const Status st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("SAME_SLOT_WRITE") +
                      ": error: shared-memory race in kernel "
                      "'emu_same_slot' (cube 0, unit 1): this store "
                      "writes bytes that unit 0 wrote at " +
                      loc("SAME_SLOT_WRITE") + " with no sync_cube between them"));
}

TEST_CASE("accesses out of bounds in unchecked code are reported and skipped", "[emulator]") {
  Runtime* rt = emulator();
  if (!rt) return;
  // Global memory: a load far past the end of x.
  Tensor x = test::f32_tensor(*rt, std::vector<float>(64, 1.0f));
  Tensor y = test::f32_tensor(*rt, std::vector<float>(64, 0.0f));
  KILN_REQUIRE_OK(rt->launch(test::kernel(*rt, "rt_shifted_copy"), 2, 32, x, y, 1u << 24));
  Status st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(test::marker_loc("tests/runtime/runtime_kernels.cpp", "SHIFT_LOAD") +
                      ": error: out-of-bounds load of global memory in kernel 'rt_shifted_copy' "
                      "(cube 0, unit 0): 4 bytes at") &&
                 Contains("are outside every allocation of cuda-emu") &&
                 Contains("the access was skipped"));
  // A shared array of 16 written by 32 units: the stores past it are skipped.
  Tensor z = test::f32_tensor(*rt, std::vector<float>(32, 0.0f));
  KILN_REQUIRE_OK(rt->launch(test::kernel(*rt, "rt_shared_oob"), 1, 32, z, 16));
  st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(test::marker_loc("tests/runtime/runtime_kernels.cpp", "SHARED_STORE") +
                      ": error: out-of-bounds store of a shared array in kernel 'rt_shared_oob': "
                      "line index 16 is not below 16 (cube 0, unit 16)"));
  for (float v : test::to_host<float>(z)) CHECK(v == 2.0f);  // the rest of the kernel ran
  // A local array of 4 written at 6 indices.
  Tensor w = test::f32_tensor(*rt, std::vector<float>(1, -1.0f));
  KILN_REQUIRE_OK(rt->launch(test::kernel(*rt, "emu_local"), 1, 1, w, 6u));
  st = rt->sync();
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("LOCAL_STORE") + ": error: out-of-bounds store of a local array in "
                                           "kernel 'emu_local': line index 4 is not below 4"));
  KILN_REQUIRE_OK(rt->launch(test::kernel(*rt, "emu_local"), 1, 1, w, 4u));
  KILN_REQUIRE_OK(rt->sync());
  CHECK(test::to_host<float>(w)[0] == 0.0f);
}

// ---- hand-edited CUDA C++ ------------------------------------------------------------------

// plane_sum's CUDA C++ for the emulator, edited by `edit`, run on 256 ones in one cube; the
// sync error (or OK) and `out` (the sum, in out[0]).
struct EditedRun {
  Status status;
  std::vector<float> out;
  float sum = 0;
};
EditedRun run_edited(const std::function<std::string(std::string)>& edit, size_t out_size = 1) {
  auto dev_family = [] {
    for (const DeviceFamily& f : device_families())
      if (f.claims("cuda-emu")) return f;
    return DeviceFamily{};
  }();
  REQUIRE(dev_family.open);
  auto dev = dev_family.open("cuda-emu", 0);
  REQUIRE(dev.ok());
  const backend::Target& t = (*dev)->target();
  const dsl::KernelDef* def = dsl::Registry::global().find("plane_sum");
  REQUIRE(def);
  auto sel = dsl::select(*def, {});
  REQUIRE(sel.ok());
  auto traced = dsl::trace(*def, *sel->inst, sel->request);
  REQUIRE(traced.ok());
  auto prepared = t.backend->prepare(std::move(*traced));
  REQUIRE(prepared.ok());
  auto src = cuda::generate(*prepared, {cuda::emu::arch_of(t).target, 32, false, false});
  REQUIRE(src.ok());
  const std::string original = src->text;
  src->text = edit(src->text);
  REQUIRE(src->text != original);
  auto artifact = cuda::emu::compile_source(*src, t, true);
  INFO((artifact.ok() ? std::string() : artifact.error().message));
  REQUIRE(artifact.ok());
  auto loaded = (*dev)->load(*artifact);
  REQUIRE(loaded.ok());
  auto stream = (*dev)->new_stream();
  REQUIRE(stream.ok());
  auto in = Buffer::allocate((*dev)->pool(), 256 * 4);
  auto out = Buffer::allocate((*dev)->pool(), out_size * 4);
  REQUIRE((in.ok() && out.ok()));
  std::vector<float> ones(256, 1.0f), zeros(out_size, 0.0f);
  KILN_REQUIRE_OK((*dev)->upload(in->data(), ones.data(), 256 * 4));
  KILN_REQUIRE_OK((*dev)->upload(out->data(), zeros.data(), out_size * 4));
  std::vector<HostArg> args{HostArg{TensorView(in->data(), {256})},
                            HostArg{TensorView(out->data(), {static_cast<int64_t>(out_size)})}};
  KILN_REQUIRE_OK((*stream)->launch(**loaded, {1, 1, 1}, args));
  std::vector<std::string> prints;
  std::optional<Error> fault;
  KILN_REQUIRE_OK((*stream)->sync(prints, fault));
  EditedRun r;
  if (fault) r.status = *fault;
  r.out.resize(out_size);
  KILN_REQUIRE_OK((*dev)->download(r.out.data(), out->data(), out_size * 4));
  r.sum = r.out[0];
  return r;
}

// `text` with the first `what` replaced by `with`.
std::string replace_first(std::string text, const std::string& what, const std::string& with) {
  const size_t at = text.find(what);
  REQUIRE(at != std::string::npos);
  return text.replace(at, what.size(), with);
}

TEST_CASE("the unedited source runs right, so the edits below are what break it", "[emulator]") {
  if (!emulator()) return;
  auto r = run_edited([](std::string s) { return s + "\n// unchanged\n"; });
  KILN_REQUIRE_OK(r.status);
  CHECK(r.sum == 256.0f);
}

TEST_CASE("a plane operation under divergent control flow is reported", "[emulator]") {
  if (!emulator()) return;
  // Only the first half of every plane takes part in the first plane_sum:
  // `const kiln::f32 vN = kiln::plane_sum(...);` becomes
  // `kiln::f32 vN{}; if (kiln::unit_linear() % 32u < 16u) vN = kiln::plane_sum(...);`.
  auto r = run_edited([](std::string s) {
    const size_t call = s.find("kiln::plane_sum(");
    REQUIRE(call != std::string::npos);
    const size_t begin = s.rfind('\n', call) + 1, eq = s.find(" = ", begin);
    const std::string decl = s.substr(begin, eq - begin);  // "  const kiln::f32 vN"
    const std::string name = decl.substr(decl.rfind(' ') + 1);
    const std::string type =
        decl.substr(decl.find("const ") + 6, decl.rfind(' ') - decl.find("const ") - 6);
    return s.replace(
        begin, call - begin,
        "  " + type + " " + name + "{}; if (kiln::unit_linear() % 32u < 16u) " + name + " = ");
  });
  REQUIRE_FALSE(r.status.ok());
  CHECK_THAT(r.status.error().message,
             Contains("error: a shuffle in kernel 'plane_sum' (cube 0, plane 0) never completed: "
                      "its mask 0xffffffff includes lanes that do not reach it: unit 16 (lane "
                      "16) waits at the sync_cube at " +
                      test::marker_loc("kernels/examples/plane_sum.cpp", "sync_cube();")) &&
                 Contains("plane-uniform control flow"));
}

TEST_CASE("units at different barriers, or returning before one, are reported", "[emulator]") {
  if (!emulator()) return;
  auto split = run_edited([](const std::string& s) {
    return replace_first(s, "__syncthreads();",
                         "if (threadIdx.x < 128u) {\n#line 1000 \"split.cu\"\n__syncthreads();\n"
                         "} else {\n#line 2000 \"split.cu\"\n__syncthreads();\n}");
  });
  REQUIRE_FALSE(split.status.ok());
  CHECK_THAT(split.status.error().message,
             Contains("error: units of cube 0 are at different barriers in kernel 'plane_sum': "
                      "unit ") &&
                 Contains("reached this sync_cube while others wait at the one at split.cu:"));
  auto early = run_edited([](const std::string& s) {
    return replace_first(s, "__syncthreads();", "if (threadIdx.x == 5u) return;\n__syncthreads();");
  });
  REQUIRE_FALSE(early.status.ok());
  CHECK_THAT(early.status.error().message,
             Contains("never completed: 255 of 256 units wait at it, but unit 5 has returned"));
}

TEST_CASE("warp votes, ballots and reductions follow CUDA", "[emulator]") {
  if (!emulator()) return;
  // A hand-written body in place of plane_sum's, after its parameters.
  auto r = run_edited(
      [](const std::string& s) {
        const size_t body = s.find('\n', s.find("kiln::f32* const out")) + 1;
        return s.substr(0, body) + R"(
  const unsigned lane = threadIdx.x & 31u;
  const unsigned ballot = __ballot_sync(0xffffffffu, lane % 3u == 0u);
  const unsigned sum = __reduce_add_sync(0xffffffffu, lane);
  const int smin = __reduce_min_sync(0xffffffffu, (int)lane - 16);
  const unsigned bits = __reduce_xor_sync(0xffffffffu, 1u << lane);
  const int all = __all_sync(0xffffffffu, lane < 32u), any = __any_sync(0xffffffffu, lane == 7u);
  unsigned low_max = 0;
  if (lane < 16u) low_max = __reduce_max_sync(0x0000ffffu, lane);
  const unsigned from = __shfl_sync(0xffffffffu, lane * 10u, 5);
  if (threadIdx.x == 0u) {
    out[0] = (float)__builtin_popcount(ballot);
    out[1] = (float)sum;
    out[2] = (float)smin;
    out[3] = bits == 0xffffffffu ? 1.0f : 0.0f;
    out[4] = (float)all;
    out[5] = (float)any;
    out[6] = (float)low_max;
    out[7] = (float)from;
  }
}
)";
      },
      8);
  KILN_REQUIRE_OK(r.status);
  CHECK(r.out == std::vector<float>{11, 496, -16, 1, 1, 1, 15, 50});
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_CASE("wgmma without its fence, or an accumulator read before the wait, is reported",
          "[emulator][wgmma]") {
  Runtime* rt = emulator();
  if (!rt) return;
  Tensor y = test::f32_tensor(*rt, std::vector<float>(4 * 128, 0.0f));
  auto k = test::kernel(*rt, "emu_wgmma");
  auto run = [&](int mode) {
    KILN_REQUIRE_OK(rt->launch(k, 1, 128, y, mode));
    return rt->sync();
  };
  KILN_REQUIRE_OK(run(0));
  for (float v : test::to_host<float>(y)) REQUIRE(v == 1.0f);  // 1 + 0 * 0
  Status st = run(1);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("WGMMA") + ": error: wgmma.mma before any wgmma_fence()") &&
                 Contains("kernel 'emu_wgmma' (cube 0, unit 0)"));
  st = run(2);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("EARLY_STORE") + ": error: a fragment op uses an accumulator while a "
                                           "wgmma.mma into it is in flight"));
  st = run(3);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.error().message,
             Contains(loc("WGMMA") + ": error: wgmma.mma into an accumulator that another "
                                     "fragment op used after the last wgmma_fence()"));
}

}  // namespace
}  // namespace kiln
