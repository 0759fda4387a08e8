// A fake CUDA driver (libcuda.so.1's C ABI) for testing kiln's driver path on machines with no
// GPU: one "device" whose memory is host memory, streams and events that complete at once,
// modules that accept CUBIN and PTX images, and launches that do not run code but record what
// they were given (fake_cuda_last_launch) and can write a report the way a kernel would
// (FAKE_CUDA_REPORT). Variants: FAKE_CUDA_NO_DEVICE (cuInit finds none), FAKE_CUDA_OLD (no
// cuLaunchKernel). Loaded by the tests through KILN_CUDA_DRIVER.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNoDevice = 100,
              kInvalidImage = 200, kNotFound = 500;
constexpr size_t kDeviceMemory = size_t{1} << 30;
size_t g_used = 0;

struct Launch {
  unsigned grid[3], block[3], shared;
  uint64_t slots[64];
  int count;
  void* stream;
  unsigned char params[1024];  // the first KiB of the kernel's parameter (tensor maps included)
};
Launch g_last{};

// The last cuTensorMapEncodeTiled call.
struct TensorMapCall {
  int data_type;
  unsigned rank;
  void* address;
  uint64_t dims[5], strides[4];
  uint32_t box[5], element_strides[5];
  int interleave, swizzle, l2, oob;
  int calls;
  // cuTensorMapEncodeIm2col's own parameters (im2col 1), innermost spatial dimension first.
  int im2col;
  int lower[3], upper[3];
  unsigned channels, pixels;
};
TensorMapCall g_map{};

}  // namespace

