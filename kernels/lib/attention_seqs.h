// What every attention kernel (attention.cpp, attention_backward.cpp, attention_cpu.cpp,
// attention_decode.cpp; internal) shares about sequences and masks. The rows one sequence of an
// attention batch occupies: Without variable lengths, batch item b is the tensors'
// item b and its sequence every row of dimension 2; with them (varlen), every sequence is in the
// tensors' one item, sequence b in rows cu[b] .. cu[b + 1] - 1 (cumulative offsets, i32),
// clamped into the tensor's rows so that inconsistent offsets read nothing outside it.
#pragma once

#include "compiler/dsl/dsl.h"

namespace kiln::lib::detail {

struct SeqRows {
  dsl::u32 item;   // the tensors' batch index
  dsl::u32 start;  // the sequence's first row
  dsl::u32 len;    // its rows
};

inline SeqRows seq_rows(bool varlen, dsl::Tensor<const dsl::i32> cu, dsl::u32 b, dsl::u32 rows) {
  using namespace kiln::dsl;
  if (!varlen) return {b, 0u, rows};
  u32 start = min(cast<uint32_t>(max(Val<int32_t>(cu[b]), 0)), rows);
  u32 end = min(cast<uint32_t>(max(Val<int32_t>(cu[b + 1u]), 0)), rows);
  return {0u, start, select(end > start, end - start, 0u)};
}

// Whether key kj is seen by query qi of a sequence whose keys are `shift` (seq_k - seq_q) ahead
// of its queries (PyTorch's bottom-right alignment): per bound that is not negative, kj <= qi +
// shift + right and kj >= qi + shift - left (causal is right = 0).
inline dsl::Val<bool> seen_by(const dsl::i32& kj, const dsl::i32& qi, const dsl::i32& shift,
                              const dsl::i32& left, const dsl::i32& right) {
  return (right < 0 || kj <= qi + shift + right) && (left < 0 || kj >= qi + shift - left);
}
// `inside` (the key and query exist) and seen_by, in the order the GPUs' fragment kernels were
// tuned with: ptxas allocates registers differently for the same test grouped otherwise (24
// bytes of spills in attention_bwd_dkdv at head size 128 on sm_80).
inline dsl::Val<bool> seen_by(const dsl::Val<bool>& inside, const dsl::i32& kj, const dsl::i32& qi,
                              const dsl::i32& shift, const dsl::i32& left, const dsl::i32& right) {
  return (inside && (right < 0 || kj <= qi + shift + right)) &&
         (left < 0 || kj >= qi + shift - left);
}

}  // namespace kiln::lib::detail
