// kiln::lib::matmul (kernels/lib/matmul.cpp) on the CPU against OpenBLAS sgemm, measured in the
// same run on all threads: square sizes, tall-skinny products and batches of small ones. The
// time of a kiln call includes packing both operands. Results are checked against OpenBLAS
// first. Ratios above 1 mean kiln is faster. tools/bench/torch_matmul.py measures PyTorch on the
// same shapes (it is not linked here).
//   matmul_bench [--quick] [--n N] [--csv FILE]
// Run it without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE set: they make OpenBLAS pick slower kernels.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lib/matmul.h"
#include "runtime/runtime.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/matmul_peers.h"

using namespace kiln;
using bench::must;

namespace {

struct Shape {
  const char* kind;
  int64_t batch, m, n, k;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int64_t only = 0;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--n" && i + 1 < argc) {
      only = std::atoll(argv[++i]);
    } else if (arg == "--csv" && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      bench::die("usage: matmul_bench [--quick] [--n N] [--csv FILE]");
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line through a pipe (matmul_vs_peers.sh)
  (void)kernels::builtin_names();
  Runtime rt = must(Runtime::open("cpu"));
  std::printf("matmul_bench: %s, %d threads%s\n", rt.device().description.c_str(),
              rt.device().cores, quick ? " (quick sizes)" : "");
  std::printf("peak f32 FMA rate (a tight loop of independent FMAs, all threads): %.0f GFLOP/s\n",
              bench::peak_fma_gflops());
  if (!bench::have_openblas()) {
    std::printf("OpenBLAS: not found at build time (install libopenblas-dev); no ratios\n");
  } else {
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::printf("OpenBLAS: %s kernels%s%s\n", bench::openblas_core(),
                env ? ", chosen by OPENBLAS_CORETYPE=" : " (its own choice)", env ? env : "");
  }
  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv_path && !csv) bench::die(std::string("cannot write ") + csv_path);
  if (csv) std::fprintf(csv, "kind,batch,m,n,k,kiln_gflops,openblas_gflops\n");
  std::vector<Shape> shapes;
  for (int64_t n : quick ? std::vector<int64_t>{256, 512}
                         : std::vector<int64_t>{256, 512, 1024, 1536, 2048, 3072, 4096})
    shapes.push_back({"square", 1, n, n, n});
  if (only > 0) shapes = {{"square", 1, only, only, only}};
  if (!quick && only == 0) {
    shapes.push_back({"tall-skinny", 1, 16384, 64, 1024});
    shapes.push_back({"tall-skinny", 1, 8192, 1024, 64});
    shapes.push_back({"batched", 256, 64, 64, 64});
    shapes.push_back({"batched", 64, 128, 128, 128});
  }
  std::printf("\n%-12s %6s %6s %6s %6s  %10s %10s  %10s %10s  %8s\n", "shape", "batch", "m", "n",
              "k", "kiln ms", "GFLOP/s", "sgemm ms", "GFLOP/s", "kiln/blas");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    const auto sa = static_cast<size_t>(s.batch * s.m * s.k),
               sb = static_cast<size_t>(s.batch * s.k * s.n),
               sc = static_cast<size_t>(s.batch * s.m * s.n);
    std::vector<float> a(sa), b(sb), c(sc), ref(sc);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    Tensor ta = must(rt.wrap(a.data(), ir::ElemType::F32, std::vector<int64_t>{s.batch, s.m, s.k}));
    Tensor tb = must(rt.wrap(b.data(), ir::ElemType::F32, std::vector<int64_t>{s.batch, s.k, s.n}));
    Tensor tc = must(rt.wrap(c.data(), ir::ElemType::F32, std::vector<int64_t>{s.batch, s.m, s.n}));
    const double flops = 2.0 * static_cast<double>(s.batch * s.m) * static_cast<double>(s.n * s.k);
    const int reps = std::max(1, static_cast<int>(2e9 / flops));
    auto kiln_once = [&] {
      must(lib::matmul(rt, ta, tb, tc));
      must(rt.sync());
    };
    kiln_once();  // compiles
    const double ks = bench::median_seconds(kiln_once, reps, 7);
    double bs = 0;
    if (bench::have_openblas()) {
      auto sgemm = [&] {
        for (int64_t i = 0; i < s.batch; ++i)
          bench::peer_sgemm(a.data() + i * s.m * s.k, b.data() + i * s.k * s.n,
                            ref.data() + i * s.m * s.n, s.m, s.n, s.k);
      };
      sgemm();
      bs = bench::median_seconds(sgemm, reps, 7);
      // OpenBLAS's threads spin for a while after a call, which would slow what runs next.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const double e = bench::max_rel_error(c, ref);
      if (e > 1e-4)
        bench::die(std::string("kiln's matmul differs from sgemm by ") + std::to_string(e) + " (" +
                   s.kind + ")");
    }
    const double kg = flops / ks / 1e9, bg = bs > 0 ? flops / bs / 1e9 : 0;
    std::printf("%-12s %6lld %6lld %6lld %6lld  %10.3f %10.1f  %10.3f %10.1f  %8.2f\n", s.kind,
                static_cast<long long>(s.batch), static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), ks * 1e3, kg, bs * 1e3,
                bg, bg > 0 ? kg / bg : 0.0);
    if (csv)
      std::fprintf(csv, "%s,%lld,%lld,%lld,%lld,%.2f,%.2f\n", s.kind,
                   static_cast<long long>(s.batch), static_cast<long long>(s.m),
                   static_cast<long long>(s.n), static_cast<long long>(s.k), kg, bg);
  }
  if (csv) std::fclose(csv);
  return 0;
}
