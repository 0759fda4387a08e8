// Registration strings, the registry, comptime value types, and deterministic tracing.
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "compiler/dsl/dsl.h"
#include "kernels/kernels.h"
#include "tests/compiler/dsl/dsl_test_util.h"

using namespace kiln;
using namespace kiln::dsl;
using Catch::Contains;

namespace {

void r_missing_default(Tensor<f32> y, int n) {
  y[0] = cast<f32>(cast<u32>(n));
}
KILN_KERNEL(r_missing_default, "y, n");

void r_default_on_runtime(Tensor<f32> y) {
  y[0] = 1.0f;
}
KILN_KERNEL(r_default_on_runtime, "y = 3");

void r_bad_attr(Tensor<f32> y) {
  y[0] = 1.0f;
}
KILN_KERNEL(r_bad_attr, "y: line=3");

void r_bad_default(Tensor<f32> y, bool flag) {
  if_(flag, [&] { y[0] = 1.0f; });
}
KILN_KERNEL(r_bad_default, "y, flag = maybe");

void r_duplicate(Tensor<f32> y) {
  y[0] = 1.0f;
}
KILN_KERNEL(r_duplicate, "y");
KILN_KERNEL_AS("r_duplicate", r_duplicate, "y");

void r_ranged(Tensor<f32> y, int n, double scale) {
  y[0] = cast<f32>(cast<u32>(n)) * static_cast<float>(scale);
}
KILN_KERNEL(r_ranged, "y, n = 4 in 1..16, scale = 1 in -2.5..2.5");

void r_bad_range(Tensor<f32> y, int n) {
  y[0] = cast<f32>(cast<u32>(n));
}
KILN_KERNEL(r_bad_range, "y, n = 4 in 10..1");

void r_default_outside(Tensor<f32> y, int n) {
  y[0] = cast<f32>(cast<u32>(n));
}
KILN_KERNEL(r_default_outside, "y, n = 40 in 1..16");

// Cube sizes that follow comptime values, declared wrongly: a name that is not an integer
// comptime parameter, and a size that is not a cube.
void r_cube_rule(Tensor<f32> y, int n, float scale) {
  y[0] = cast<f32>(cast<u32>(n)) * scale;
}
KILN_KERNEL_AS("r_cube_misnamed", r_cube_rule, "y, n = 4, scale = 1")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("tiles")), 1, 1};
    });
KILN_KERNEL_AS("r_cube_float", r_cube_rule, "y, n = 4, scale = 1")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("scale")), 1, 1};
    });
KILN_KERNEL_AS("r_cube_sized", r_cube_rule, "y, n = 4, scale = 1")
    .cube_dim([](const ComptimeArgs& c) -> CubeDim {
      return {static_cast<uint32_t>(c.integer("n")), 1, 1};
    });

// C++ code in a kernel that throws at trace time (a vector sized by a comptime value).
void r_throws(Tensor<f32> y, int n) {
  std::vector<int> v;
  v.reserve(static_cast<size_t>(n));
  y[0] = 1.0f;
}
KILN_KERNEL(r_throws, "y, n = 1");

enum class Mode { Fast, Precise };
KILN_COMPTIME_ENUM(Mode, Fast, Precise)
struct Shape2 {
  int rows = 0;
  unsigned cols = 0;
};
KILN_COMPTIME_STRUCT(Shape2, rows, cols)

}  // namespace

