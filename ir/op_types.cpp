// The type rules of every op signature (check_op_types), by family of signatures, and the
// rules of the matrix ops (fragments, wgmma, tcgen05) they call.
#include "ir/ops.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/float16.h"
#include "ir/result.h"

namespace kiln::ir {

namespace {

using namespace op_flags;

bool class_accepts(OperandClass c, ElemType t) {
  const bool is32or64 = elem_bits(t) == 32 || elem_bits(t) == 64;
  switch (c) {
    case OperandClass::Any:
      return true;
    case OperandClass::Numeric:
      return !is_bool(t);
    case OperandClass::Int:
      return is_int(t);
    case OperandClass::Float:
      return is_float(t);
    case OperandClass::IntOrBool:
      return !is_float(t);
    case OperandClass::Bool:
      return is_bool(t);
    case OperandClass::AtomicAdd:
    case OperandClass::AtomicAny:
      return is32or64 && !is_bool(t);
    case OperandClass::AtomicInt:
      return is32or64 && is_int(t);
  }
  return false;
}

std::string_view class_words(OperandClass c) {
  switch (c) {
    case OperandClass::Any:
      return "any type";
    case OperandClass::Numeric:
      return "integers or floats";
    case OperandClass::Int:
      return "integers";
    case OperandClass::Float:
      return "floats (f16, bf16, f32, f64, f8e4m3, f8e5m2)";
    case OperandClass::IntOrBool:
      return "integers or bool";
    case OperandClass::Bool:
      return "bool";
    case OperandClass::AtomicAdd:
    case OperandClass::AtomicAny:
      return "32- or 64-bit integers or floats";
    case OperandClass::AtomicInt:
      return "32- or 64-bit integers";
  }
  return "?";
}

const char* ordinal(size_t i) {
  static const char* names[] = {"first", "second", "third", "fourth", "fifth"};
  return i < 5 ? names[i] : "an";
}

bool is_u32(const Type& t) {
  return t.kind == TypeKind::Value && t.elem == ElemType::U32 && t.lanes == 1;
}

// Counts `{}` placeholders in a print format; `{{` and `}}` are literal braces.
// Returns -1 if the format has a lone or unmatched brace.
int count_placeholders(std::string_view f) {
  int n = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{') {
      if (i + 1 < f.size() && f[i + 1] == '{') {
        ++i;
      } else if (i + 1 < f.size() && f[i + 1] == '}') {
        ++n;
        ++i;
      } else {
        return -1;
      }
    } else if (f[i] == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}')
        ++i;
      else
        return -1;
    }
  }
  return n;
}

