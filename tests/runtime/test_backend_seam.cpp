// The backend seam, proven from outside: a plugin (tests/backend/mirror_backend.cpp) registers a
// backend and a device family; the CLI's path (parse a target, emit a stage), the runtime (open,
// compile, cache, launch, check) and the device list reach them through the tables alone.
#include <catch2/catch.hpp>

#include "compiler/backend.h"
#include "kernels/run.h"
#include "tests/compiler/dsl/dsl_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

using Catch::Contains;

void load_mirror() {
  auto names = dsl::load_plugin(KILN_MIRROR_PLUGIN);
  INFO((names.ok() ? std::string() : names.error().message));
  REQUIRE(names.ok());
  REQUIRE(backend::find("mirror"));
}

TEST_CASE("a backend from a plugin is reached by its target and its stages", "[backend]") {
  load_mirror();
  auto t = backend::parse_target("mirror");
  REQUIRE(t.ok());
  CHECK(t->backend->name() == "mirror");
  std::vector<std::string> names;
  for (const backend::Stage& s : backend::stages(*t->backend)) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"ir", "ir-opt", "summary"});
  auto k = test::trace_kernel("axpy");
  REQUIRE(k.ok());
  auto summary = backend::emit_stage(*t->backend, *k, "summary", *t, {});
  REQUIRE(summary.ok());
  CHECK_THAT(*summary, Contains("kernel axpy:") && Contains("units"));
  auto bad = backend::emit_stage(*t->backend, *k, "asm", *t, {});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Contains("the stages of 'mirror' are: ir, ir-opt, summary"));
  // A cube larger than the target allows is an error naming the limit.
  dsl::SpecOptions big;
  big.cube_dim = std::array<uint32_t, 3>{512, 1, 1};
  auto k512 = test::trace_kernel("axpy", big);
  REQUIRE(k512.ok());
  auto too_big = backend::emit_stage(*t->backend, *k512, "summary", *t, {});
  REQUIRE_FALSE(too_big.ok());
  CHECK_THAT(too_big.error().message,
             Contains("a cube of 512 units; mirror allows at most 256 units per cube"));
  // An op the target lacks is an error naming the op, the target and the DSL line.
  auto printing = test::trace_kernel("rt_print_assert");
  REQUIRE(printing.ok());
  auto lacks = backend::emit_stage(*t->backend, *printing, "summary", *t, {});
  REQUIRE_FALSE(lacks.ok());
  CHECK(lacks.error().kind == ErrorKind::Unsupported);
  CHECK_THAT(lacks.error().message,
             Contains("tests/runtime/runtime_kernels.cpp:") &&
                 Contains("'print' is not supported on mirror: the mirror backend has no "
                          "device-side print"));
}

TEST_CASE("a device from a plugin runs kernels through the runtime", "[backend][runtime]") {
  load_mirror();
  test::ScopedCache cache;
  bool listed = false;
  for (const DeviceEntry& d : devices()) listed |= d.name == "mirror" && d.available;
  CHECK(listed);
  auto rt = Runtime::open("mirror");
  INFO((rt.ok() ? std::string() : rt.error().message));
  REQUIRE(rt.ok());
  CHECK(rt->device().name == "mirror");
  kernels::RunConfig config;
  config.repeat = 1;
  config.seed = 3;
  auto r = kernels::run(*rt, "axpy", config);
  INFO((r.ok() ? std::string() : r.error().message));
  REQUIRE(r.ok());
  CHECK(r->passed);
  REQUIRE(r->compiled);
  bool summary_timed = false;
  for (const auto& s : r->compile.stages) summary_timed |= s.stage == "summary";
  CHECK(summary_timed);  // the report names the backend's own stages
  // Its entries live in its own folder of the disk cache.
  auto entries = DiskCache::global()->list(true);
  REQUIRE(entries.ok());
  bool mirror_entry = false;
  for (const auto& e : *entries) mirror_entry |= e.kind == "mirror" && e.problem.empty();
  CHECK(mirror_entry);
}

}  // namespace
}  // namespace kiln