TEST_CASE("registration problems are kept and reported when the kernel is used",
          "[dsl][registry]") {
  auto problem = [](const char* name) {
    const KernelDef* d = Registry::global().find(name);
    REQUIRE(d);
    return d->problem;
  };
  CHECK(problem("r_missing_default") ==
        "comptime parameter 'n' needs a default: write \"n = VALUE\"");
  CHECK(problem("r_default_on_runtime") ==
        "'y' is a runtime parameter (tensor); only comptime parameters take defaults");
  CHECK_THAT(problem("r_bad_attr"), Contains("'y': unknown or invalid attribute 'line=3'"));
  CHECK(problem("r_bad_default") == "default of 'flag': 'maybe' is not a valid bool");
  CHECK_THAT(test::trace_error("r_missing_default"),
             Contains("kernel 'r_missing_default' is not registered correctly: comptime "
                      "parameter 'n' needs a default"));
  // Two registrations of a name in one library: the second carries the problem, and it is the
  // one the name finds, so every use of the name reports it instead of picking one silently.
  std::vector<const KernelDef*> dups;
  for (const KernelDef* d : Registry::global().all())
    if (d->name == "r_duplicate") dups.push_back(d);
  REQUIRE(dups.size() == 2);
  CHECK(dups[0]->problem.empty());
  CHECK_THAT(dups[1]->problem, Contains("kernel 'r_duplicate' is registered twice"));
  CHECK(Registry::global().find("r_duplicate") == dups[1]);
  CHECK_THAT(test::trace_error("r_duplicate"), Contains("is registered twice"));
  CHECK_THAT(dups[1]->problem, Contains("KILN_KERNEL_AS"));
}

TEST_CASE("comptime parameters may declare the values they accept", "[dsl][registry]") {
  const KernelDef* d = Registry::global().find("r_ranged");
  REQUIRE(d);
  CHECK(d->problem.empty());
  const auto& p = d->instantiations[0].params;
  CHECK(p[1].min_value->format() == "1");
  CHECK(p[1].max_value->format() == "16");
  CHECK(test::trace_error("r_ranged").starts_with("(traced)"));
  for (const char* n : {"1", "16"}) {
    SpecOptions o;
    o.set["n"] = n;
    CHECK(test::trace_error("r_ranged", o).starts_with("(traced)"));
  }
  for (const char* n : {"0", "17", "-1", "2147483647"}) {
    INFO(n);
    SpecOptions o;
    o.set["n"] = n;
    CHECK_THAT(test::trace_error("r_ranged", o),
               Contains(fmt::format(
                   "comptime value n={}: kernel 'r_ranged': comptime parameter 'n' is {}, "
                   "outside the values it accepts, 1..16 (declared at "
                   "tests/compiler/dsl/test_registry.cpp:",
                   n, n)));
  }
  SpecOptions o;
  o.set["scale"] = "nan";
  CHECK_THAT(test::trace_error("r_ranged", o), Contains("'scale' is nan, outside"));
  o.set["scale"] = "-2.75";
  CHECK_THAT(test::trace_error("r_ranged", o), Contains("-2.5..2.5"));
  // trace() itself checks too, whatever built the request.
  auto sel = select(*d, {});
  REQUIRE(sel);
  sel->request.comptime[0] = ComptimeValue::of(99);
  auto k = trace(*d, *sel->inst, sel->request);
  REQUIRE_FALSE(k);
  CHECK_THAT(k.error().message, Contains("comptime parameter 'n' is 99"));
  CHECK_THAT(Registry::global().find("r_bad_range")->problem,
             Contains("the range of 'n' must be 'LOW..HIGH'"));
  CHECK_THAT(Registry::global().find("r_default_outside")->problem,
             Contains("the default of 'n' (40) is outside its range 1..16"));
}

TEST_CASE("C++ exceptions thrown by kernel code become trace errors", "[dsl][registry]") {
  SpecOptions o;
  o.set["n"] = "-1";
  const std::string e = test::trace_error("r_throws", o);
  CHECK_THAT(e, Contains("tests/compiler/dsl/test_registry.cpp:"));
  CHECK_THAT(e, Contains("kernel 'r_throws' threw a C++ exception") && Contains("with n=-1"));
  // The trace context is gone: the next trace works.
  CHECK(test::trace_error("r_throws").starts_with("(traced)"));
}

