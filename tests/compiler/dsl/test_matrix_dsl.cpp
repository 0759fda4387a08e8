// Matrix fragments in the DSL: misuse is a trace error at the kernel's line, and kernels ask the
// target they are traced for which multiplies it runs (dsl::has_mma), choosing tiles by it.
#include <catch2/catch.hpp>

#include "compiler/backend.h"
#include "compiler/dsl/context.h"
#include "compiler/dsl/dsl.h"
#include "tests/compiler/dsl/dsl_test_util.h"

using namespace kiln;
using namespace kiln::dsl;
using Catch::Contains;

namespace {

const char* kFile = "tests/compiler/dsl/test_matrix_dsl.cpp";

std::string at(const char* marker) {
  return test::marker_loc(kFile, marker) + ": error: ";
}

// A fragment op with an index that differs between the units of a plane.
void m_varying(Tensor<const f16> a) {
  auto fa = matrix_a<f16>(16, 16, 16);
  load(fa, a, unit_pos(), 16u);  // ERR:varying-index
}
KILN_KERNEL(m_varying, "a").cube_dim(32);

// Inside an if_ that depends on the unit.
void m_divergent(Tensor<f32> c) {
  auto acc = accumulator<f32>(16, 16, 16);
  if_(unit_pos() < 16u, [&] {  // ERR:divergent-if
    fill(acc, 0.0f);           // ERR:divergent-fill
  });
  store(c, 0u, 16u, acc);
}
KILN_KERNEL(m_divergent, "c").cube_dim(32);

// An accumulator of the wrong type (A and B of different types do not compile: mma takes one
// input type).
void m_types(Tensor<const f16> a, Tensor<const f16> b, Tensor<i32> c) {
  auto fa = matrix_a<f16>(16, 16, 16);
  auto fb = matrix_b<f16>(16, 16, 16);
  auto acc = accumulator<i32>(16, 16, 16);
  load(fa, a, 0u, 16u);
  load(fb, b, 0u, 16u);
  mma(acc, fa, fb);  // ERR:types
  store(c, 0u, 16u, acc);
}
KILN_KERNEL(m_types, "a, b, c").cube_dim(32);

// A shape no target has, and a fragment loaded from memory of another type.
void m_shape(Tensor<const f16> a) {
  auto fa = matrix_a<f16>(16, 16, 8);  // ERR:shape
  load(fa, a, 0u, 16u);
}
KILN_KERNEL(m_shape, "a").cube_dim(32);
void m_memory(Tensor<const f32> a) {
  auto fa = matrix_a<f16>(16, 16, 16);
  load(fa, a, 0u, 16u);  // ERR:memory
}
KILN_KERNEL(m_memory, "a").cube_dim(32);

// Shapes that are no numbers of rows at all.
void m_zero(Tensor<const f16> a, int m) {
  auto fa = matrix_a<f16>(m, 16, 16);  // ERR:zero
  load(fa, a, 0u, 16u);
}
KILN_KERNEL(m_zero, "a, m = 0").cube_dim(32);

// A cube without whole planes.
void m_partial(Tensor<f32> c) {
  auto acc = accumulator<f32>(16, 16, 16);
  fill(acc, 1.0f);
  store(c, 0u, 16u, acc);
}
KILN_KERNEL(m_partial, "c").cube_dim(48);

// Picks its fragment shape by what the target runs: 32 x 32 tiles of f16 where the target has
// them, else plain f32 arithmetic; records its choice in the stored value.
void m_pick(Tensor<f32> c) {
  if (has_mma<f16>(32, 32, 16)) {
    auto acc = accumulator<f32>(32, 32, 16);
    fill(acc, 32.0f);
    store(c, 0u, 32u, acc);
  } else {
    c[unit_pos()] = -1.0f;
  }
}
KILN_KERNEL(m_pick, "c").cube_dim(32);

// The kernel of docs/dsl.md, "Matrices", as printed there.
void doc_matmul_f16(Tensor<const f16> a, Tensor<const f16> b, Tensor<f32> c) {
  auto fa = matrix_a<f16>(32, 32, 16);      // 32 x 16 of A, for m32 n32 k16 multiplies
  auto fb = matrix_b<f16>(32, 32, 16);      // 16 x 32 of B
  auto acc = accumulator<f32>(32, 32, 16);  // 32 x 32 of C
  u32 m = a.shape(0), k = a.shape(1), n = c.shape(1);
  u32 row0 = (cube_pos_y() * 2u + plane_pos() / 2u) * 32u;  // 4 planes: 2 x 2 tiles
  u32 col0 = (cube_pos_x() * 2u + plane_pos() % 2u) * 32u;
  u32 rows = select(row0 < m, m - row0, 0u), cols = select(col0 < n, n - col0, 0u);
  fill(acc, 0.0f);
  for_range(0u, k, 16u, [&](u32 k0) {
    load(fa, a, row0 * k + k0, k, rows, k - k0);  // only rows x (k - k0) elements are read
    load(fb, b, k0 * n + col0, n, k - k0, cols);
    mma(acc, fa, fb);  // acc += fa * fb
  });
  store(c, row0 * n + col0, n, rows, cols, acc);  // only the part inside C is written
}
KILN_KERNEL(doc_matmul_f16, "a: rank=2, b: rank=2, c: rank=2").cube_dim(128);

// A DSL helper that computes with operators inside kiln's header (wgmma_tile_index).
void m_helper_loc(Tensor<u32> out) {
  out[unit_pos()] = wgmma_tile_index<f16>(Swizzle::B128, 64, unit_pos(), 8u, Major::K);  // LOC:tile
}
KILN_KERNEL(m_helper_loc, "out").cube_dim(32);

}  // namespace

