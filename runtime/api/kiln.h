/* kiln's C API (C11): devices, runtimes, tensors (with DLPack import and export), kernels by
 * name, launches with arrays of typed arguments, streams and the cache, for programs and
 * language bindings that cannot use C++. Link libkiln_runtime (kiln::runtime).
 *
 * Conventions:
 *  - Handles are opaque pointers; each kind has a release function, which accepts NULL.
 *  - Every function that can fail returns a kiln_status; KILN_OK is 0. The message of the last
 *    failure on the calling thread (what, where, how to fix it: the same text as the C++ API's
 *    errors) is kiln_last_error(), valid until the thread's next failing call.
 *  - Nothing here aborts on bad input: NULL handles and out-of-range values are
 *    KILN_INVALID_ARGUMENT with a message.
 *  - Handles may be used from several threads at once, except that a handle must not be used
 *    while or after it is released.
 * docs/embedding.md#the-c-api walks through a program; tests/runtime/api/test_capi.c is one. */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/api/dlpack.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* a caller passed something unusable */
  KILN_PARSE = 2,            /* IR text that does not parse */
  KILN_VERIFY = 3,           /* IR that breaks a rule of the IR */
  KILN_TRACE = 4,            /* a DSL kernel used wrongly while tracing */
  KILN_COMPILE = 5,          /* a backend compiler failed */
  KILN_OUT_OF_MEMORY = 6,
  KILN_DEVICE = 7,       /* a device or driver failure */
  KILN_IO = 8,           /* a file could not be read or written */
  KILN_NOT_FOUND = 9,    /* a kernel, device or file that does not exist */
  KILN_UNSUPPORTED = 10, /* valid, but not supported by this target or build */
  KILN_KERNEL_FAULT = 11 /* a launched kernel reported a fault (checked mode, assert) */
} kiln_status;

/* Element types. */
typedef enum kiln_dtype {
  KILN_BOOL = 0,
  KILN_I8,
  KILN_I16,
  KILN_I32,
  KILN_I64,
  KILN_U8,
  KILN_U16,
  KILN_U32,
  KILN_U64,
  KILN_F16,
  KILN_BF16,
  KILN_F32,
  KILN_F64,
  KILN_F8E4M3, /* OCP FP8 e4m3 ("fn": no infinities, largest 448) */
  KILN_F8E5M2  /* OCP FP8 e5m2 */
} kiln_dtype;

typedef struct kiln_runtime kiln_runtime;
typedef struct kiln_tensor kiln_tensor;
typedef struct kiln_kernel kiln_kernel;
typedef struct kiln_stream kiln_stream;

/* "0.1.0". */
const char* kiln_version(void);
/* The message of the calling thread's last failure; "" when there was none. */
const char* kiln_last_error(void);
/* "invalid argument", "not found", ... */
const char* kiln_status_name(kiln_status status);

/* ---- devices ---- */

typedef struct kiln_device_info {
  char name[64];         /* "cpu", "cuda:0", "cuda-emu"; what kiln_runtime_open takes */
  char description[256]; /* the processor or GPU model */
  int available;         /* 1 when it can be opened */
  char reason[512];      /* why not, when it cannot */
} kiln_device_info;

/* Fills up to `capacity` entries of `out` (which may be NULL when capacity is 0) and sets
 * *count to the number of devices kiln knows of (which may be more than capacity). */
kiln_status kiln_devices(kiln_device_info* out, size_t capacity, size_t* count);

/* ---- runtimes ---- */

/* Opens a device by name ("cpu", "cuda:0", "cuda-emu"); checked: bounds-check every launch. */
kiln_status kiln_runtime_open(const char* device, int checked, kiln_runtime** out);
void kiln_runtime_release(kiln_runtime* rt);
/* Waits for the default stream's launches; returns the first fault they reported. */
kiln_status kiln_sync(kiln_runtime* rt);

/* ---- tensors ---- */

/* A new tensor of `rank` dimensions (0 to 8), contiguous, uninitialized. */
kiln_status kiln_tensor_empty(kiln_runtime* rt, kiln_dtype dtype, const int64_t* shape, int rank,
                              kiln_tensor** out);
/* Existing memory as a tensor, without a copy: host memory for the CPU, a CUdeviceptr for a
 * GPU. strides (in elements) may be NULL for row-major; release(release_ctx), when not NULL,
 * runs once the last tensor using the memory is gone. When the call fails (a NULL or
 * misaligned pointer, a view past what it can reach), release is not called: the memory is
 * still the caller's. */
kiln_status kiln_tensor_wrap(kiln_runtime* rt, void* data, kiln_dtype dtype, const int64_t* shape,
                             const int64_t* strides, int rank, void (*release)(void*),
                             void* release_ctx, kiln_tensor** out);
