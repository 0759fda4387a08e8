/* The C API from C (compiled as C11): devices, a runtime, tensors, kernels by name, launches
 * with positional and named arguments, DLPack in both directions with a deleter that runs
 * exactly once, streams, faults at sync, the cache. Exits 0 when every check holds; each
 * failed check prints its line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/kiln.h"

static int failures = 0;
#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      fprintf(stderr, "test_capi.c:%d: CHECK(%s) failed; last error: %s\n", __LINE__, #cond, \
              kiln_last_error());                                                            \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)
#define REQUIRE_OK(expr)                                                                     \
  do {                                                                                       \
    kiln_status s_ = (expr);                                                                 \
    if (s_ != KILN_OK) {                                                                     \
      fprintf(stderr, "test_capi.c:%d: %s: %s: %s\n", __LINE__, #expr, kiln_status_name(s_), \
              kiln_last_error());                                                            \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

/* A DLPack producer of our own: float memory owned by this file, a deleter that counts. */
static int deleted = 0;
typedef struct {
  float* data;
  int64_t shape[2], strides[2];
} Owned;
static void count_delete(DLManagedTensorVersioned* self) {
  Owned* o = (Owned*)self->manager_ctx;
  free(o->data);
  free(o);
  free(self);
  ++deleted;
}
static DLManagedTensorVersioned* make_managed(int64_t n, uint8_t code, uint8_t bits,
                                              uint64_t flags) {
  DLManagedTensorVersioned* m = calloc(1, sizeof *m);
  Owned* o = calloc(1, sizeof *o);
  o->data = calloc((size_t)n, sizeof(float));
  for (int64_t i = 0; i < n; ++i) o->data[i] = (float)i;
  o->shape[0] = n;
  m->version.major = 1;
  m->version.minor = 0;
  m->manager_ctx = o;
  m->deleter = count_delete;
  m->flags = flags;
  m->dl_tensor.data = o->data;
  m->dl_tensor.device.device_type = kDLCPU;
  m->dl_tensor.ndim = 1;
  m->dl_tensor.dtype.code = code;
  m->dl_tensor.dtype.bits = bits;
  m->dl_tensor.dtype.lanes = 1;
  m->dl_tensor.shape = o->shape;
  return m;
}

static int released = 0;
static void count_release(void* ctx) {
  (void)ctx;
  ++released;
}