extern "C" {

using CUresult = int;

// Inspection for the tests.
const Launch* fake_cuda_last_launch() {
  return &g_last;
}
const TensorMapCall* fake_cuda_last_tensor_map() {
  return &g_map;
}

// Records its arguments and writes a map of 0xA0 + call number, checking what the driver checks.
CUresult cuTensorMapEncodeTiled(void* map, int data_type, unsigned rank, void* address,
                                const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                                const uint32_t* element_strides, int interleave, int swizzle,
                                int l2, int oob) {
  const int calls = g_map.calls + 1;
  g_map = TensorMapCall{};
  g_map.data_type = data_type;
  g_map.rank = rank;
  g_map.address = address;
  g_map.interleave = interleave;
  g_map.swizzle = swizzle;
  g_map.l2 = l2;
  g_map.oob = oob;
  g_map.calls = calls;
  for (unsigned d = 0; d < rank && d < 5; ++d) {
    g_map.dims[d] = dims[d];
    g_map.box[d] = box[d];
    g_map.element_strides[d] = element_strides[d];
    if (d > 0) g_map.strides[d - 1] = strides[d - 1];
  }
  if (reinterpret_cast<uintptr_t>(map) % 64 != 0 ||
      reinterpret_cast<uintptr_t>(address) % 16 != 0 || rank < 1 || rank > 5)
    return kInvalidValue;
  for (unsigned d = 1; d < rank; ++d)
    if (strides[d - 1] % 16 != 0) return kInvalidValue;
  std::memset(map, 0xA0 + calls, 128);
  return kSuccess;
}

// The same for an im2col map, with the driver's extra rules: rank 3 to 5, corners in the range
// the rank allows, at most 256 channels and 1024 pixels.
CUresult cuTensorMapEncodeIm2col(void* map, int data_type, unsigned rank, void* address,
                                 const uint64_t* dims, const uint64_t* strides, const int* lower,
                                 const int* upper, unsigned channels, unsigned pixels,
                                 const uint32_t* element_strides, int interleave, int swizzle,
                                 int l2, int oob) {
  const uint32_t box[5] = {};
  const CUresult r = cuTensorMapEncodeTiled(map, data_type, rank, address, dims, strides, box,
                                            element_strides, interleave, swizzle, l2, oob);
  g_map.im2col = 1;
  g_map.channels = channels;
  g_map.pixels = pixels;
  const int range = rank == 3 ? 32768 : rank == 4 ? 128 : 16;
  bool ok =
      rank >= 3 && rank <= 5 && channels >= 1 && channels <= 256 && pixels >= 1 && pixels <= 1024;
  for (unsigned s = 0; s + 2 < rank && s < 3; ++s) {
    g_map.lower[s] = lower[s];
    g_map.upper[s] = upper[s];
    ok = ok && lower[s] >= -range && lower[s] < range && upper[s] >= -range && upper[s] < range;
  }
  return r != kSuccess ? r : ok ? kSuccess : kInvalidValue;
}

CUresult cuInit(unsigned) {
#ifdef FAKE_CUDA_NO_DEVICE
  return kNoDevice;
#else
  return kSuccess;
#endif
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return kSuccess;
}
CUresult cuGetErrorName(CUresult e, const char** name) {
  switch (e) {
    case kSuccess:
      *name = "CUDA_SUCCESS";
      break;
    case kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      break;
    case kOutOfMemory:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      break;
    case kNoDevice:
      *name = "CUDA_ERROR_NO_DEVICE";
      break;
    case kInvalidImage:
      *name = "CUDA_ERROR_INVALID_IMAGE";
      break;
    case kNotFound:
      *name = "CUDA_ERROR_NOT_FOUND";
      break;
    default:
      *name = "CUDA_ERROR_UNKNOWN";
      break;
  }
  return kSuccess;
}
CUresult cuGetErrorString(CUresult e, const char** text) {
  switch (e) {
    case kOutOfMemory:
      *text = "out of memory";
      break;
    case kInvalidImage:
      *text = "device kernel image is invalid";
      break;
    case kNotFound:
      *text = "named symbol not found";
      break;
    default:
      *text = "fake driver error";
      break;
  }
  return kSuccess;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *d = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "kiln fake GPU", static_cast<size_t>(len));
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
  switch (attr) {
    case 75:
      *v = 9;
      break;  // compute capability 9.0
    case 76:
      *v = 0;
      break;
    case 16:
      *v = 80;
      break;  // SMs
    case 6:
    case 7:
      *v = 65535;
      break;
    case 97:
      *v = 227 * 1024;
      break;
    default:
      *v = 0;
      break;
  }
  return kSuccess;
}
CUresult cuDeviceTotalMem_v2(size_t* b, int) {
  *b = kDeviceMemory;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) {
  static int context;
  *ctx = &context;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) {
  return kSuccess;
}
CUresult cuCtxSetCurrent(void*) {
  return kSuccess;
}
CUresult cuCtxSynchronize() {
  return kSuccess;
}
CUresult cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  if (g_used + bytes > kDeviceMemory) return kOutOfMemory;
  void* m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m) return kOutOfMemory;
  g_used += bytes;
  *p = reinterpret_cast<unsigned long long>(m);
  return kSuccess;
}
CUresult cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void*>(p));
  return kSuccess;
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  *free = kDeviceMemory - g_used;
  *total = kDeviceMemory;
  return kSuccess;
}
CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return kSuccess;
}
CUresult cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return kSuccess;
}
CUresult cuMemcpyDtoD_v2(unsigned long long dst, unsigned long long src, size_t n) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void*) {
  return cuMemcpyHtoD_v2(dst, src, n);
}
CUresult cuMemsetD8_v2(unsigned long long dst, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void*>(dst), v, n);
  return kSuccess;
}
CUresult cuStreamCreate(void** s, unsigned) {
  *s = std::malloc(1);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void* s) {
  std::free(s);
  return kSuccess;
}
CUresult cuStreamSynchronize(void*) {
  return kSuccess;
}
CUresult cuStreamWaitEvent(void*, void*, unsigned) {
  return kSuccess;
}
CUresult cuEventCreate(void** e, unsigned) {
  *e = std::malloc(1);
  return kSuccess;
}
CUresult cuEventDestroy_v2(void* e) {
  std::free(e);
  return kSuccess;
}
CUresult cuEventRecord(void*, void*) {
  return kSuccess;
}
CUresult cuEventSynchronize(void*) {
  return kSuccess;
}
CUresult cuEventElapsedTime(float* ms, void*, void*) {
  *ms = 0.25f;
  return kSuccess;
}

