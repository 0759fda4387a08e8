// The random-number kernels (uniform, normal) and their host entry points (random.h): one unit
// per Philox block of four elements.
#include "kernels/lib/random.h"

#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "compiler/dsl/dsl.h"
#include "kernels/lib/philox.h"
#include "kernels/run.h"

using namespace kiln::dsl;

namespace {

// The block of unit `block` for `seed` and `offset`.
std::array<Val<uint32_t>, 4> block_words(u32 block, u64 seed, u64 offset) {
  return kiln::lib::philox4x32(block, u32(0u), cast<uint32_t>(offset),
                               cast<uint32_t>(offset >> uint64_t{32}), cast<uint32_t>(seed),
                               cast<uint32_t>(seed >> uint64_t{32}));
}

// Unit b fills the elements 4b .. 4b + 3 of out that exist with the four numbers `values` makes
// of block b's words.
template <class T, class F>
void fill_by_block(Tensor<T>& out, u64 seed, u64 offset, F&& values) {
  u32 n = out.len();
  u32 block = absolute_pos();
  u32 i0 = block * 4u;
  if_(i0 < n, [&] {
    const std::array<Val<float>, 4> v = values(block_words(block, seed, offset));
    for (uint32_t j = 0; j < 4; ++j)
      if_(i0 + j < n, [&] { out[i0 + j] = cast<host_of_t<T>>(v[j]); });
  });
}

}  // namespace

template <class T>
void uniform(Tensor<T> out, u64 seed, u64 offset, f32 low, f32 scale) {
  fill_by_block(out, seed, offset, [&](const std::array<Val<uint32_t>, 4>& r) {
    auto u = [&](int j) { return Val<float>(fma(kiln::lib::uniform01(r[j]), scale, low)); };
    return std::array<Val<float>, 4>{u(0), u(1), u(2), u(3)};
  });
}
KILN_KERNEL_GENERIC(uniform, "out: line=1, seed, offset, low, scale", f32, f16, bf16)
    .cube_dim(256)
    .describe("uniform random numbers in [low, low + scale) from Philox 4x32-10 (kiln::lib)");

template <class T>
void normal(Tensor<T> out, u64 seed, u64 offset, f32 mean, f32 stddev) {
  fill_by_block(out, seed, offset, [&](const std::array<Val<uint32_t>, 4>& r) {
    auto [z0, z1] = kiln::lib::box_muller(r[0], r[1]);
    auto [z2, z3] = kiln::lib::box_muller(r[2], r[3]);
    auto at = [&](const Val<float>& z) { return Val<float>(fma(z, stddev, mean)); };
    return std::array<Val<float>, 4>{at(z0), at(z1), at(z2), at(z3)};
  });
}
KILN_KERNEL_GENERIC(normal, "out: line=1, seed, offset, mean, stddev", f32, f16, bf16)
    .cube_dim(256)
    .describe("normal random numbers (Box-Muller over Philox 4x32-10, kiln::lib)");