// The operand rules of the fragment ops (everything but alloc.frag).
// Longer than 150 lines on purpose: a flat table of one case per op over four shared operand
// checks, read one case at a time; splitting it would scatter one op's rules from its checks.
std::string check_frag_op(Sig sig, const std::string& name, std::span<const Type> ops,
                          const Attr& attr) {
  auto tn = [](const Type& t) { return type_name(t); };
  auto need_frag = [&](size_t i, const char* what) -> std::string {
    if (!ops[i].is_frag())
      return fmt::format("the {} of '{}' must be a fragment, got {}", what, name, tn(ops[i]));
    return {};
  };
  auto need_u32 = [&](size_t i, const char* what) -> std::string {
    if (!is_u32(ops[i]))
      return fmt::format("the {} of '{}' must be u32, got {}", what, name, tn(ops[i]));
    return {};
  };
  // Fragments load from and store to global or shared memory of single elements of their type.
  auto need_memory = [&](size_t m, const Type& f, bool write) -> std::string {
    const Type& t = ops[m];
    if (!(t.is_global() || t.kind == TypeKind::Shared))
      return fmt::format("'{}' needs global or shared memory, got {}", name, tn(t));
    if (t.lanes != 1)
      return fmt::format(
          "'{}' addresses single elements: the memory's line width must be 1, got {}", name, tn(t));
    if (t.elem != f.elem)
      return fmt::format("'{}' of {} needs memory of {}, got {}", name, tn(f), elem_name(f.elem),
                         tn(t));
    if (write && t.read_only)
      return fmt::format("cannot store to read-only memory {}; declare the parameter writable",
                         tn(t));
    return {};
  };
  auto same_shape = [&](const Type& a, const Type& b) -> std::string {
    if (a.m != b.m || a.n != b.n || a.k != b.k)
      return fmt::format("'{}' needs fragments of one shape m x n x k, got {} and {}", name, tn(a),
                         tn(b));
    return {};
  };
#define KILN_REQ(expr)          \
  do {                          \
    std::string e_ = (expr);    \
    if (!e_.empty()) return e_; \
  } while (0)
  switch (sig) {
    case Sig::FragFill:
      KILN_REQ(need_frag(0, "first operand"));
      if (!(ops[1] == ops[0].scalar()))
        return fmt::format("'frag.fill' of {} needs a {} scalar, got {}", tn(ops[0]),
                           elem_name(ops[0].elem), tn(ops[1]));
      break;
    case Sig::FragLoad:
      KILN_REQ(need_frag(0, "first operand"));
      KILN_REQ(need_memory(1, ops[0], false));
      KILN_REQ(need_u32(2, "index"));
      KILN_REQ(need_u32(3, "stride"));
      KILN_REQ(need_u32(4, "row count"));
      KILN_REQ(need_u32(5, "column count"));
      break;
    case Sig::FragStore:
      KILN_REQ(need_frag(5, "last operand"));
      if (ops[5].use != FragUse::Acc)
        return fmt::format("'frag.store' stores accumulators, not {}", tn(ops[5]));
      KILN_REQ(need_memory(0, ops[5], true));
      KILN_REQ(need_u32(1, "index"));
      KILN_REQ(need_u32(2, "stride"));
      KILN_REQ(need_u32(3, "row count"));
      KILN_REQ(need_u32(4, "column count"));
      break;
    case Sig::FragMma: {
      KILN_REQ(need_frag(0, "accumulator"));
      KILN_REQ(need_frag(1, "a operand"));
      KILN_REQ(need_frag(2, "b operand"));
      const Type &c = ops[0], &a = ops[1], &b = ops[2];
      if (c.use != FragUse::Acc || a.use != FragUse::A || b.use != FragUse::B)
        return fmt::format("'frag.mma' takes an accumulator, an A and a B fragment, got {}, {}, {}",
                           tn(c), tn(a), tn(b));
      KILN_REQ(same_shape(c, a));
      KILN_REQ(same_shape(c, b));
      if (a.elem != b.elem)
        return fmt::format("'frag.mma' needs A and B of one element type, got {} and {}",
                           elem_name(a.elem), elem_name(b.elem));
      if (c.elem != frag_acc_elem(a.elem))
        return fmt::format(
            "'frag.mma' of {} inputs accumulates in {}, not {}; cast the "
            "accumulator after the multiplies",
            elem_name(a.elem), elem_name(frag_acc_elem(a.elem)), elem_name(c.elem));
      break;
    }
    case Sig::FragLdmatrix: {
      KILN_REQ(need_frag(0, "first operand"));
      const Type& f = ops[0];
      const int bytes = elem_bytes(f.elem);
      if (f.use == FragUse::Acc || (bytes != 2 && bytes != 1))
        return fmt::format(
            "'{}' loads A and B fragments of 16- or 8-bit inputs (ldmatrix moves "
            "16-bit halves), not {}; use 'frag.load'",
            name, tn(f));
      if (f.use == FragUse::B && f.n % 16 != 0)
        return fmt::format(
            "'{}' loads B fragments of n a multiple of 16 (ldmatrix.x4 takes 16 "
            "columns), not {}; use 'frag.load'",
            name, tn(f));
      if (bytes == 1 && attr.i != (f.use == FragUse::A ? 0u : 1u))
        return fmt::format(
            "'{}' of 8-bit inputs needs k contiguous (A row-major, B column-major: "
            "ldmatrix cannot transpose bytes), not {} layout for {}",
            name, attr.i == 1 ? "col" : "row", tn(f));
      if (ops[1].kind != TypeKind::Shared)
        return fmt::format("'{}' reads shared memory, not {}", name, tn(ops[1]));
      KILN_REQ(need_memory(1, f, false));
      KILN_REQ(need_u32(2, "index"));
      KILN_REQ(need_u32(3, "stride"));
      break;
    }
    case Sig::FragMmaScaled: {
      KILN_REQ(check_frag_op(Sig::FragMma, name, ops.subspan(0, 3), attr));
      if (!is_f8(ops[1].elem))
        return fmt::format("'{}' multiplies f8e4m3 or f8e5m2 inputs (kind::mxf8f6f4), not {}", name,
                           elem_name(ops[1].elem));
      for (size_t m : {size_t{3}, size_t{6}}) {
        const Type& t = ops[m];
        if (!(t.is_global() || t.kind == TypeKind::Shared) || t.elem != ElemType::U8 ||
            t.lanes != 1)
          return fmt::format(
              "the {} scales of '{}' are ue8m0 codes in global or shared memory "
              "of u8 (line width 1), not {}",
              m == 3 ? "A" : "B", name, tn(t));
        KILN_REQ(need_u32(m + 1, m == 3 ? "A scale index" : "B scale index"));
        KILN_REQ(need_u32(m + 2, m == 3 ? "A scale stride" : "B scale stride"));
      }
      break;
    }
    case Sig::FragCast:
      KILN_REQ(need_frag(0, "destination"));
      KILN_REQ(need_frag(1, "source"));
      if (ops[0].use == FragUse::A && ops[1].use == FragUse::Acc) {
        // An accumulator becomes the A operand of the next multiply (P = softmax(S) in P * V):
        // in mma.sync's layouts the elements of a 16-bit A tile are in the same lanes as the
        // accumulator elements of the same rows and columns, so no data moves between units.
        const Type &a = ops[0], &c = ops[1];
        if (a.elem != ElemType::F16 && a.elem != ElemType::BF16)
          return fmt::format(
              "'frag.cast' makes A fragments of f16 or bf16 from accumulators (their layouts "
              "match lane for lane), not {}; store the accumulator and load it instead",
              tn(a));
        if (a.m != c.m || a.k != c.n)
          return fmt::format(
              "'frag.cast' to an A fragment needs the accumulator's rows and columns as the A "
              "tile's m x k: {} has {} x {}, {} is {} x {}",
              tn(c), c.m, c.n, tn(a), a.m, a.k);
        break;
      }
      if (ops[0].use != FragUse::Acc || ops[1].use != FragUse::Acc)
        return fmt::format(
            "'frag.cast' converts accumulators, or an accumulator into an A fragment, got {} and "
            "{}",
            tn(ops[0]), tn(ops[1]));
      KILN_REQ(same_shape(ops[0], ops[1]));
      break;
    case Sig::FragGet:
    case Sig::FragSet: {
      KILN_REQ(need_frag(0, "first operand"));
      const Type& f = ops[0];
      if (f.use != FragUse::Acc)
        return fmt::format(
            "'{}' reads and writes the elements of accumulators, not {} (operands are packed "
            "differently per target)",
            name, tn(f));
      const uint64_t count = uint64_t{static_cast<uint64_t>(f.frag_rows())} * f.frag_cols() / 32;
      if (attr.i >= count)
        return fmt::format("'{}' element {} is out of range: each unit holds {} elements of {}",
                           name, attr.i, count, tn(f));
      if (sig == Sig::FragSet && !(ops[1] == f.scalar()))
        return fmt::format("'frag.set' of {} needs a {} scalar, got {}", tn(f), elem_name(f.elem),
                           tn(ops[1]));
      break;
    }
    case Sig::FragPlane:
      KILN_REQ(need_frag(0, "first operand"));
      KILN_REQ(need_u32(1, "plane"));
      break;
    case Sig::WgmmaDesc:
      if (ops[0].kind != TypeKind::Shared)
        return fmt::format(
            "'{}' describes a matrix in shared memory, not {}; copy the tile into a "
            "shared array first",
            name, tn(ops[0]));
      KILN_REQ(need_u32(1, "index"));
      KILN_REQ(need_u32(2, "leading byte offset"));
      KILN_REQ(need_u32(3, "stride byte offset"));
      if (!wgmma_swizzle_valid(attr.i))
        return fmt::format("'{}' has swizzle {}; it must be 0 (none), 32, 64 or 128 bytes", name,
                           attr.i);
      break;
    case Sig::Wgmma: {
      KILN_REQ(need_frag(0, "accumulator"));
      const Type& c = ops[0];
      const auto in = static_cast<ElemType>(attr.i & 0xff);
      const int step = frag_k_step(in);
      if ((attr.i >> (kWgmmaMajorShift + 2)) != 0 || step == 0)
        return fmt::format(
            "'wgmma.mma' multiplies f16, bf16, f32 (as tf32), i8, u8, f8e4m3 or f8e5m2 inputs; "
            "its input type attribute is invalid ({})",
            attr.i);
      if (const MmaMajors mj = mma_majors(attr.i, kWgmmaMajorShift);
          (mj.a_mn || mj.b_mn) && !mma_mn_major_valid(in))
        return fmt::format(
            "'wgmma.mma' of {} inputs reads K-major operands only (MN-major "
            "operands are f16 or bf16); lay the tile out K-major",
            elem_name(in));
      if (c.use != FragUse::Acc || c.m != 16 || c.k != step)
        return fmt::format(
            "'wgmma.mma' of {} inputs accumulates into a plane's 16 rows of the "
            "warpgroup's product, frag<acc, {}, 16, N, {}>; got {}",
            elem_name(in), elem_name(frag_acc_elem(in)), step, tn(c));
      if (c.elem != frag_acc_elem(in))
        return fmt::format("'wgmma.mma' of {} inputs accumulates in {}, not {}", elem_name(in),
                           elem_name(frag_acc_elem(in)), elem_name(c.elem));
      if (!wgmma_n_valid(in, c.n))
        return fmt::format(
            "'wgmma.mma' of {} inputs has no n = {} (n: {})", elem_name(in), c.n,
            is_int(in) ? "8, 16, 24, then multiples of 16 up to 256" : "multiples of 8 up to 256");
      for (size_t i : {size_t{1}, size_t{2}})
        if (!(ops[i] == Type::value(ElemType::U64)))
          return fmt::format(
              "the {} descriptor of 'wgmma.mma' must be a u64 from 'wgmma.desc', "
              "got {}",
              i == 1 ? "A" : "B", tn(ops[i]));
      break;
    }
    default:
      break;
  }
#undef KILN_REQ
  if ((sig == Sig::FragLoad || sig == Sig::FragStore || sig == Sig::FragLdmatrix) && attr.i > 1)
    return fmt::format("'{}' has an invalid layout {} (row or col)", name, attr.i);
  return {};
}