// A module keeps its image, to find function names in it.
struct Module {
  std::string image;
};
CUresult cuModuleLoadData(void** m, const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  const bool elf = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
  size_t size = 0;
  if (elf) {
    // An ELF64 file ends with its section headers: e_shoff + e_shnum * e_shentsize.
    uint64_t shoff;
    uint16_t shentsize, shnum;
    std::memcpy(&shoff, b + 0x28, 8);
    std::memcpy(&shentsize, b + 0x3a, 2);
    std::memcpy(&shnum, b + 0x3c, 2);
    size = shoff + uint64_t{shnum} * shentsize;
  } else {
    size = std::strlen(static_cast<const char*>(image));  // PTX is NUL-terminated text
    if (std::string(static_cast<const char*>(image), size).find(".version") == std::string::npos)
      return kInvalidImage;
  }
  auto* mod = new Module;
  mod->image.assign(static_cast<const char*>(image), size);
  *m = mod;
  return kSuccess;
}
CUresult cuModuleUnload(void* m) {
  delete static_cast<Module*>(m);
  return kSuccess;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  auto* mod = static_cast<Module*>(m);
  if (mod->image.find(name) == std::string::npos) return kNotFound;
  *f = mod;
  return kSuccess;
}
CUresult cuFuncSetAttribute(void*, int, int) {
  return kSuccess;
}

#ifndef FAKE_CUDA_OLD
// Records the launch; with FAKE_CUDA_REPORT set, writes into the report buffer (the slot after
// the parameters', given as FAKE_CUDA_REPORT=<slot>) a print of site 0 with one operand 42 from
// cube 1 unit 2, and a checked-mode fault at site 0 (index 7, bound 5) from cube 3 unit 4.
CUresult cuLaunchKernel(void*, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void**) {
  g_last = Launch{{gx, gy, gz}, {bx, by, bz}, shared, {}, 0, stream, {}};
  const auto* slots = static_cast<const uint64_t*>(params[0]);
  std::memcpy(g_last.params, params[0], sizeof g_last.params);
  const char* report_slot = std::getenv("FAKE_CUDA_REPORT");
  const int n = report_slot ? std::atoi(report_slot) + 2 : 16;
  for (int i = 0; i < n && i < 64; ++i) g_last.slots[i] = slots[i];
  g_last.count = n;
  if (report_slot) {
    const int at = std::atoi(report_slot);
    auto* report = reinterpret_cast<unsigned char*>(slots[at]);
    const uint64_t seq = slots[at + 1];
    auto key = [&](uint64_t cube, uint64_t unit) { return (seq << 42) | (cube << 10) | unit; };
    // The fault: fault_key, fault_count, faults[0].
    uint64_t k = key(3, 4);
    std::memcpy(report + 0, &k, 8);
    uint32_t one = 1;
    std::memcpy(report + 16, &one, 4);
    const uint32_t entry[4] = {0, 7, 5, 0};
    std::memcpy(report + 40, &k, 8);
    std::memcpy(report + 48, entry, 16);
    // The print: a record in the arena after the 1576-byte header.
    uint32_t bytes;
    std::memcpy(&bytes, report + 24, 4);
    unsigned char* rec = report + 1576 + bytes;
    const uint32_t size = 24, site = 0;
    const uint64_t pk = key(1, 2), value = 42;
    std::memcpy(rec, &size, 4);
    std::memcpy(rec + 4, &site, 4);
    std::memcpy(rec + 8, &pk, 8);
    std::memcpy(rec + 16, &value, 8);
    bytes += size;
    std::memcpy(report + 24, &bytes, 4);
  }
  return kSuccess;
}
#endif

}  // extern "C"
