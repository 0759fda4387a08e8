// The CPU kernel ABI: how a compiled kernel is called and the functions it calls to report
// prints, failed asserts and checked-mode faults (into an abi::LaunchState). The argument
// slots and KernelInfo are shared with CUDA (compiler/abi.h). No LLVM types.
#pragma once

#include <cstdint>

#include "compiler/abi.h"

namespace kiln::cpu {

// One entry point per kernel. It runs cubes [cube_begin, cube_end) (linear cube indices) with
// `shared` pointing at a per-worker arena of KernelInfo::shared_bytes (64-byte aligned) and
// `state` at the launch's abi::LaunchState.
using EntryFn = void (*)(const uint64_t* args, uint32_t cube_begin, uint32_t cube_end,
                         uint8_t* shared, void* state);

// The shared ABI, as the CPU backend's code names it.
using abi::AccessSite;
using abi::arg_layout;
using abi::ArgLayout;
using abi::AssertSite;
using abi::format_prints;
using abi::kHeaderSlots;
using abi::LaunchState;
using abi::ParamSlots;
using abi::PrintSite;

// The cube's tensor memory on the CPU, at the end of its arena: what is allocated and how far
// the multiplies are (counts), then 128 lanes of 512 32-bit columns, lane-major.
struct TmemBlock {
  uint32_t allocated;  // bit c: columns 32c .. 32c + 31
  uint32_t issued, committed, waited;
  uint32_t pad[12];
  uint32_t cells[128 * 512];
};

// What the kiln_rt_ tensor-memory functions return besides 0 (done): the misuse they found.
// Each op's codes are consecutive, so that a kernel maps them to its assert sites by offset.
enum TmemMisuse : uint32_t {
  kMbarNotInitialized = 1,
  kMbarNeverCompletes,
  kTmemFull,
  kTmemFreeNotAllocated,
  kTmemFreeInFlight,
  kMmaNotAllocated,
  kMmaPastArena,
  kLoadNotAllocated,
  kLoadInFlight,
  kLoadPastEnd,
  kTmemNotFreed,
  kReadNotAllocated,
  kReadInFlight,
  kMbarTxOverflow,
  kTmaMisaligned,
  kTmaPastEnd,
  kTmaIm2colOutside,
  kCopyMisaligned,
  kCopyPastEnd,
  kClusterStuck,
  kMulticastOutside,
  kTmemMisuseEnd
};
// The message of a misuse, for the kernel's assert site.
const char* tmem_misuse_message(uint32_t code);

// The cubes of a cluster run on the CPU as fibers of one thread (runtime/cpu/exec.cpp), which
// switch at sync_cluster and at mbarrier waits that other cubes complete. The kiln_rt_ functions
// reach the running cluster through the thread's ClusterHooks (null outside a cluster: a cube is
// its own cluster).
struct ClusterHooks {
  void* ctx;
  uint32_t rank, size;  // the running cube's rank, and the cubes of the cluster
  // Bumped by whatever may let a waiting cube go on (arrivals, copies landing, barriers).
  uint64_t progress;
  uint8_t* (*shared)(void* ctx, uint32_t rank);  // the arena of the cube of that rank
  // sync_cluster: returns once every cube of the cluster has arrived; false when that can never
  // happen (a cube returned, or waits for what no cube will do).
  bool (*sync)(void* ctx);
  // An mbarrier wait that has not completed: the other cubes run; false when no cube can make
  // progress any more.
  bool (*wait)(void* ctx);
};
ClusterHooks*& cluster_hooks();  // this thread's

}  // namespace kiln::cpu