// The operand rules of the mbarrier, tensor-memory and tcgen05 ops.
// Longer than 150 lines on purpose, as check_frag_op: one case per op, read one at a time.
std::string check_tcgen05_op(Sig sig, const std::string& name, std::span<const Type> ops,
                             const Attr& attr) {
  auto tn = [](const Type& t) { return type_name(t); };
  auto need_u32 = [&](size_t i, const char* what) -> std::string {
    if (!is_u32(ops[i]))
      return fmt::format("the {} of '{}' must be u32, got {}", what, name, tn(ops[i]));
    return {};
  };
  auto need_columns = [&]() -> std::string {
    if (!tmem_columns_valid(attr.i))
      return fmt::format(
          "'{}' of {} columns: tensor memory is allocated in a power of two of "
          "columns from 32 to 512",
          name, attr.i);
    return {};
  };
  // An mbarrier is one u64 of a writable shared array.
  auto need_mbarrier = [&]() -> std::string {
    const Type& m = ops[0];
    if (m.kind != TypeKind::Shared || m.elem != ElemType::U64 || m.lanes != 1)
      return fmt::format("'{}' needs an mbarrier, an element of a shared array of u64, not {}",
                         name, tn(m));
    return need_u32(1, "index");
  };
  switch (sig) {
    case Sig::MbarInit:
      if (attr.i == 0 || attr.i >= (1u << 20))
        return fmt::format("'{}' counts 1 to {} {}, not {}", name, (1u << 20) - 1,
                           name == "mbar.init" ? "arrivals per phase" : "bytes", attr.i);
      return need_mbarrier();
    case Sig::MbarRef:
      return need_mbarrier();
    case Sig::MbarWait: {
      std::string e = need_mbarrier();
      return e.empty() ? need_u32(2, "phase parity") : e;
    }
    case Sig::TmemAlloc:
      return need_columns();
    case Sig::TmemFree: {
      std::string e = need_u32(0, "tensor-memory address");
      return e.empty() ? need_columns() : e;
    }
    case Sig::Tcgen05Mma: {
      const auto in = static_cast<ElemType>(attr.i & 0xff);
      const int n = static_cast<int>((attr.i >> 8) & 0xffff);
      if (frag_k_step(in) == 0 || (attr.i >> (kTcgen05MajorShift + 2)) != 0)
        return fmt::format(
            "'{}' multiplies f16, bf16, f32 (as tf32), i8, u8, f8e4m3 or f8e5m2 "
            "inputs; its type attribute is invalid ({})",
            name, attr.i);
      if (const MmaMajors mj = mma_majors(attr.i, kTcgen05MajorShift);
          (mj.a_mn || mj.b_mn) && !mma_mn_major_valid(in))
        return fmt::format(
            "'{}' of {} inputs reads K-major operands only in kiln (MN-major "
            "operands are f16 or bf16); lay the tile out K-major",
            name, elem_name(in));
      if (!tcgen05_n_valid(in, n))
        return fmt::format("'{}' of 128 rows has N a multiple of 16 from 16 to 256, not {}", name,
                           n);
      std::string e = need_u32(0, "tensor-memory address");
      if (!e.empty()) return e;
      for (size_t i : {size_t{1}, size_t{2}})
        if (!(ops[i] == Type::value(ElemType::U64)))
          return fmt::format("the {} descriptor of '{}' must be a u64 from 'tcgen05.desc', got {}",
                             i == 1 ? "A" : "B", name, tn(ops[i]));
      if (!(ops[3] == Type::value(ElemType::Bool)))
        return fmt::format("the accumulate flag of '{}' must be a bool scalar, got {}", name,
                           tn(ops[3]));
      return {};
    }
    case Sig::TmemRead: {
      std::string e = need_u32(0, "tensor-memory address");
      return e.empty() ? need_u32(1, "column") : e;
    }
    case Sig::TmemLoad: {
      const Type& m = ops[0];
      if (m.kind != TypeKind::Shared || m.lanes != 1 ||
          (m.elem != ElemType::F32 && m.elem != ElemType::I32 && m.elem != ElemType::U32))
        return fmt::format(
            "'{}' copies 32-bit columns into a shared array of f32, i32 or u32, "
            "not {}",
            name, tn(m));
      if (attr.i < 8 || attr.i > 512 || attr.i % 8 != 0)
        return fmt::format("'{}' copies a multiple of 8 columns up to 512, not {}", name, attr.i);
      std::string e = need_u32(1, "index");
      return e.empty() ? need_u32(2, "tensor-memory address") : e;
    }
    case Sig::TmaPrefetch: {
      if (ops.empty()) return fmt::format("'{}' takes a tensor, then the coordinates", name);
      const Type& t = ops[0];
      if (t.kind != TypeKind::Tensor || t.lanes != 1)
        return fmt::format("'{}' reads a tensor parameter of scalars (lines of 1), not {}", name,
                           tn(t));
      const TmaBox box = tma_box(attr.i);
      if (std::string e = tma_box_error(box, static_cast<uint32_t>(elem_bytes(t.elem))); !e.empty())
        return fmt::format("'{}': {}", name, e);
      if (box.im2col)
        return fmt::format("'{}' prefetches tiled boxes; an im2col box is only loaded (tma.load)",
                           name);
      if (t.rank != box.rank || ops.size() != 1 + box.rank)
        return fmt::format(
            "'{}' of a rank-{} tensor takes a box of that rank and one coordinate "
            "per dimension; got a rank-{} box and {} coordinates",
            name, t.rank, box.rank, ops.size() - 1);
      for (size_t i = 1; i < ops.size(); ++i)
        if (!(ops[i] == Type::value(ElemType::I32)))
          return fmt::format("the coordinates of '{}' are i32 scalars, got {}", name, tn(ops[i]));
      return {};
    }
    case Sig::TmaLoad:
    case Sig::TmaStore: {
      const bool store = sig == Sig::TmaStore;
      const bool multicast = name == op_name(OpKind::TmaLoadMulticast);
      const TmaOperands at = tma_operands(store       ? OpKind::TmaStore
                                          : multicast ? OpKind::TmaLoadMulticast
                                                      : OpKind::TmaLoad);
      if (ops.size() < at.coords)
        return fmt::format("'{}' takes {}, then the coordinates; got {} operands", name,
                           store ? "a tensor, a shared array and an index"
                                 : "a destination, an index, a tensor, an mbarrier and its index",
                           ops.size());
      const Type &m = ops[at.shared], &t = ops[at.tensor];
      if (m.kind != TypeKind::Shared || m.lanes != 1)
        return fmt::format("'{}' copies {} a shared array of scalars, not {}", name,
                           store ? "from" : "into", tn(m));
      if (t.kind != TypeKind::Tensor || t.lanes != 1)
        return fmt::format("'{}' copies {} a tensor parameter of scalars (lines of 1), not {}",
                           name, store ? "into" : "from", tn(t));
      if (store && t.read_only)
        return fmt::format("'{}' writes to a read-only tensor ({}); declare it writable", name,
                           tn(t));
      if (t.elem != m.elem || t.elem == ElemType::Bool)
        return fmt::format(
            "'{}' copies between {} elements and a shared array of {}; the types must be the "
            "same number type",
            name, elem_name(t.elem), elem_name(m.elem));
      const TmaBox box = tma_box(attr.i);
      if (std::string e = tma_box_error(box, static_cast<uint32_t>(elem_bytes(t.elem))); !e.empty())
        return fmt::format("'{}': {}", name, e);
      if (const TmaReduce red = tma_reduce(attr.i); red != TmaReduce::None) {
        if (!store) return fmt::format("'{}' copies; only tma.store reduces into the tensor", name);
        if (!tma_reduce_allowed(red, t.elem))
          return fmt::format(
              "'{}': TMA has no {} reduction of {} elements (add: f16, bf16, f32, i32, u32, u64; "
              "min and max: f16, bf16, i32, u32, i64, u64)",
              name, tma_reduce_name(red), elem_name(t.elem));
      }
      if (tma_async(attr.i) && !store)
        return fmt::format("'{}' completes on its mbarrier; only tma.store is made async", name);
      if (box.im2col && (store || multicast))
        return fmt::format("'{}' copies tiled boxes; an im2col box is only loaded (tma.load)",
                           name);
      const size_t offsets = box.im2col ? tma_spatial(box) : 0;
      if (box.fill_nan && !tma_nan_fill_allowed(t.elem))
        return fmt::format("'{}': a NaN fill is for f16, bf16, f32 and f64 tensors, not {}", name,
                           elem_name(t.elem));
      if (box.im2col && (t.rank != box.rank || ops.size() != at.coords + box.rank + offsets))
        return fmt::format(
            "'{}' of an im2col box of a rank-{} tensor takes {} coordinates and {} offsets (one "
            "per spatial dimension); got a rank-{} box and {} operands after the mbarrier",
            name, t.rank, t.rank, t.rank >= 2 ? t.rank - 2 : 0, box.rank, ops.size() - at.coords);
      if (t.rank != box.rank || ops.size() != at.coords + box.rank + offsets)
        return fmt::format(
            "'{}' of a rank-{} tensor takes a box of that rank and one coordinate "
            "per dimension; got a rank-{} box and {} coordinates",
            name, t.rank, box.rank, ops.size() - at.coords);
      if (!store &&
          (ops[3].kind != TypeKind::Shared || ops[3].elem != ElemType::U64 || ops[3].lanes != 1))
        return fmt::format(
            "'{}' completes on an mbarrier, an element of a shared array of u64, not {}", name,
            tn(ops[3]));
      if (std::string e = need_u32(at.index, "index"); !e.empty()) return e;
      if (!store)
        if (std::string e = need_u32(4, "mbarrier index"); !e.empty()) return e;
      if (multicast && !(ops[5] == Type::value(ElemType::U16)))
        return fmt::format(
            "the mask of '{}' (bit r: the cube of rank r in the cluster) is a u16 scalar, got {}",
            name, tn(ops[5]));
      for (size_t i = at.coords; i < at.coords + box.rank; ++i)
        if (!(ops[i] == Type::value(ElemType::I32)))
          return fmt::format(
              "the coordinates of '{}' are i32 scalars (a box may start before the "
              "tensor), got {}",
              name, tn(ops[i]));
      for (size_t i = at.coords + box.rank; i < ops.size(); ++i)
        if (!(ops[i] == Type::value(ElemType::U16)))
          return fmt::format(
              "the im2col offsets of '{}' (the filter position) are u16 scalars, got {}", name,
              tn(ops[i]));
      return {};
    }
    default:
      return {};
  }
}

}  // namespace

