// kiln::lib::attention on one shape, timed: the median milliseconds of a call (after a warm-up
// call that compiles), and its throughput (4 B H Sq Sk D flops; causal counts them all, as
// PyTorch's benchmarks do). With bwd, kiln::lib::attention_backward instead (after one forward
// for out and the log-sum-exp; 10 B H Sq Sk D flops, FlashAttention's convention). With decode,
// one query per head against a cache of S keys of H / 4 key heads (grouped-query attention),
// and the second number is the rate at which K and V are read, in GB/s.
// tools/bench/attention_vs_torch.sh runs it next to PyTorch's scaled_dot_product_attention on
// the same shapes.
//   attention_bench B H S D causal(0|1) dtype(bf16|f16|f32) [device] [fwd|bwd|decode]
// (f32 inputs run on the CPU only).
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
  if (argc < 7)
    die("usage: attention_bench B H S D causal(0|1) dtype(bf16|f16|f32) [device] "
        "[fwd|bwd|decode]");
  const int64_t B = std::atoll(argv[1]), H = std::atoll(argv[2]), S = std::atoll(argv[3]),
                D = std::atoll(argv[4]);
  const bool causal = std::atoi(argv[5]) != 0;
  const std::string dtype = argv[6];
  const ir::ElemType t = dtype == "f16"   ? ir::ElemType::F16
                         : dtype == "f32" ? ir::ElemType::F32
                                          : ir::ElemType::BF16;
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open(argc > 7 ? argv[7] : "cpu"));
  const std::string pass = argc > 8 ? argv[8] : "fwd";
  const bool backward = pass == "bwd", decode = pass == "decode";
  const int64_t Sq = decode ? 1 : S, Hk = decode ? std::max<int64_t>(H / 4, 1) : H;
  const std::vector<int64_t> shape{B, H, Sq, D}, kv_shape{B, Hk, S, D};
  std::mt19937 r(7);
  std::uniform_real_distribution<double> d(-1, 1);
  // x filled with uniform numbers in [-1, 1) of its type.
  auto fill = [&](Tensor& x) {
    if (t == ir::ElemType::F32) {
      std::vector<float> host(static_cast<size_t>(x.numel()));
      for (auto& h : host) h = static_cast<float>(d(r));
      must(x.upload(std::span<const float>(host)));
      return;
    }
    std::vector<uint16_t> host(static_cast<size_t>(x.numel()));
    for (auto& h : host) h = t == ir::ElemType::F16 ? f16_bits(d(r)) : bf16_bits(d(r));
    must(x.upload(std::span<const uint16_t>(host)));
  };
  Tensor q = must(rt.empty(t, shape)), k = must(rt.empty(t, kv_shape)),
         v = must(rt.empty(t, kv_shape));
  Tensor o = must(rt.empty(t, shape));
  for (Tensor* x : {&q, &k, &v}) fill(*x);
  lib::AttentionOptions opt;
  opt.causal = causal;
  Tensor lse = must(rt.empty(ir::ElemType::F32, {B, H, Sq}));
  Tensor dout = must(rt.empty(t, shape)), dq = must(rt.empty(t, shape)),
         dk = must(rt.empty(t, shape)), dv = must(rt.empty(t, shape));
  if (backward) {
    fill(dout);
    opt.lse = &lse;
    must(lib::attention(rt, q, k, v, o, opt));
  }
  auto call = [&] {
    if (backward)
      must(lib::attention_backward(rt, q, k, v, o, dout, lse, dq, dk, dv, opt));
    else
      must(lib::attention(rt, q, k, v, o, opt));
    must(rt.sync());
  };
  call();
  const double flops = (backward ? 10.0 : 4.0) * static_cast<double>(B * H * Sq * S * D);
  const int samples = decode ? 15 : flops > 2e11 ? 3 : flops > 2e10 ? 5 : 9;
  const double s = bench::median_seconds(call, 1, samples);
  const double kv_bytes = 2.0 * static_cast<double>(k.numel() * k.element_bytes());
  std::printf("%.3f %.1f\n", s * 1e3, (decode ? kv_bytes : flops) / s / 1e9);
  return 0;
}