/* Copies between the tensor (which must be contiguous) and host memory of exactly its size. */
kiln_status kiln_tensor_upload(kiln_tensor* t, const void* host, size_t bytes);
kiln_status kiln_tensor_download(const kiln_tensor* t, void* host, size_t bytes);
int kiln_tensor_rank(const kiln_tensor* t);           /* -1 for NULL */
int64_t kiln_tensor_dim(const kiln_tensor* t, int d); /* -1 when out of range */
int64_t kiln_tensor_stride(const kiln_tensor* t, int d);
kiln_dtype kiln_tensor_dtype(const kiln_tensor* t);
void* kiln_tensor_data(const kiln_tensor* t); /* the first element (device memory on a GPU) */
int kiln_tensor_read_only(const kiln_tensor* t);
/* A read-only view of the same memory (kernels may not write it). */
kiln_status kiln_tensor_read_only_view(const kiln_tensor* t, kiln_tensor** out);
void kiln_tensor_release(kiln_tensor* t);

/* DLPack, without copies. Import takes ownership of the managed tensor in every case (its
 * deleter runs exactly once: when the last kiln tensor using it goes, or at once on failure).
 * Export gives the caller a managed tensor whose deleter the caller must call exactly once. */
kiln_status kiln_tensor_from_dlpack(kiln_runtime* rt, DLManagedTensorVersioned* managed,
                                    kiln_tensor** out);
kiln_status kiln_tensor_from_dlpack_unversioned(kiln_runtime* rt, DLManagedTensor* managed,
                                                kiln_tensor** out);
kiln_status kiln_tensor_to_dlpack(const kiln_tensor* t, DLManagedTensorVersioned** out);
kiln_status kiln_tensor_to_dlpack_unversioned(const kiln_tensor* t, DLManagedTensor** out);

/* ---- kernels ---- */

/* Loads a shared library of kernels; *kernels (may be NULL) gets how many it registered. */
kiln_status kiln_load_plugin(const char* path, size_t* kernels);
kiln_status kiln_kernel_find(kiln_runtime* rt, const char* name, kiln_kernel** out);
void kiln_kernel_release(kiln_kernel* k);

typedef enum kiln_arg_kind {
  KILN_ARG_TENSOR = 0, /* value.tensor */
  KILN_ARG_INT,        /* value.i: a signed integer scalar or comptime value */
  KILN_ARG_UINT,       /* value.u */
  KILN_ARG_FLOAT,      /* value.f */
  KILN_ARG_BOOL,       /* value.i, 0 or 1 */
  KILN_ARG_TEXT        /* value.text: a comptime value in its text form ("Fast", "{m=64, n=64}") */
} kiln_arg_kind;

typedef struct kiln_arg {
  /* NULL: the next parameter in order. A name: that comptime parameter (named arguments may
   * come in any order; comptime parameters not given keep their registered defaults). */
  const char* name;
  kiln_arg_kind kind;
  union {
    const kiln_tensor* tensor;
    int64_t i;
    uint64_t u;
    double f;
    const char* text;
  } value;
} kiln_arg;

/* Launches `kernel` over cubes[3] cubes of cube_dim[3] units with `nargs` arguments, on
 * `stream` (NULL: the runtime's default stream). Argument and compile errors come back here;
 * faults while running come back from the sync. */
kiln_status kiln_launch(kiln_runtime* rt, const kiln_kernel* kernel, const uint32_t cubes[3],
                        const uint32_t cube_dim[3], const kiln_arg* args, size_t nargs,
                        kiln_stream* stream);

/* ---- streams ---- */

kiln_status kiln_stream_new(kiln_runtime* rt, kiln_stream** out);
/* A stream over a CUstream the caller owns and keeps alive longer than the handle (0: the
 * legacy default stream), so launches order with another framework's work on it; a cuda:N
 * runtime only (KILN_UNSUPPORTED elsewhere). Releasing the handle does not destroy it. */
kiln_status kiln_stream_wrap(kiln_runtime* rt, void* cu_stream, kiln_stream** out);
kiln_status kiln_stream_sync(kiln_runtime* rt, kiln_stream* stream);
void kiln_stream_release(kiln_stream* stream);

/* ---- the disk cache ---- */

typedef struct kiln_cache_stats {
  uint64_t memory_hits, disk_hits, compiles, failures;
  double compile_ms, disk_load_ms;
} kiln_cache_stats;

kiln_status kiln_cache_get_stats(kiln_cache_stats* out);
/* Points the process's disk cache at `dir` (NULL: back to the environment's choice) or turns
 * it off (enabled 0). */
kiln_status kiln_cache_configure(const char* dir, int enabled);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_H */
