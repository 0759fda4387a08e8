// The other way to use a kernel library: link it. Its kernels register when the program
// starts, though nothing here calls into the library; kiln_add_kernels keeps it linked even
// under --as-needed (which this program's link asks for, as Ubuntu's compilers do by default).
// Exits 0 when the project's axpy (not kiln's example of the same name) runs right.
#include <cstdio>
#include <vector>

#include "runtime/runtime.h"

int main() {
  auto rt = kiln::Runtime::open("cpu");
  if (!rt) return std::fprintf(stderr, "app_linked: %s\n", rt.error().message.c_str()), 1;
  auto axpy = rt->kernel("axpy");
  if (!axpy) return std::fprintf(stderr, "app_linked: %s\n", axpy.error().message.c_str()), 1;
  if (axpy->def().file != "my_kernels.cpp") {
    std::fprintf(stderr, "app_linked: 'axpy' is the one of %s, not of my_kernels.cpp\n",
                 axpy->def().file.c_str());
    return 1;
  }
  const std::vector<float> hx(1024, 3.0f), hy(1024, 1.0f);
  auto x = rt->empty(kiln::ir::ElemType::F32, {1024});
  auto y = rt->empty(kiln::ir::ElemType::F32, {1024});
  if (!x || !y || !x->upload(std::span<const float>(hx)) || !y->upload(std::span<const float>(hy)))
    return std::fprintf(stderr, "app_linked: cannot make the tensors\n"), 1;
  if (auto st = rt->launch(*axpy, 1, 256, *x, *y, 2.0f); !st)
    return std::fprintf(stderr, "app_linked: %s\n", st.error().message.c_str()), 1;
  std::vector<float> out(1024);
  if (!y->download(std::span<float>(out)))
    return std::fprintf(stderr, "app_linked: download failed\n"), 1;
  for (float v : out)
    if (v != 7.0f) return std::fprintf(stderr, "app_linked: got %g, expected 7\n", v), 1;
  std::printf("app_linked: the linked library's axpy ran right\n");
  return 0;
}
