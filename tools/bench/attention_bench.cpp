// kiln::lib::attention on one shape, timed: the median milliseconds of a call (after a warm-up
// call that compiles), and its throughput (4 B H Sq Sk D flops; causal counts them all, as
// PyTorch's benchmarks do). tools/bench/attention_vs_torch.sh runs it next to PyTorch's
// scaled_dot_product_attention on the same shapes.
//   attention_bench B H S D causal(0|1) dtype(bf16|f16) [device]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ir/float16.h"
#include "kernels/kernels.h"
#include "kernels/lib/attention.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"

using namespace kiln;
using kiln::bench::die;
using kiln::bench::must;

int main(int argc, char** argv) {
  if (argc < 7) die("usage: attention_bench B H S D causal(0|1) dtype(bf16|f16) [device]");
  const int64_t B = std::atoll(argv[1]), H = std::atoll(argv[2]), S = std::atoll(argv[3]),
                D = std::atoll(argv[4]);
  const bool causal = std::atoi(argv[5]) != 0;
  const std::string dtype = argv[6];
  const ir::ElemType t = dtype == "f16" ? ir::ElemType::F16 : ir::ElemType::BF16;
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open(argc > 7 ? argv[7] : "cpu"));
  const std::vector<int64_t> shape{B, H, S, D};
  const size_t n = static_cast<size_t>(B * H * S * D);
  std::mt19937 r(7);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<uint16_t> host(n);
  Tensor q = must(rt.empty(t, shape)), k = must(rt.empty(t, shape)), v = must(rt.empty(t, shape));
  Tensor o = must(rt.empty(t, shape));
  for (Tensor* x : {&q, &k, &v}) {
    for (auto& h : host) h = t == ir::ElemType::F16 ? f16_bits(d(r)) : bf16_bits(d(r));
    must(x->upload(std::span<const uint16_t>(host)));
  }
  lib::AttentionOptions opt;
  opt.causal = causal;
  auto call = [&] {
    must(lib::attention(rt, q, k, v, o, opt));
    must(rt.sync());
  };
  call();
  const double flops = 4.0 * static_cast<double>(B * H * S * S * D);
  const int samples = flops > 2e11 ? 3 : flops > 2e10 ? 5 : 9;
  const double s = bench::median_seconds(call, 1, samples);
  std::printf("%.3f %.1f\n", s * 1e3, flops / s / 1e9);
  return 0;
}