namespace {

// The type rules of check_op_types over one op, by family of signatures: each family's function
// sets `out` and returns what is wrong ("" when nothing), and clears `handled` when the
// signature is not of its family.
struct TypeRules {
  const OpInfo& info;
  std::string name;
  std::span<const Type> ops;
  const Attr& attr;
  Type declared;
  Type out = Type::void_type();

  static std::string tn(const Type& t) { return type_name(t); }
  // Operand i must be a value (a line) whose element type the op's class accepts.
  std::string need_value(size_t i, OperandClass c) const {
    if (!ops[i].is_value())
      return fmt::format("the {} operand of '{}' must be a value, not {}", ordinal(i), name,
                         tn(ops[i]));
    if (!class_accepts(c, ops[i].elem))
      return fmt::format("'{}' takes {}, but its {} operand is {}", name, class_words(c),
                         ordinal(i), tn(ops[i]));
    return {};
  }
  std::string all_same() const {
    for (size_t i = 1; i < ops.size(); ++i)
      if (!(ops[i] == ops[0]))
        return fmt::format(
            "the operands of '{}' must have the same type, got {} and {}; insert a cast or "
            "broadcast",
            name, tn(ops[0]), tn(ops[i]));
    return {};
  }
  std::string need_u32(size_t i, const char* what) const {
    if (!is_u32(ops[i]))
      return fmt::format("the {} of '{}' must be u32, got {}", what, name, tn(ops[i]));
    return {};
  }

