// Random tensors from the host: kiln::lib::uniform and kiln::lib::normal fill a tensor on any
// device with numbers that depend only on the seed, the offset and each element's index
// (Philox 4x32-10, kernels/lib/philox.h), so the CPU, the emulator and a GPU give the same bits.
// docs/kernels.md "Random numbers".
//
//   KILN_TRY(kiln::lib::normal(rt, weights, {.seed = 42}, 0.0, 0.02));
//
// Element i takes word i % 4 of Philox block i / 4 (counter: the block index, 0, the offset's
// two halves; key: the seed's two halves): uniform is low + (high - low) u with u = the word's
// top 24 bits times 2^-24, in [0, 1); normal pairs the words of a block (0 with 1, 2 with 3) by
// Box-Muller into mean + stddev z. A different offset gives an independent stream of the same
// seed (a framework advances it by the blocks it used).
#pragma once

#include <cstdint>

#include "ir/result.h"
#include "runtime/runtime.h"

namespace kiln::lib {

struct RandomOptions {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Fills `out` (contiguous f32, f16 or bf16, lines of 1) with uniform numbers in [low, high)
// (rounded to the element type, which may round up to high). Asynchronous on the runtime's
// stream, as launches are.
Status uniform(Runtime& rt, Tensor& out, RandomOptions options, double low = 0.0,
               double high = 1.0);

// Fills `out` with normal numbers of mean `mean` and standard deviation `stddev`.
Status normal(Runtime& rt, Tensor& out, RandomOptions options, double mean = 0.0,
              double stddev = 1.0);

}  // namespace kiln::lib