namespace {

kiln::Dim3 blocks_of(const kiln::kernels::RunData& d) {
  return kiln::Dim3(static_cast<uint32_t>(
      kiln::kernels::ceil_div(kiln::kernels::ceil_div(d.numel("out"), 4), 256)));
}

// The words of element i's block, on the host.
std::array<uint32_t, 4> host_block(int64_t i, uint64_t seed, uint64_t offset) {
  return kiln::lib::host::philox4x32(
      {static_cast<uint32_t>(i / 4), 0u, static_cast<uint32_t>(offset),
       static_cast<uint32_t>(offset >> 32)},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

}  // namespace

KILN_RUN(uniform)
    .shape("out", {1 << 22})
    .scalar("seed", 20261203)
    .scalar("offset", 0)
    .scalar("low", -2.0)
    .scalar("scale", 4.0)
    .cubes(blocks_of)
    .tolerance(0, 0)
    .reference([](kiln::kernels::RunData& d) {
      const auto seed = static_cast<uint64_t>(d.scalar("seed"));
      const auto offset = static_cast<uint64_t>(d.scalar("offset"));
      const auto low = static_cast<float>(d.scalar("low"));
      const auto scale = static_cast<float>(d.scalar("scale"));
      auto& out = d["out"];
      for (size_t i = 0; i < out.size(); ++i) {
        const auto w = host_block(static_cast<int64_t>(i), seed, offset)[i % 4];
        out[i] = d.round("out", std::fma(kiln::lib::host::uniform01(w), scale, low));
      }
    });

KILN_RUN(normal)
    .shape("out", {1 << 22})
    .scalar("seed", 20261203)
    .scalar("offset", 0)
    .scalar("mean", 0.0)
    .scalar("stddev", 1.0)
    .cubes(blocks_of)
    .tolerance(1e-5, 1e-5)
    .reference([](kiln::kernels::RunData& d) {
      const auto seed = static_cast<uint64_t>(d.scalar("seed"));
      const auto offset = static_cast<uint64_t>(d.scalar("offset"));
      auto& out = d["out"];
      for (size_t i = 0; i < out.size(); i += 4) {
        const auto w = host_block(static_cast<int64_t>(i), seed, offset);
        for (size_t pair = 0; pair < 2; ++pair) {
          const auto [z0, z1] = kiln::lib::host::box_muller(w[2 * pair], w[2 * pair + 1]);
          for (size_t k = 0; k < 2; ++k)
            if (i + 2 * pair + k < out.size())
              out[i + 2 * pair + k] =
                  d.round("out", d.scalar("mean") + d.scalar("stddev") * (k ? z1 : z0));
        }
      }
    });

namespace kiln::lib {

namespace {

Status fill(Runtime& rt, Tensor& out, const char* kernel, RandomOptions o, const char* a_name,
            double a, const char* b_name, double b) {
  auto where = [&](const std::string& what) {
    return Error(ErrorKind::InvalidArgument, fmt::format("kiln::lib::{}: {}", kernel, what));
  };
  const ir::ElemType e = out.dtype();
  if (e != ir::ElemType::F32 && e != ir::ElemType::F16 && e != ir::ElemType::BF16)
    return where(fmt::format("the tensor 'out' holds {}; random numbers fill f32, f16 or bf16",
                             ir::elem_name(e)));
  if (!out.is_contiguous())
    return where("the tensor 'out' is not contiguous; fill a contiguous tensor and copy it");
  if (out.numel() >= (int64_t{1} << 32))
    return where(
        fmt::format("the tensor 'out' has {} elements; at most 2^32 - 1 per call (fill "
                    "it in slices, advancing the offset)",
                    out.numel()));
  // The kernel takes f32: what does not fit one (high - low included) would fill out with
  // infinities.
  if (!std::isfinite(static_cast<float>(a)) || !std::isfinite(static_cast<float>(b)))
    return where(
        fmt::format("{} {} and {} {} must be finite as f32 values (at most {:g} in "
                    "magnitude)",
                    a_name, a, b_name, b, std::numeric_limits<float>::max()));
  if (out.numel() == 0) return {};
  KILN_ASSIGN(const Kernel k, rt.kernel(kernel));
  const auto blocks = static_cast<uint32_t>((out.numel() + 4 * 256 - 1) / (4 * 256));
  return rt.launch(k, Dim3(blocks), Dim3(256), out, o.seed, o.offset, static_cast<float>(a),
                   static_cast<float>(b));
}

}  // namespace

Status uniform(Runtime& rt, Tensor& out, RandomOptions options, double low, double high) {
  if (low > high)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kiln::lib::uniform: low ({}) is above high ({})", low, high));
  return fill(rt, out, "uniform", options, "low", low, "high - low", high - low);
}

Status normal(Runtime& rt, Tensor& out, RandomOptions options, double mean, double stddev) {
  if (stddev < 0)
    return Error(ErrorKind::InvalidArgument,
                 fmt::format("kiln::lib::normal: the standard deviation {} is negative", stddev));
  return fill(rt, out, "normal", options, "mean", mean, "stddev", stddev);
}

}  // namespace kiln::lib