TEST_CASE("the example kernels are registered with their parameters", "[dsl][registry]") {
  const auto names = kernels::builtin_names();
  for (const char* want : {"axpy", "row_sum", "plane_sum", "histogram", "stencil2d",
                           "scale_generic", "poly_unrolled", "early_exit"}) {
    INFO(want);
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
    const KernelDef* d = Registry::global().find(want);
    REQUIRE(d);
    CHECK(d->problem.empty());
    CHECK_FALSE(d->description.empty());
  }
  const KernelDef* rs = Registry::global().find("row_sum");
  const auto& p = rs->instantiations[0].params;
  REQUIRE(p.size() == 3);
  CHECK(p[0].name == "in");
  CHECK(p[0].kind == ParamKind::Tensor);
  CHECK(p[0].const_qualified);
  CHECK(p[0].default_rank == 2);
  CHECK(p[2].kind == ParamKind::Comptime);
  CHECK(p[2].comptime_type == "int");
  CHECK(p[2].default_value->format() == "256");
  CHECK(Registry::global().find("scale_generic")->instantiations.size() == 6);
}

TEST_CASE("comptime value types parse, format and encode", "[dsl][comptime]") {
  CHECK(ComptimeTraits<int>::parse(" -12 ") == -12);
  CHECK_FALSE(ComptimeTraits<int>::parse("12x").has_value());
  CHECK_FALSE(ComptimeTraits<uint8_t>::parse("300").has_value());
  CHECK(ComptimeTraits<bool>::parse("true") == true);
  CHECK(ComptimeTraits<double>::parse("2.5") == 2.5);
  CHECK(ComptimeTraits<Mode>::parse("Precise") == Mode::Precise);
  CHECK(ComptimeTraits<Mode>::parse("Mode::Fast") == Mode::Fast);
  CHECK_FALSE(ComptimeTraits<Mode>::parse("Slow").has_value());
  CHECK(ComptimeTraits<Mode>::format(Mode::Precise) == "Precise");
  auto s = ComptimeTraits<Shape2>::parse("{cols=4, rows=-2}");
  REQUIRE(s.has_value());
  CHECK(s->rows == -2);
  CHECK(s->cols == 4u);
  CHECK(ComptimeTraits<Shape2>::format(*s) == "{rows=-2, cols=4}");
  CHECK_FALSE(ComptimeTraits<Shape2>::parse("{rows=1}").has_value());  // a field missing
  CHECK_FALSE(ComptimeTraits<Shape2>::parse("{rows=1, cols=2, x=3}").has_value());
  CHECK_FALSE(ComptimeTraits<Shape2>::parse("rows=1, cols=2").has_value());  // no braces

  // Type-erased values keep their type and encode their bytes.
  ComptimeValue v = ComptimeValue::of(*s);
  CHECK(v.type_name() == "Shape2");
  CHECK(v.get<Shape2>()->cols == 4u);
  CHECK(v.get<int>() == nullptr);
  uint8_t buf[16];
  KeyWriter w(buf, sizeof buf);
  v.encode(w);
  CHECK(w.size() == sizeof(int) + sizeof(unsigned));
  KeyWriter tiny(buf, 2);
  v.encode(tiny);
  CHECK(tiny.overflow());
}

TEST_CASE("tracing is deterministic", "[dsl][determinism]") {
  for (const KernelDef* d : Registry::global().all()) {
    if (!d->problem.empty()) continue;
    INFO(d->name);
    auto sel = dsl::select(*d, {});
    if (!sel.ok()) {  // a kernel whose cube size rule fails (r_cube_misnamed): the same error
      auto again = dsl::select(*d, {});
      REQUIRE_FALSE(again.ok());
      CHECK(sel.error().message == again.error().message);
      continue;
    }
    auto a = dsl::trace(*d, *sel->inst, sel->request);
    auto b = dsl::trace(*d, *sel->inst, sel->request);
    REQUIRE(a.ok() == b.ok());
    if (a.ok())
      CHECK(ir::print(*a) == ir::print(*b));
    else
      CHECK(a.error().message == b.error().message);
  }
}