int main(void) {
  CHECK(strlen(kiln_version()) > 0);

  /* Devices: the CPU is always there. */
  size_t count = 0;
  REQUIRE_OK(kiln_devices(NULL, 0, &count));
  CHECK(count >= 1);
  kiln_device_info infos[8];
  REQUIRE_OK(kiln_devices(infos, 8, &count));
  int have_cpu = 0;
  for (size_t i = 0; i < count && i < 8; ++i)
    have_cpu |= strcmp(infos[i].name, "cpu") == 0 && infos[i].available;
  CHECK(have_cpu);

  /* Errors: a status, and a message that says what to do. */
  kiln_runtime* nope = NULL;
  CHECK(kiln_runtime_open("tpu:0", 0, &nope) != KILN_OK);
  CHECK(nope == NULL);
  CHECK(strstr(kiln_last_error(), "cuda-emu") != NULL);
  CHECK(kiln_tensor_empty(NULL, KILN_F32, NULL, 0, NULL) == KILN_INVALID_ARGUMENT);

  kiln_runtime* rt = NULL;
  REQUIRE_OK(kiln_runtime_open("cpu", 1, &rt)); /* checked: faults come back from sync */

  /* y = 2 * x + y through axpy, positional arguments. */
  enum { N = 1000 };
  float hx[N], hy[N];
  for (int i = 0; i < N; ++i) {
    hx[i] = (float)i;
    hy[i] = 1.0f;
  }
  const int64_t shape[1] = {N};
  kiln_tensor *x = NULL, *y = NULL;
  REQUIRE_OK(kiln_tensor_empty(rt, KILN_F32, shape, 1, &x));
  REQUIRE_OK(kiln_tensor_empty(rt, KILN_F32, shape, 1, &y));
  REQUIRE_OK(kiln_tensor_upload(x, hx, sizeof hx));
  REQUIRE_OK(kiln_tensor_upload(y, hy, sizeof hy));
  CHECK(kiln_tensor_upload(y, hy, 3) == KILN_INVALID_ARGUMENT); /* the wrong size */
  kiln_kernel* axpy = NULL;
  REQUIRE_OK(kiln_kernel_find(rt, "axpy", &axpy));
  kiln_kernel* missing = NULL;
  CHECK(kiln_kernel_find(rt, "axpx", &missing) == KILN_NOT_FOUND);
  CHECK(strstr(kiln_last_error(), "axpy") != NULL); /* the message lists the kernels */
  const uint32_t cubes[3] = {(N + 255) / 256, 1, 1}, cube256[3] = {256, 1, 1};
  kiln_arg args[3];
  memset(args, 0, sizeof args);
  args[0].kind = KILN_ARG_TENSOR;
  args[0].value.tensor = x;
  args[1].kind = KILN_ARG_TENSOR;
  args[1].value.tensor = y;
  args[2].kind = KILN_ARG_FLOAT;
  args[2].value.f = 2.0;
  REQUIRE_OK(kiln_launch(rt, axpy, cubes, cube256, args, 3, NULL));
  REQUIRE_OK(kiln_sync(rt));
  REQUIRE_OK(kiln_tensor_download(y, hy, sizeof hy));
  for (int i = 0; i < N; ++i) CHECK(hy[i] == 2.0f * (float)i + 1.0f);
  const uint32_t no_cubes[3] = {0, 1, 1};
  CHECK(kiln_launch(rt, axpy, no_cubes, cube256, args, 3, NULL) == KILN_INVALID_ARGUMENT);
  CHECK(kiln_launch(rt, axpy, cubes, cube256, args, 2, NULL) == KILN_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "'a' (argument 3) is missing") != NULL);
  {
    /* Views (docs/runtime.md "Views"): axpy indexes x and y flat, so an every-other-element
       view is refused, naming the argument, and a stride-0 output too; nothing is written. */
    static float wide[2 * N];
    for (int i = 0; i < 2 * N; ++i) wide[i] = -7.0f;
    const int64_t vshape[1] = {N}, every_other[1] = {2}, zero[1] = {0};
    kiln_tensor* strided = NULL;
    REQUIRE_OK(kiln_tensor_wrap(rt, wide, KILN_F32, vshape, every_other, 1, NULL, NULL, &strided));
    kiln_arg vargs[3];
    memcpy(vargs, args, sizeof vargs);
    vargs[0].value.tensor = strided;
    CHECK(kiln_launch(rt, axpy, cubes, cube256, vargs, 3, NULL) == KILN_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "argument 'x'") != NULL);
    CHECK(strstr(kiln_last_error(), "strides [2]") != NULL);
    vargs[0].value.tensor = x;
    vargs[1].value.tensor = strided;
    CHECK(kiln_launch(rt, axpy, cubes, cube256, vargs, 3, NULL) == KILN_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "argument 'y'") != NULL);
    kiln_tensor_release(strided);
    kiln_tensor* broadcast = NULL;
    REQUIRE_OK(kiln_tensor_wrap(rt, wide, KILN_F32, vshape, zero, 1, NULL, NULL, &broadcast));
    vargs[1].value.tensor = broadcast;
    CHECK(kiln_launch(rt, axpy, cubes, cube256, vargs, 3, NULL) == KILN_INVALID_ARGUMENT);
    kiln_tensor_release(broadcast);
    for (int i = 0; i < 2 * N; ++i) CHECK(wide[i] == -7.0f);
    /* A stride whose reach overflows, or reaches unmapped memory, is refused at the wrap. */
    const int64_t huge[1] = {(int64_t)1 << 40}, max[1] = {INT64_MAX};
    kiln_tensor* bad = NULL;
    CHECK(kiln_tensor_wrap(rt, wide, KILN_F32, vshape, huge, 1, NULL, NULL, &bad) ==
          KILN_INVALID_ARGUMENT);
    CHECK(kiln_tensor_wrap(rt, wide, KILN_F32, vshape, max, 1, NULL, NULL, &bad) ==
          KILN_INVALID_ARGUMENT);
    CHECK(bad == NULL);
  }

  /* row_sum with its comptime `units` by name, as a number and as text. */
  enum { R = 30, C = 100 };
  static float ones[R * C];
  for (int i = 0; i < R * C; ++i) ones[i] = 1.0f;
  const int64_t mshape[2] = {R, C}, rshape[1] = {R};
  kiln_tensor *in = NULL, *out = NULL;
  REQUIRE_OK(kiln_tensor_empty(rt, KILN_F32, mshape, 2, &in));
  REQUIRE_OK(kiln_tensor_empty(rt, KILN_F32, rshape, 1, &out));
  REQUIRE_OK(kiln_tensor_upload(in, ones, sizeof ones));
  kiln_kernel* row_sum = NULL;
  REQUIRE_OK(kiln_kernel_find(rt, "row_sum", &row_sum));
  kiln_arg rargs[3];
  memset(rargs, 0, sizeof rargs);
  rargs[0].name = "units";
  rargs[0].kind = KILN_ARG_INT;
  rargs[0].value.i = 64;
  rargs[1].kind = KILN_ARG_TENSOR;
  rargs[1].value.tensor = in;
  rargs[2].kind = KILN_ARG_TENSOR;
  rargs[2].value.tensor = out;
  const uint32_t rcubes[3] = {R, 1, 1}, cube64[3] = {64, 1, 1}, cube32[3] = {32, 1, 1};
  REQUIRE_OK(kiln_launch(rt, row_sum, rcubes, cube64, rargs, 3, NULL));
  float sums[R];
  REQUIRE_OK(kiln_sync(rt));
  REQUIRE_OK(kiln_tensor_download(out, sums, sizeof sums));
  for (int r = 0; r < R; ++r) CHECK(sums[r] == (float)C);
  rargs[0].kind = KILN_ARG_TEXT;
  rargs[0].value.text = "32";
  REQUIRE_OK(kiln_launch(rt, row_sum, rcubes, cube32, rargs, 3, NULL));
  CHECK(kiln_launch(rt, row_sum, rcubes, cube64, rargs, 3, NULL) == KILN_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "needs a 32x1x1 cube for units=32") != NULL);
  rargs[0].name = "unit";
  CHECK(kiln_launch(rt, row_sum, rcubes, cube32, rargs, 3, NULL) == KILN_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "no comptime parameter 'unit'") != NULL);
  /* Without `units`: its default, 256, and the cube the kernel requires for it. */
  const uint32_t cube256r[3] = {256, 1, 1};
  REQUIRE_OK(kiln_launch(rt, row_sum, rcubes, cube256r, rargs + 1, 2, NULL));

  /* A fault in checked mode comes back from sync with the DSL line: more cubes than rows. */
  const uint32_t toomany[3] = {R + 5, 1, 1};
  rargs[0].name = NULL;
  rargs[0].kind = KILN_ARG_TENSOR;
  rargs[0].value.tensor = in;
  rargs[1].value.tensor = out;
  rargs[2].kind = KILN_ARG_INT;
  rargs[2].value.i = 64;
  REQUIRE_OK(kiln_launch(rt, row_sum, toomany, cube64, rargs, 3, NULL));
  CHECK(kiln_sync(rt) == KILN_KERNEL_FAULT);
  CHECK(strstr(kiln_last_error(), "kernels/examples/row_sum.cpp:") != NULL);

  /* DLPack import: the kernel writes the producer's memory itself, and the deleter runs once,
   * when the last kiln tensor goes. */
  DLManagedTensorVersioned* m = make_managed(N, kDLFloat, 32, 0);
  float* theirs = ((Owned*)m->manager_ctx)->data;
  kiln_tensor* wrapped = NULL;
  REQUIRE_OK(kiln_tensor_from_dlpack(rt, m, &wrapped));
  CHECK(kiln_tensor_data(wrapped) == theirs);
  args[1].value.tensor = wrapped;
  REQUIRE_OK(kiln_launch(rt, axpy, cubes, cube256, args, 3, NULL));
  REQUIRE_OK(kiln_sync(rt));
  CHECK(theirs[10] == 2.0f * 10.0f + 10.0f);
  kiln_tensor* view = NULL;
  REQUIRE_OK(kiln_tensor_read_only_view(wrapped, &view));
  kiln_tensor_release(wrapped);
  CHECK(deleted == 0); /* the view still uses the memory */
  kiln_tensor_release(view);
  CHECK(deleted == 1);

  /* A read-only producer: kiln will not write it. */
  m = make_managed(N, kDLFloat, 32, DLPACK_FLAG_BITMASK_READ_ONLY);
  REQUIRE_OK(kiln_tensor_from_dlpack(rt, m, &wrapped));
  CHECK(kiln_tensor_read_only(wrapped) == 1);
  args[1].value.tensor = wrapped;
  CHECK(kiln_launch(rt, axpy, cubes, cube256, args, 3, NULL) != KILN_OK);
  kiln_tensor_release(wrapped);
  CHECK(deleted == 2);

  /* Strides and a byte offset: every other element from the second one, as a 2 x 5 view. */
  m = make_managed(N, kDLFloat, 32, 0);
  Owned* o = (Owned*)m->manager_ctx;
  o->shape[0] = 2;
  o->shape[1] = 5;
  o->strides[0] = 10;
  o->strides[1] = 2;
  m->dl_tensor.ndim = 2;
  m->dl_tensor.strides = o->strides;
  m->dl_tensor.byte_offset = sizeof(float);
  REQUIRE_OK(kiln_tensor_from_dlpack(rt, m, &wrapped));
  CHECK(kiln_tensor_rank(wrapped) == 2 && kiln_tensor_dim(wrapped, 1) == 5);
  CHECK(kiln_tensor_stride(wrapped, 0) == 10 && kiln_tensor_stride(wrapped, 1) == 2);
  CHECK(*(float*)kiln_tensor_data(wrapped) == 1.0f);
  /* Export it again: the consumer sees the same view of the same memory. */
  DLManagedTensorVersioned* back = NULL;
  REQUIRE_OK(kiln_tensor_to_dlpack(wrapped, &back));
  CHECK(back->version.major == 1 && back->flags == 0);
  CHECK(back->dl_tensor.device.device_type == kDLCPU && back->dl_tensor.ndim == 2);
  CHECK(back->dl_tensor.dtype.code == kDLFloat && back->dl_tensor.dtype.bits == 32);
  CHECK(back->dl_tensor.shape[0] == 2 && back->dl_tensor.shape[1] == 5);
  CHECK(back->dl_tensor.strides[0] == 10 && back->dl_tensor.strides[1] == 2);
  CHECK((char*)back->dl_tensor.data + back->dl_tensor.byte_offset == (char*)(o->data + 1));
  kiln_tensor_release(wrapped);
  CHECK(deleted == 2); /* the export keeps the memory alive */
  back->deleter(back);
  CHECK(deleted == 3);

  /* What has no kiln form is refused, and the deleter still runs once, at once. */
  m = make_managed(N, kDLComplex, 64, 0);
  CHECK(kiln_tensor_from_dlpack(rt, m, &wrapped) == KILN_INVALID_ARGUMENT);
  CHECK(wrapped == NULL);
  CHECK(strstr(kiln_last_error(), "complex64 has no kiln type") != NULL);
  CHECK(deleted == 4);
  m = make_managed(N, kDLFloat, 32, 0);
  m->version.major = 2;
  CHECK(kiln_tensor_from_dlpack(rt, m, &wrapped) == KILN_INVALID_ARGUMENT);
  CHECK(deleted == 5);

  /* The unversioned form: export and import. */
  DLManagedTensor* old = NULL;
  REQUIRE_OK(kiln_tensor_to_dlpack_unversioned(y, &old));
  CHECK(old->dl_tensor.data == kiln_tensor_data(y));
  REQUIRE_OK(kiln_tensor_from_dlpack_unversioned(rt, old, &wrapped)); /* kiln -> kiln */
  float again[N];
  REQUIRE_OK(kiln_tensor_download(wrapped, again, sizeof again));
  CHECK(again[7] == 2.0f * 7.0f + 1.0f);
  kiln_tensor_release(wrapped);
  REQUIRE_OK(kiln_tensor_read_only_view(y, &view));
  CHECK(kiln_tensor_to_dlpack_unversioned(view, &old) == KILN_INVALID_ARGUMENT);
  kiln_tensor_release(view);

  /* Wrapping host memory with a release callback. */
  float* mine = calloc(N, sizeof(float));
  REQUIRE_OK(kiln_tensor_wrap(rt, mine, KILN_F32, shape, NULL, 1, count_release, NULL, &wrapped));
  kiln_tensor_release(wrapped);
  CHECK(released == 1);
  /* A refused wrap does not take the memory: release is not called. */
  const int64_t negative[1] = {-3};
  CHECK(kiln_tensor_wrap(rt, mine, KILN_F32, negative, NULL, 1, count_release, NULL, &wrapped) ==
        KILN_INVALID_ARGUMENT);
  CHECK(wrapped == NULL && released == 1);
  free(mine);
  /* A refused DLPack import still runs the deleter, once. */
  m = make_managed(N, kDLFloat, 32, 0);
  ((Owned*)m->manager_ctx)->shape[0] = -1;
  CHECK(kiln_tensor_from_dlpack(rt, m, &wrapped) == KILN_INVALID_ARGUMENT);
  CHECK(deleted == 6);
  m = make_managed(N, kDLFloat, 32, 0);
  m->dl_tensor.shape = NULL; /* a producer's mistake: an error, not a crash */
  CHECK(kiln_tensor_from_dlpack(rt, m, &wrapped) == KILN_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "no shape") != NULL);
  CHECK(deleted == 7);
  /* FP8: float8_e4m3fn and float8_e5m2 are f8e4m3 and f8e5m2, both ways; other variants
     are refused by name. */
  m = make_managed(N, kDLFloat8_e4m3fn, 8, 0);
  REQUIRE_OK(kiln_tensor_from_dlpack(rt, m, &wrapped));
  CHECK(kiln_tensor_dtype(wrapped) == KILN_F8E4M3);
  REQUIRE_OK(kiln_tensor_to_dlpack(wrapped, &back));
  CHECK(back->dl_tensor.dtype.code == kDLFloat8_e4m3fn && back->dl_tensor.dtype.bits == 8);
  back->deleter(back);
  kiln_tensor_release(wrapped);
  CHECK(deleted == 8);
  m = make_managed(N, kDLFloat8_e5m2, 8, 0);
  REQUIRE_OK(kiln_tensor_from_dlpack(rt, m, &wrapped));
  CHECK(kiln_tensor_dtype(wrapped) == KILN_F8E5M2);
  kiln_tensor_release(wrapped);
  CHECK(deleted == 9);
  m = make_managed(N, 11 /* kDLFloat8_e4m3fnuz */, 8, 0);
  CHECK(kiln_tensor_from_dlpack(rt, m, &wrapped) == KILN_INVALID_ARGUMENT);
  CHECK(strstr(kiln_last_error(), "type code 11 of 8 bits has no kiln type") != NULL);
  CHECK(deleted == 10);

  /* Streams. */
  kiln_stream* s = NULL;
  REQUIRE_OK(kiln_stream_new(rt, &s));
  args[1].value.tensor = y;
  REQUIRE_OK(kiln_launch(rt, axpy, cubes, cube256, args, 3, s));
  REQUIRE_OK(kiln_stream_sync(rt, s));
  kiln_stream_release(s);
  /* A caller's CUstream: only for a GPU runtime (tests/runtime/cuda/test_cuda_driver.cpp checks
   * launches on one with a fake driver). */
  CHECK(kiln_stream_wrap(rt, NULL, &s) == KILN_UNSUPPORTED);
  CHECK(s == NULL);
  CHECK(strstr(kiln_last_error(), "no native streams") != NULL);

  kiln_cache_stats stats;
  REQUIRE_OK(kiln_cache_get_stats(&stats));
  CHECK(stats.compiles + stats.disk_hits + stats.memory_hits > 0);

  kiln_kernel_release(axpy);
  kiln_kernel_release(row_sum);
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_tensor_release(in);
  kiln_tensor_release(out);
  kiln_runtime_release(rt);
  kiln_tensor_release(NULL); /* NULL is fine everywhere a handle is released */
  if (failures) {
    fprintf(stderr, "test_capi: %d checks failed\n", failures);
    return 1;
  }
  printf("test_capi: all checks passed\n");
  return 0;
}