TEST_CASE("the kernel of docs/dsl.md traces to fragment ops", "[dsl][matrix]") {
  const std::string ir = test::traced_ir("doc_matmul_f16");
  CHECK_THAT(ir, Contains("alloc.frag : frag<a, f16, 32, 32, 16>") && Contains("frag.mma") &&
                     Contains("frag.store %c"));
}

TEST_CASE("fragment misuse is a trace error at the kernel's line", "[dsl][matrix]") {
  CHECK_THAT(test::trace_error("m_varying"),
             Contains(at("ERR:varying-index")) && Contains("differs between the units of a plane"));
  const std::string div = test::trace_error("m_divergent");
  CHECK_THAT(div, Contains(at("ERR:divergent-fill")) &&
                      Contains("'frag.fill' is under control flow that differs between the units "
                               "of a plane") &&
                      Contains(test::marker_loc(kFile, "ERR:divergent-if")));
  CHECK_THAT(test::trace_error("m_types"),
             Contains(at("ERR:types") + "'frag.mma' of f16 inputs accumulates in f32, not i32"));
  CHECK_THAT(test::trace_error("m_shape"),
             Contains(at("ERR:shape") + "frag<a, f16, 16, 16, 8>: k must be 16 or 32"));
  CHECK_THAT(test::trace_error("m_memory"),
             Contains(at("ERR:memory") + "'frag.load' of frag<a, f16, 16, 16, 16> needs memory "
                                         "of f16"));
  for (const char* m : {"0", "-16", "2000"}) {
    dsl::SpecOptions o;
    o.set["m"] = m;
    CHECK_THAT(test::trace_error("m_zero", o),
               Contains(at("ERR:zero") + "fragment shape " + m + "x16x16 is out of range"));
  }
  CHECK_THAT(test::trace_error("m_partial"),
             Contains("needs whole planes, but the cube has 48 units"));
}

TEST_CASE("kernels ask the target they are traced for which multiplies it runs", "[dsl][matrix]") {
  const dsl::KernelDef* def = dsl::Registry::global().find("m_pick");
  REQUIRE(def);
  auto sel = dsl::select(*def, {});
  REQUIRE(sel.ok());
  auto traced_for = [&](const char* name) {
    auto t = backend::parse_target(name);
    REQUIRE(t.ok());
    dsl::TraceRequest req = sel->request;
    req.target = backend::trace_target(*t);
    auto k = dsl::trace(*def, *sel->inst, req);
    INFO((k.ok() ? std::string() : k.error().message));
    REQUIRE(k.ok());
    return ir::print(*k);
  };
  // No target: "any", which runs every multiply.
  CHECK_THAT(test::traced_ir("m_pick"), Contains("alloc.frag : frag<acc, f32, 32, 32, 16>"));
  if (backend::find("cpu")) CHECK_THAT(traced_for("cpu"), Contains("alloc.frag"));
  CHECK_THAT(traced_for("sm_80"), Contains("alloc.frag"));
  CHECK_THAT(traced_for("sm_90a"), Contains("alloc.frag"));
  // sm_75 has no mma.sync of these kinds: the kernel takes its other path.
  const std::string turing = traced_for("sm_75");
  CHECK_THAT(turing, !Contains("alloc.frag") && Contains("const -1.0 : f32"));
  // A kernel that does not ask gets a trace error naming the target and the line.
  auto t = backend::parse_target("sm_75");
  REQUIRE(t.ok());
  const dsl::KernelDef* mm = dsl::Registry::global().find("m_types");
  auto msel = dsl::select(*mm, {});
  REQUIRE(msel.ok());
  dsl::TraceRequest req = msel->request;
  req.target = backend::trace_target(*t);
  auto k = dsl::trace(*mm, *msel->inst, req);
  REQUIRE(!k.ok());
  CHECK_THAT(k.error().message, Contains("is not available on sm_75: it multiplies f16 "
                                         "fragments in no shape; ask has_mma<T>(m, n, k)"));
  CHECK_THAT(k.error().message, Contains(kFile));
}

TEST_CASE("ops a DSL helper emits are located at the kernel line that called it", "[dsl][matrix]") {
  auto k = test::trace_kernel("m_helper_loc");
  INFO((k.ok() ? std::string() : k.error().message));
  REQUIRE(k.ok());
  // One source file: the kernel's; none of kiln's DSL headers.
  REQUIRE(k->files.size() == 1);
  CHECK_THAT(k->files[0], Catch::EndsWith("test_matrix_dsl.cpp"));
  const std::string tile = test::marker_loc(kFile, "LOC:tile");
  const uint32_t line = static_cast<uint32_t>(std::stoul(tile.substr(tile.rfind(':') + 1)));
  int at_call = 0;
  ir::walk(k->body, [&](const ir::Op& op) {
    if (op.loc.line == line) ++at_call;
  });
  CHECK(at_call >= 5);  // the swizzle's shifts, masks and products, all at the call
}