TEST_CASE("the example kernels trace for several comptime values and line widths",
          "[dsl][examples]") {
  struct Case {
    const char* kernel;
    std::vector<std::pair<std::string, std::string>> set;
    std::vector<std::pair<std::string, int>> lines;
  };
  const std::vector<Case> cases = {
      {"axpy", {}, {{"x", 1}, {"y", 1}}},
      {"axpy", {}, {{"x", 8}, {"y", 8}}},
      {"axpy", {}, {{"x", 16}, {"y", 16}}},
      {"row_sum", {{"units", "32"}}, {}},
      {"row_sum", {{"units", "128"}}, {{"in", 4}}},
      {"row_sum", {{"units", "1024"}}, {{"in", 8}}},
      {"plane_sum", {{"max_planes", "8"}}, {}},
      {"histogram", {{"bins", "16"}}, {}},
      {"histogram", {{"bins", "1000"}}, {}},
      {"stencil2d", {}, {}},
      {"scale_generic", {}, {{"x", 2}}},
      {"poly_unrolled", {{"degree", "0"}}, {}},
      {"poly_unrolled", {{"degree", "20"}}, {{"x", 8}, {"y", 8}}},
      {"early_exit", {}, {{"x", 4}, {"y", 4}}},
  };
  for (const Case& c : cases) {
    dsl::SpecOptions o;
    for (const auto& [k, v] : c.set) o.set[k] = v;
    for (const auto& [k, v] : c.lines) o.line[k] = v;
    INFO(c.kernel);
    const std::string ir = test::traced_ir(c.kernel, o);
    CHECK_THAT(ir, Contains("kernel @" + std::string(c.kernel)));
  }
  // scale_generic in every element type it was instantiated for; its line is "max", which
  // `show` resolves against 128-bit vectors: 16 bytes per line.
  for (auto [t, lanes] : {std::pair{"f32", 4}, {"f64", 2}, {"f16", 8}, {"bf16", 8}}) {
    dsl::SpecOptions o;
    o.dtype["x"] = t;
    CHECK_THAT(test::traced_ir("scale_generic", o),
               Contains(fmt::format("%x: tensor<{}x{}, 1>, %factor: {}", t, lanes, t)));
  }
  // A comptime-unrolled loop: degree 20 gives 20 fmas and no loop.
  dsl::SpecOptions o;
  o.set["degree"] = "20";
  const std::string poly = test::traced_ir("poly_unrolled", o);
  size_t fmas = 0;
  for (size_t p = poly.find("= fma "); p != std::string::npos; p = poly.find("= fma ", p + 1))
    ++fmas;
  CHECK(fmas == 20);
  CHECK_THAT(poly, !Contains("for %"));
}

TEST_CASE("a cube size function that asks for a bad name or gives no cube is an error",
          "[dsl][registry]") {
  CHECK_THAT(test::trace_error("r_cube_misnamed"),
             Contains("kernel 'r_cube_misnamed': its cube size function: there is no integer "
                      "comptime parameter 'tiles' (there are: n)"));
  CHECK_THAT(test::trace_error("r_cube_float"),
             Contains("'scale' is a float comptime parameter, not an integer"));
  // The rule itself works: n = 8 traces an 8-unit cube.
  SpecOptions eight;
  eight.set["n"] = "8";
  const KernelDef* d = Registry::global().find("r_cube_sized");
  REQUIRE(d);
  auto sel = select(*d, eight);
  REQUIRE(sel.ok());
  CHECK(sel->request.cube_dim == CubeDim{8, 1, 1});
  for (const char* n : {"0", "-1", "2000"}) {
    INFO(n);
    SpecOptions o;
    o.set["n"] = n;
    CHECK_THAT(test::trace_error("r_cube_sized", o),
               Contains("its cube size function gives") && Contains("a cube has 1 to 1024 units"));
  }
}
