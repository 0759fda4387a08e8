/* The same kernels from C, through kiln's C API (runtime/api/kiln.h): load the plugin, launch
 * row_sum by name with its comptime `units` given by name, check the sums.
 * `app_c [PLUGIN]`: the plugin built next to it by default. */
#include <stdio.h>

#include "runtime/api/kiln.h"

static int fail(const char* what, kiln_status s) {
  fprintf(stderr, "app_c: %s: %s: %s\n", what, kiln_status_name(s), kiln_last_error());
  return 1;
}

int main(int argc, char** argv) {
  kiln_status s;
  size_t registered = 0;
  if ((s = kiln_load_plugin(argc > 1 ? argv[1] : MY_KERNELS, &registered)))
    return fail("plugin", s);
  kiln_runtime* rt = NULL;
  if ((s = kiln_runtime_open("cpu", 0, &rt))) return fail("open", s);

  enum { ROWS = 50, COLS = 300 };
  static float in_host[ROWS * COLS];
  for (int i = 0; i < ROWS * COLS; ++i) in_host[i] = (float)(i % COLS);
  const int64_t in_shape[2] = {ROWS, COLS}, out_shape[1] = {ROWS};
  kiln_tensor *in = NULL, *out = NULL;
  if ((s = kiln_tensor_empty(rt, KILN_F32, in_shape, 2, &in))) return fail("tensor", s);
  if ((s = kiln_tensor_empty(rt, KILN_F32, out_shape, 1, &out))) return fail("tensor", s);
  if ((s = kiln_tensor_upload(in, in_host, sizeof in_host))) return fail("upload", s);

  kiln_kernel* row_sum = NULL;
  if ((s = kiln_kernel_find(rt, "row_sum", &row_sum))) return fail("kernel", s);
  kiln_arg args[3] = {{0}};
  args[0].kind = KILN_ARG_TENSOR;
  args[0].value.tensor = in;
  args[1].kind = KILN_ARG_TENSOR;
  args[1].value.tensor = out;
  args[2].name = "units"; /* a comptime value, by name */
  args[2].kind = KILN_ARG_INT;
  args[2].value.i = 128;
  const uint32_t cubes[3] = {ROWS, 1, 1}, cube_dim[3] = {128, 1, 1};
  if ((s = kiln_launch(rt, row_sum, cubes, cube_dim, args, 3, NULL))) return fail("launch", s);
  if ((s = kiln_sync(rt))) return fail("sync", s);

  float sums[ROWS];
  if ((s = kiln_tensor_download(out, sums, sizeof sums))) return fail("download", s);
  const float want = (float)(COLS * (COLS - 1) / 2);
  for (int r = 0; r < ROWS; ++r)
    if (sums[r] != want) {
      fprintf(stderr, "app_c: row %d sums to %g, want %g\n", r, sums[r], want);
      return 1;
    }
  printf("app_c: row_sum from C is right (%zu kernels in the plugin)\n", registered);
  kiln_kernel_release(row_sum);
  kiln_tensor_release(in);
  kiln_tensor_release(out);
  kiln_runtime_release(rt);
  return 0;
}