// Called by compiled kernels (resolved by the JIT).
extern "C" {
void kiln_rt_print(void* state, uint32_t site, uint32_t cube, uint32_t unit, const uint64_t* bits,
                   uint32_t count);
void kiln_rt_assert_failed(void* state, uint32_t site, uint32_t cube, uint32_t unit);
void kiln_rt_fault(void* state, uint32_t site, uint32_t index, uint32_t bound, uint32_t cube,
                   uint32_t unit);
// wgmma.mma for one plane: acc (16 x n, row-major f32 or i32) += rows 16 (plane % 4) .. + 15
// of A times B, read through their descriptors from the cube's shared arena. Returns 0, or 1 +
// the first byte offset past the arena that a descriptor reaches (read as zero). `elem`: the
// op's attribute (the input type, and whether A and B are MN-major; ir/ops.h, MmaMajors).
uint32_t kiln_rt_wgmma(void* acc, uint32_t plane, const void* shared, uint32_t shared_bytes,
                       uint64_t adesc, uint64_t bdesc, uint32_t elem, uint32_t n);
// frag.mma_scaled for one plane: acc (m x n, row-major f32) += (A * SA) (B * SB), A (m x k) and
// B (k x n) row-major f32 (widened f8), SA(r, j) = sa[sai + r sas + j] and SB(c, j) =
// sb[sbi + c sbs + j] ue8m0 codes (2^(e - 127); 255 NaN) for each k block j of 32. An index
// past its memory reads 127; the result is 0, or 1 + that index (+ 2^31 when it is B's).
uint32_t kiln_rt_mma_scaled(float* acc, const float* a, const float* b, uint32_t m, uint32_t n,
                            uint32_t k, const uint8_t* sa, uint32_t sa_len, uint32_t sai,
                            uint32_t sas, const uint8_t* sb, uint32_t sb_len, uint32_t sbi,
                            uint32_t sbs);
// The cube ops of tensor memory and tcgen05, run once per cube with `tm` the cube's TmemBlock
// (ir/ir.h, "Tensor memory"; the mbarrier word is laid out as the emulator's). Each returns 0
// or a kiln::cpu::TmemMisuse; a multiply or copy that finds one does nothing.
uint32_t kiln_rt_mbar_init(uint64_t* bar, uint32_t count);
uint32_t kiln_rt_mbar_wait(void* tm, const uint64_t* bar, uint32_t parity);
uint32_t kiln_rt_tmem_alloc(void* tm, uint32_t columns, uint32_t* address);
uint32_t kiln_rt_tmem_free(void* tm, uint32_t address, uint32_t columns);
// tcgen05.mma: `elem` is the input type in bits 0-7, A and B MN-major in bits 8 and 9.
uint32_t kiln_rt_tcgen05_mma(void* tm, const void* shared, uint32_t shared_bytes, uint32_t d,
                             uint64_t adesc, uint64_t bdesc, uint32_t accumulate, uint32_t elem,
                             uint32_t n);
uint32_t kiln_rt_tcgen05_commit(void* tm, uint64_t* bar);
uint32_t kiln_rt_tmem_load(void* tm, void* dst, uint32_t dst_count, uint32_t index,
                           uint32_t address, uint32_t n);
// tmem.read for one unit: out[j] = D[unit % 128][address's column + column + j], j < lanes.
uint32_t kiln_rt_tmem_read(void* tm, uint32_t address, uint32_t column, uint32_t unit,
                           uint32_t lanes, uint32_t* out);
// At the end of each cube: kTmemNotFreed if columns are still allocated; the block is then
// reset for the next cube either way.
uint32_t kiln_rt_tmem_end(void* tm);
// mbarrier.arrive.expect_tx: `bytes` more for the phase to wait for, and one arrival.
uint32_t kiln_rt_mbar_arrive_tx(uint64_t* bar, uint32_t bytes);
// tma.load: the box of `attr` (ir::tma_box) at `coords` (outermost first) of the tensor at `src`
// (dims: its shape, then its strides, in elements) into dst's bytes from index * elem_bytes on,
// swizzled, zeros outside the tensor; then the box's bytes complete on `bar`.
uint32_t kiln_rt_tma_load(uint64_t* bar, void* dst, uint32_t dst_count, uint32_t index,
                          const void* src, const uint32_t* dims, const int32_t* coords,
                          uint64_t attr, uint32_t elem_bytes);
// async.copy for one unit: 16 bytes of src from element gi (zeros when !valid) to dst's element
// si; a copy is done when it returns on the CPU.
// sync_cluster; kClusterStuck when it can never complete.
uint32_t kiln_rt_cluster_sync();
// The arena of the cube of rank `rank` in the running cluster (`arena`, the running cube's, for
// rank 0 without clusters); null outside it.
uint8_t* kiln_rt_cluster_shared(uint32_t rank, uint8_t* arena);
// tma.load_multicast: kiln_rt_tma_load into the cube of each rank in `mask`, at the offsets of
// bar and dst in the running cube's `arena`.
uint32_t kiln_rt_tma_load_multicast(uint64_t* bar, void* dst, uint32_t dst_count, uint32_t index,
                                    const void* src, const uint32_t* dims, const int32_t* coords,
                                    uint64_t attr, uint32_t elem_bytes, uint32_t mask,
                                    uint8_t* arena);
uint32_t kiln_rt_copy_async(void* dst, uint32_t dst_count, uint32_t si, const void* src,
                            uint32_t src_count, uint32_t gi, uint32_t valid, uint32_t elem_bytes);
// tma.store: the box of src's bytes from index * elem_bytes on (laid out as kiln_rt_tma_load
// writes it) into the tensor at `dst`, the elements outside the tensor not written.
uint32_t kiln_rt_tma_store(void* dst, const void* src, uint32_t src_count, uint32_t index,
                           const uint32_t* dims, const int32_t* coords, uint64_t attr,
                           uint32_t elem_bytes);
// tma.store with a reduction (the attribute's, ir::tma_reduce): each element of the box inside
// the tensor combined with the tensor's element atomically, of type `elem` (an ir::ElemType).
uint32_t kiln_rt_tma_reduce(void* dst, const void* src, uint32_t src_count, uint32_t index,
                            const uint32_t* dims, const int32_t* coords, uint64_t attr,
                            uint32_t elem);

// f32 -> bf16 to nearest even, a NaN's high 16 bits kept (a bitcast round trip is exact):
// the compiler-runtime routine that LLVM's x86 backend calls where it widens bf16 vector
// operations to f32 and the CPU has no bf16 conversion instruction (AVX-512 BF16, AVX-NE-
// CONVERT). GCC 12's libgcc, Debian 12's, has none, so the JIT resolves the name to this one.
// A bf16 comes back in the low 16 bits of the first vector register (x86-64 and AArch64
// calling conventions), where a float's low half is: the result is a float with those bits.
float kiln_rt_truncsfbf2(float x);
}