  std::string values(
      bool& handled);  // constants, builtins, arithmetic, comparisons, casts and lanes
  std::string memory(
      bool& handled);  // shared and local arrays, tensors, loads and stores, variables, atomics
  std::string control(bool& handled);  // control flow, planes, pipelines, prints and asserts
  std::string matrices(
      bool& handled);  // fragments, wgmma, asynchronous copies, mbarriers, tensor memory and TMA
};

#define KILN_REQ(expr)          \
  do {                          \
    std::string e_ = (expr);    \
    if (!e_.empty()) return e_; \
  } while (0)

// The rules of constants, builtins, arithmetic, comparisons, casts and lanes.
std::string TypeRules::values(bool& handled) {
  switch (info.sig) {
    case Sig::Const: {
      if (!declared.is_value()) return fmt::format("a constant must have a value type");
      if (is_float(declared.elem)) {
        if (attr.i != 0) return "a float constant must carry its value as a float literal";
        if (declared.elem == ElemType::F8E4M3 && std::isinf(attr.f))
          return "f8e4m3 has no infinity (its largest value is 448)";
        if (!std::isnan(attr.f) && !std::isinf(attr.f)) {
          const double r = round_float_literal(declared.elem, attr.f);
          if (std::isinf(r))
            return fmt::format("constant {} is out of range for {}", attr.f, tn(declared));
          if (r != attr.f)
            return fmt::format("constant {} is not exactly representable in {} (nearest: {})",
                               attr.f, elem_name(declared.elem), r);
        }
      } else {
        if (attr.f != 0.0) return "an integer or bool constant must carry an integer literal";
        if (!int_literal_fits(declared.elem, attr.i)) {
          const std::string lit = is_signed(declared.elem)
                                      ? std::to_string(static_cast<int64_t>(attr.i))
                                      : std::to_string(attr.i);
          return fmt::format("constant {} is out of range for {}", lit, tn(declared));
        }
      }
      out = declared;
      break;
    }
    case Sig::Builtin:
      if (attr.i > 3) return fmt::format("'{}' has an invalid axis {}", name, attr.i);
      out = Type::value(ElemType::U32);
      break;
    case Sig::BuiltinScalar:
      if (attr.i != 0) return fmt::format("'{}' takes no axis", name);
      out = Type::value(ElemType::U32);
      break;
    case Sig::Unary:
    case Sig::Binary:
    case Sig::Ternary:
    case Sig::PlaneReduce:
      for (size_t i = 0; i < ops.size(); ++i) KILN_REQ(need_value(i, info.operand_class));
      KILN_REQ(all_same());
      out = ops[0];
      break;
    case Sig::Compare:
      for (size_t i = 0; i < 2; ++i) KILN_REQ(need_value(i, info.operand_class));
      KILN_REQ(all_same());
      out = Type::value(ElemType::Bool, ops[0].lanes);
      break;
    case Sig::Select:
      KILN_REQ(need_value(0, OperandClass::Bool));
      KILN_REQ(need_value(1, OperandClass::Any));
      KILN_REQ(need_value(2, OperandClass::Any));
      if (!(ops[1] == ops[2]))
        return fmt::format("the two choices of 'select' must have the same type, got {} and {}",
                           tn(ops[1]), tn(ops[2]));
      if (ops[0].lanes != 1 && ops[0].lanes != ops[1].lanes)
        return fmt::format("the condition of 'select' is {} but the choices are {}", tn(ops[0]),
                           tn(ops[1]));
      out = ops[1];
      break;
    case Sig::Cast:
    case Sig::Bitcast:
      KILN_REQ(need_value(0, OperandClass::Any));
      if (!declared.is_value())
        return fmt::format("'{}' must produce a value type, not {}", name, tn(declared));
      if (declared.lanes != ops[0].lanes)
        return fmt::format("'{}' keeps the line width: {} cannot become {}", name, tn(ops[0]),
                           tn(declared));
      if (info.sig == Sig::Bitcast && (is_bool(ops[0].elem) || is_bool(declared.elem) ||
                                       elem_bits(ops[0].elem) != elem_bits(declared.elem)))
        return fmt::format(
            "'bitcast' needs element types of the same bit width, not bool: {} "
            "to {}",
            tn(ops[0]), tn(declared));
      out = declared;
      break;
    case Sig::Broadcast:
      KILN_REQ(need_value(0, OperandClass::Any));
      if (ops[0].lanes != 1) return fmt::format("'broadcast' takes a scalar, got {}", tn(ops[0]));
      if (!declared.is_value() || declared.elem != ops[0].elem)
        return fmt::format("'broadcast' of {} must produce a line of {}, not {}", tn(ops[0]),
                           tn(ops[0]), tn(declared));
      out = declared;
      break;
    case Sig::Extract:
      KILN_REQ(need_value(0, OperandClass::Any));
      if (attr.i >= ops[0].lanes)
        return fmt::format("lane {} is out of range for {}", attr.i, tn(ops[0]));
      out = ops[0].scalar();
      break;
    case Sig::Insert:
      KILN_REQ(need_value(0, OperandClass::Any));
      KILN_REQ(need_value(1, OperandClass::Any));
      if (!(ops[1] == ops[0].scalar()))
        return fmt::format("'insert' into {} needs a {} scalar, got {}", tn(ops[0]),
                           tn(ops[0].scalar()), tn(ops[1]));
      if (attr.i >= ops[0].lanes)
        return fmt::format("lane {} is out of range for {}", attr.i, tn(ops[0]));
      out = ops[0];
      break;
    case Sig::FloatTest:
      KILN_REQ(need_value(0, OperandClass::Float));
      out = Type::value(ElemType::Bool, ops[0].lanes);
      break;
    default:
      handled = false;
  }
  return {};
}

// The rules of shared and local arrays, tensors, loads and stores, variables, atomics.
std::string TypeRules::memory(bool& handled) {
  switch (info.sig) {
    case Sig::AllocShared:
    case Sig::AllocLocal: {
      const TypeKind k = info.sig == Sig::AllocShared ? TypeKind::Shared : TypeKind::Local;
      if (declared.kind != k)
        return fmt::format("'{}' must produce a {} type, not {}", name,
                           k == TypeKind::Shared ? "shared<...>" : "local<...>", tn(declared));
      if (declared.count == 0) return fmt::format("'{}' needs at least one line", name);
      const uint64_t bytes = uint64_t{declared.count} * declared.lanes *
                             static_cast<uint64_t>(elem_bytes(declared.elem));
      if (bytes > (uint64_t{1} << 30))
        return fmt::format("'{}' of {} bytes is too large", name, bytes);
      out = declared;
      break;
    }
    case Sig::Len:
      if (!ops[0].is_memory())
        return fmt::format("'len' takes a memory object, got {}", tn(ops[0]));
      out = Type::value(ElemType::U32);
      break;
    case Sig::ShapeStride:
      if (ops[0].kind != TypeKind::Tensor)
        return fmt::format("'{}' takes a tensor, got {}", name, tn(ops[0]));
      if (attr.i >= ops[0].rank)
        return fmt::format("dimension {} is out of range for a tensor of rank {}", attr.i,
                           ops[0].rank);
      out = Type::value(ElemType::U32);
      break;
    case Sig::Load:
      if (!ops[0].is_memory())
        return fmt::format("'load' takes a memory object, got {}", tn(ops[0]));
      KILN_REQ(need_u32(1, "index"));
      out = ops[0].line();
      break;
    case Sig::ClusterLoad:
      if (ops[0].kind != TypeKind::Shared)
        return fmt::format("'{}' reads a shared array of another cube of the cluster, not {}", name,
                           tn(ops[0]));
      KILN_REQ(need_u32(1, "cluster rank"));
      KILN_REQ(need_u32(2, "index"));
      out = ops[0].line();
      break;
    case Sig::Store:
      if (!ops[0].is_memory())
        return fmt::format("'store' takes a memory object, got {}", tn(ops[0]));
      if (ops[0].read_only)
        return fmt::format("cannot store to read-only memory {}; declare the parameter writable",
                           tn(ops[0]));
      KILN_REQ(need_u32(1, "index"));
      if (!(ops[2] == ops[0].line()))
        return fmt::format(
            "storing {} into memory of {}: the value must have the memory's "
            "line type",
            tn(ops[2]), tn(ops[0].line()));
      break;
    case Sig::Var:
      KILN_REQ(need_value(0, OperandClass::Any));
      out = Type::var(ops[0].elem, ops[0].lanes);
      break;
    case Sig::VarRead:
      if (!ops[0].is_var()) return fmt::format("'var.read' takes a variable, got {}", tn(ops[0]));
      out = ops[0].line();
      break;
    case Sig::VarWrite:
      if (!ops[0].is_var()) return fmt::format("'var.write' takes a variable, got {}", tn(ops[0]));
      if (!(ops[1] == ops[0].line()))
        return fmt::format("writing {} into {}: types differ", tn(ops[1]), tn(ops[0]));
      break;
    case Sig::Atomic:
    case Sig::AtomicCas: {
      const Type& m = ops[0];
      if (!(m.is_global() || m.kind == TypeKind::Shared))
        return fmt::format("'{}' needs global or shared memory, got {}", name, tn(m));
      if (m.read_only) return fmt::format("'{}' cannot modify read-only memory {}", name, tn(m));
      if (m.lanes != 1)
        return fmt::format(
            "'{}' works on single elements: the memory's line width must be 1, "
            "got {}",
            name, tn(m));
      if (!class_accepts(info.operand_class, m.elem))
        return fmt::format("'{}' supports {}, not {}", name, class_words(info.operand_class),
                           elem_name(m.elem));
      KILN_REQ(need_u32(1, "index"));
      for (size_t i = 2; i < ops.size(); ++i)
        if (!(ops[i] == m.line()))
          return fmt::format("the {} operand of '{}' must be {}, got {}", ordinal(i), name,
                             tn(m.line()), tn(ops[i]));
      out = m.line();
      break;
    }
    default:
      handled = false;
  }
  return {};
}

// The rules of control flow, planes, pipelines, prints and asserts.
std::string TypeRules::control(bool& handled) {
  switch (info.sig) {
    case Sig::Nullary:
    case Sig::Loop:
    case Sig::Jump:
      break;
    case Sig::PlaneLane:
      KILN_REQ(need_value(0, OperandClass::Any));
      KILN_REQ(need_u32(1, "lane"));
      out = ops[0];
      break;
    case Sig::If:
      if (!(ops[0] == Type::value(ElemType::Bool)))
        return fmt::format("the condition of 'if' must be a bool scalar, got {}", tn(ops[0]));
      break;
    case Sig::For:
      for (size_t i = 0; i < 3; ++i) KILN_REQ(need_value(i, OperandClass::Int));
      KILN_REQ(all_same());
      if (ops[0].lanes != 1)
        return fmt::format("the bounds of 'for' must be scalars, got {}", tn(ops[0]));
      if (attr.i > 1024 && attr.i != kUnrollFull)
        return fmt::format("unroll factor {} is too large (at most 1024, or 'full')", attr.i);
      break;
    case Sig::Units:
      KILN_REQ(need_u32(0, "start"));
      KILN_REQ(need_u32(1, "end"));
      break;
    case Sig::Pipeline: {
      KILN_REQ(need_u32(0, "round count"));
      const uint32_t stages = pipeline_stages(attr.i), lag = pipeline_lag(attr.i);
      if (stages < 1 || stages > kMaxPipelineStages || attr.i >> 33 ||
          (pipeline_commit(attr.i) && lag != 0))
        return fmt::format("a pipeline has 1 to {} stages, not {}", kMaxPipelineStages, stages);
      if (std::string e = pipeline_registers_error(pipeline_registers(attr.i)); !e.empty())
        return e;
      if (lag >= stages)
        return fmt::format(
            "a pipeline's release lag must be below its stages ({}), not {}: the "
            "producer would wait for a stage the consumers cannot release yet",
            stages, lag);
      for (size_t i = 1; i < 3; ++i) {
        const Type& m = ops[i];
        const char* what = i == 1 ? "full" : "empty";
        if (m.kind != TypeKind::Shared || m.elem != ElemType::U64 || m.lanes != 1)
          return fmt::format("the {} mbarriers of a pipeline are a shared array of u64, not {}",
                             what, tn(m));
        if (m.count < stages)
          return fmt::format(
              "the {} mbarriers of a pipeline of {} stages need {} elements; the "
              "array has {}",
              what, stages, stages, m.count);
      }
      break;
    }
    case Sig::Print: {
      for (size_t i = 0; i < ops.size(); ++i)
        if (!ops[i].is_value())
          return fmt::format("'print' takes values, but its {} operand is {}", ordinal(i),
                             tn(ops[i]));
      const int n = count_placeholders(attr.s);
      if (n < 0)
        return "the 'print' format has an unmatched brace; write '{{' or '}}' for a literal "
               "brace";
      if (n != static_cast<int>(ops.size()))
        return fmt::format("the 'print' format has {} placeholder{} but {} value{} given", n,
                           n == 1 ? "" : "s", ops.size(), ops.size() == 1 ? " is" : "s are");
      break;
    }
    case Sig::Assert:
      if (!(ops[0] == Type::value(ElemType::Bool)))
        return fmt::format("the condition of 'assert' must be a bool scalar, got {}", tn(ops[0]));
      break;
    default:
      handled = false;
  }
  return {};
}

// The rules of fragments, wgmma, asynchronous copies, mbarriers, tensor memory and TMA.
std::string TypeRules::matrices(bool& handled) {
  switch (info.sig) {
    case Sig::AllocFrag:
      if (declared.kind != TypeKind::Frag)
        return fmt::format("'alloc.frag' must produce a frag<...> type, not {}", tn(declared));
      KILN_REQ(frag_type_error(declared));
      out = declared;
      break;
    case Sig::FragFill:
    case Sig::FragLoad:
    case Sig::FragStore:
    case Sig::FragMma:
    case Sig::FragCast:
    case Sig::FragPlane:
    case Sig::FragMmaScaled:
    case Sig::FragLdmatrix:
    case Sig::Wgmma:
    case Sig::FragGet:
    case Sig::FragSet:
      KILN_REQ(check_frag_op(info.sig, name, ops, attr));
      if (info.sig == Sig::FragPlane) out = ops[0];
      if (info.sig == Sig::FragGet) out = ops[0].scalar();
      break;
    case Sig::FragMem: {
      if (!ops[0].is_frag() || ops[0].use != FragUse::Acc)
        return fmt::format("'frag.mem' takes an accumulator, got {}", tn(ops[0]));
      const ElemType e = is_int(ops[0].elem) ? ElemType::I32 : ElemType::F32;
      const uint32_t tile = static_cast<uint32_t>(ops[0].frag_rows() * ops[0].frag_cols());
      if (declared.kind != TypeKind::Shared || declared.elem != e || declared.lanes != 1 ||
          declared.count == 0 || declared.count % tile != 0)
        return fmt::format(
            "'frag.mem' of {} is a shared array of {} holding whole {}-element tiles, not {}",
            tn(ops[0]), elem_name(e), tile, tn(declared));
      out = declared;
      break;
    }
    case Sig::WgmmaDesc:
      KILN_REQ(check_frag_op(info.sig, name, ops, attr));
      out = Type::value(ElemType::U64);
      break;
    case Sig::WgmmaWait:
      if (attr.i > 7)
        return fmt::format("'{}' leaves 0 to 7 groups in flight, not {}", name, attr.i);
      break;
    case Sig::AsyncCopy: {
      const Type &m = ops[0], &g = ops[2];
      if (m.kind != TypeKind::Shared || m.lanes != 1)
        return fmt::format("'{}' copies into a shared array of scalars, not {}", name, tn(m));
      if ((g.kind != TypeKind::Tensor && g.kind != TypeKind::Array) || g.lanes != 1)
        return fmt::format("'{}' copies from a tensor or array of scalars (lines of 1), not {}",
                           name, tn(g));
      if (g.elem != m.elem || g.elem == ElemType::Bool)
        return fmt::format(
            "'{}' copies between {} elements and a shared array of {}; the types must be the "
            "same number type",
            name, elem_name(g.elem), elem_name(m.elem));
      KILN_REQ(need_u32(1, "shared index"));
      KILN_REQ(need_u32(3, "global index"));
      if (!(ops[4] == Type::value(ElemType::Bool)))
        return fmt::format("the valid flag of '{}' must be a bool scalar, got {}", name,
                           tn(ops[4]));
      break;
    }
    case Sig::MbarInit:
    case Sig::MbarWait:
    case Sig::MbarRef:
      KILN_REQ(check_tcgen05_op(info.sig, name, ops, attr));
      break;
    case Sig::TmemAlloc:
      KILN_REQ(check_tcgen05_op(info.sig, name, ops, attr));
      out = Type::value(ElemType::U32);
      break;
    case Sig::TmemFree:
    case Sig::Tcgen05Mma:
    case Sig::TmemLoad:
    case Sig::TmaLoad:
    case Sig::TmaStore:
    case Sig::TmaPrefetch:
      KILN_REQ(check_tcgen05_op(info.sig, name, ops, attr));
      break;
    case Sig::TmemRead:
      KILN_REQ(check_tcgen05_op(info.sig, name, ops, attr));
      if (!declared.is_value() ||
          (declared.elem != ElemType::F32 && declared.elem != ElemType::I32 &&
           declared.elem != ElemType::U32))
        return fmt::format(
            "'{}' reads 32-bit columns as f32, i32 or u32 (a line of them for "
            "consecutive columns), not {}",
            name, tn(declared));
      out = declared;
      break;
    default:
      handled = false;
  }
  return {};
}

#undef KILN_REQ

}  // namespace

std::string check_op_types(OpKind kind, std::span<const Type> ops, const Attr& attr, Type& result) {
  const OpInfo& info = op_info(kind);
  TypeRules r{info, std::string(info.name), ops, attr, result};
  const int want = sig_operand_count(info.sig);
  if (want >= 0 && static_cast<int>(ops.size()) != want)
    return fmt::format("'{}' takes {} operand{}, got {}", r.name, want, want == 1 ? "" : "s",
                       ops.size());
  if (sig_result_is_explicit(info.sig) && r.declared.is_void())
    return fmt::format("'{}' needs an explicit result type", r.name);
  std::string problem;
  bool handled = true;
  for (auto family :
       {&TypeRules::values, &TypeRules::memory, &TypeRules::control, &TypeRules::matrices}) {
    handled = true;
    problem = (r.*family)(handled);
    if (handled) break;
  }
  KILN_CHECK(handled, "every signature has its type rules");
  if (!problem.empty()) return problem;
  if (!sig_result_is_explicit(info.sig) && !r.declared.is_void() && !(r.declared == r.out))
    return fmt::format("'{}' produces {}, but its type is written as {}", r.name, r.tn(r.out),
                       r.tn(r.declared));
  result = r.out;
  return {};
}

}  // namespace kiln::ir
