// kiln IR -> CUDA C++.
#include "compiler/cuda/codegen.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/float16.h"

namespace kiln::cuda {

extern const char* const kPreludeText;  // prelude.cuh, embedded by the build (embed_text.cmake)

const std::string& prelude() {
  static const std::string p = kPreludeText;
  return p;
}

namespace {

using ir::ElemType;
using ir::OpKind;
using ir::Type;
using ir::TypeKind;
using ir::ValueId;

constexpr uint32_t kStaticSharedLimit = 48 * 1024;

std::string elem_c(ElemType e) {
  if (e == ElemType::Bool) return "bool";
  return fmt::format("kiln::{}", ir::elem_name(e));
}
// A value's C++ type: kiln::f32, kiln::f32x4, bool, kiln::boolx4.
std::string value_c(const Type& t) {
  if (t.lanes == 1) return elem_c(t.elem);
  return fmt::format("kiln::{}x{}",
                     t.elem == ElemType::Bool ? "bool" : std::string(ir::elem_name(t.elem)),
                     t.lanes);
}
// What memory holds per line: bools as kiln::mbool bytes.
std::string mem_line_c(const Type& t) {
  const std::string e = t.elem == ElemType::Bool ? "mbool" : std::string(ir::elem_name(t.elem));
  return t.lanes == 1 ? "kiln::" + e : fmt::format("kiln::{}x{}", e, t.lanes);
}
// A fragment's C++ type: kiln::frag_acc<kiln::f32, 16, 16, 16>.
std::string frag_c(const Type& t) {
  const char* use = t.use == ir::FragUse::A ? "a" : t.use == ir::FragUse::B ? "b" : "acc";
  return fmt::format("kiln::frag_{}<{}, {}, {}, {}>", use, elem_c(t.elem), t.m, t.n, t.k);
}
std::string uint_c(ElemType e) {
  switch (ir::elem_bits(e)) {
    case 8:
      return "kiln::u8";
    case 16:
      return "kiln::u16";
    case 64:
      return "kiln::u64";
    default:
      return "kiln::u32";
  }
}

bool is_keyword(const std::string& s) {
  static const std::set<std::string> k = {
      "alignas",   "alignof",  "and",      "asm",      "auto",     "bool",      "break",
      "case",      "catch",    "char",     "class",    "const",    "constexpr", "continue",
      "decltype",  "default",  "delete",   "do",       "double",   "else",      "enum",
      "explicit",  "export",   "extern",   "false",    "float",    "for",       "friend",
      "goto",      "if",       "inline",   "int",      "long",     "mutable",   "namespace",
      "new",       "noexcept", "not",      "nullptr",  "operator", "or",        "private",
      "protected", "public",   "register", "return",   "short",    "signed",    "sizeof",
      "static",    "struct",   "switch",   "template", "this",     "throw",     "true",
      "try",       "typedef",  "typeid",   "typename", "union",    "unsigned",  "using",
      "virtual",   "void",     "volatile", "while",    "xor",      "threadIdx", "blockIdx",
      "blockDim",  "gridDim",  "warpSize", "kiln",     "args",     "bits",      "main"};
  return k.count(s) > 0;
}

// A C++ literal for a constant of element type `e`.
std::string literal(ElemType e, const ir::Attr& a) {
  switch (e) {
    case ElemType::Bool:
      return a.i ? "true" : "false";
    case ElemType::I8:
      return fmt::format("(kiln::i8){}", static_cast<int8_t>(a.i));
    case ElemType::I16:
      return fmt::format("(kiln::i16){}", static_cast<int16_t>(a.i));
    case ElemType::I32: {
      const auto v = static_cast<int32_t>(a.i);
      return v == INT32_MIN ? "(-2147483647 - 1)" : fmt::format("{}", v);
    }
    case ElemType::I64: {
      const auto v = static_cast<int64_t>(a.i);
      return v == INT64_MIN ? "(-9223372036854775807LL - 1)" : fmt::format("{}LL", v);
    }
    case ElemType::U8:
      return fmt::format("(kiln::u8){}u", static_cast<uint8_t>(a.i));
    case ElemType::U16:
      return fmt::format("(kiln::u16){}u", static_cast<uint16_t>(a.i));
    case ElemType::U32:
      return fmt::format("{}u", static_cast<uint32_t>(a.i));
    case ElemType::U64:
      return fmt::format("{}ull", a.i);
    case ElemType::F16:
      return fmt::format("kiln::f16{{0x{:04x}}} /* {} */", f16_bits(a.f), a.f);
    case ElemType::BF16:
      return fmt::format("kiln::bf16{{0x{:04x}}} /* {} */", bf16_bits(a.f), a.f);
    case ElemType::F8E4M3:
      return fmt::format("kiln::f8e4m3{{0x{:02x}}} /* {} */", e4m3_bits(a.f), a.f);
    case ElemType::F8E5M2:
      return fmt::format("kiln::f8e5m2{{0x{:02x}}} /* {} */", e5m2_bits(a.f), a.f);
    case ElemType::F32: {
      const auto f = static_cast<float>(a.f);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (!std::isfinite(f)) return fmt::format("__uint_as_float(0x{:08x}u) /* {} */", bits, f);
      std::string s = fmt::format("{}", f);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s + "f";
    }
    case ElemType::F64: {
      uint64_t bits;
      std::memcpy(&bits, &a.f, 8);
      if (!std::isfinite(a.f))
        return fmt::format("__longlong_as_double(0x{:016x}LL) /* {} */", bits, a.f);
      std::string s = fmt::format("{}", a.f);
      if (s.find_first_of(".en") == std::string::npos) s += ".0";
      return s;
    }
  }
  return "0";
}

const char* func_name(OpKind k) {
  switch (k) {
    case OpKind::Add:
      return "add";
    case OpKind::Sub:
      return "sub";
    case OpKind::Mul:
      return "mul";
    case OpKind::Div:
      return "div";
    case OpKind::Rem:
      return "rem";
    case OpKind::Min:
      return "min";
    case OpKind::Max:
      return "max";
    case OpKind::Neg:
      return "neg";
    case OpKind::Abs:
      return "abs";
    case OpKind::Fma:
      return "fma";
    case OpKind::Clamp:
      return "clamp";
    case OpKind::And:
      return "band";
    case OpKind::Or:
      return "bor";
    case OpKind::Xor:
      return "bxor";
    case OpKind::Not:
      return "bnot";
    case OpKind::Shl:
      return "shl";
    case OpKind::Shr:
      return "shr";
    case OpKind::Eq:
      return "eq";
    case OpKind::Ne:
      return "ne";
    case OpKind::Lt:
      return "lt";
    case OpKind::Le:
      return "le";
    case OpKind::Gt:
      return "gt";
    case OpKind::Ge:
      return "ge";
    case OpKind::Select:
      return "select";
    case OpKind::Sqrt:
      return "sqrt";
    case OpKind::Rsqrt:
      return "rsqrt";
    case OpKind::Exp:
      return "exp";
    case OpKind::Exp2:
      return "exp2";
    case OpKind::Log:
      return "log";
    case OpKind::Log2:
      return "log2";
    case OpKind::Sin:
      return "sin";
    case OpKind::Cos:
      return "cos";
    case OpKind::Tanh:
      return "tanh";
    case OpKind::Pow:
      return "pow";
    case OpKind::Floor:
      return "floor";
    case OpKind::Ceil:
      return "ceil";
    case OpKind::Round:
      return "round";
    case OpKind::Trunc:
      return "trunc";
    case OpKind::IsNan:
      return "is_nan";
    case OpKind::IsInf:
      return "is_inf";
    case OpKind::PlaneSum:
      return "plane_sum";
    case OpKind::PlaneMin:
      return "plane_min";
    case OpKind::PlaneMax:
      return "plane_max";
    case OpKind::PlaneAny:
      return "plane_any";
    case OpKind::PlaneAll:
      return "plane_all";
    case OpKind::AtomicAdd:
      return "atomic_add";
    case OpKind::AtomicMin:
      return "atomic_min";
    case OpKind::AtomicMax:
      return "atomic_max";
    case OpKind::AtomicExchange:
      return "atomic_exchange";
    case OpKind::AtomicCas:
      return "atomic_cas";
    default:
      return nullptr;
  }
}

class Gen {
 public:
  Gen(const ir::Kernel& k, const CodegenOptions& o) : K(k), O(o) {}

  Result<Source> run() {
    info_.name = K.name;
    info_.symbol = "kiln_" + K.name;
    info_.cube_dim = K.cube_dim;
    info_.layout = abi::arg_layout(K);
    info_.tensor_maps = abi::tensor_map_sites(K);
    info_.checked = O.checked;
    units_ = K.units_per_cube();
    for (const ir::Op& op : K.body.ops)
      if (op.kind == OpKind::Pipeline) producer_ = true;
    // A pipeline's producer plane: 32 more units, after the consumers (the kernel's own).
    if (producer_) info_.cube_dim[0] += 32;
    find_used_metadata();
    plan_shared();
    name_params();
    KILN_TRY(check_supported(K.body));
    if (info_.tensor_maps.size() > kMaxTensorMaps)
      return Error(ErrorKind::Unsupported,
                   fmt::format("{}: error: kernel '{}' copies through {} TMA views (tensor and box "
                               "pairs); a kernel takes at most {}",
                               info_.tensor_maps[kMaxTensorMaps].where, K.name,
                               info_.tensor_maps.size(), kMaxTensorMaps));
    needs_report_ = O.checked || uses_reports(K.body);

    // The body first (it fills the report sites), then the header around it.
    indent_ = 1;
    KILN_TRY(region(K.body));
    std::string out;
    out +=
        fmt::format("// kernel '{}', generated by kiln from {}; cube {}x{}x{}{}.\n", K.name,
                    K.files.empty() ? std::string("(unknown source)") : K.files[0], K.cube_dim[0],
                    K.cube_dim[1], K.cube_dim[2], O.checked ? ", checked mode" : "");
    if (producer_) out += fmt::format("#define KILN_PRODUCER {}u\n", units_);
    out += fmt::format("#include \"{}\"\n\n", kPreludeName);
    const uint32_t slots = info_.layout.slot_count + kReportSlots;
    out += wgmma_instructions();
    if (info_.tensor_maps.empty()) {
      out += fmt::format("struct {}_args {{ kiln::u64 slot[{}]; }};\n\n", info_.symbol, slots);
    } else {
      // The maps must stay in parameter space (TMA reads them there): __grid_constant__.
      out += fmt::format("struct {}_args {{ kiln::u64 slot[{}]; kiln::tensor_map map[{}]; }};\n\n",
                         info_.symbol, slots, info_.tensor_maps.size());
    }
    out += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({}) {}(const {}{}_args args) {{\n",
        units_ + (producer_ ? 32 : 0), info_.symbol,
        info_.tensor_maps.empty() ? "" : "__grid_constant__ ", info_.symbol);
    out += params_text();
    if (needs_report_) {
      out += fmt::format("  kiln::report* const kiln_report = (kiln::report*)args.slot[{}];\n",
                         info_.layout.slot_count);
      out += fmt::format(
          "  const kiln::u64 kiln_key = kiln::report_key((kiln::u32)args.slot[{}], "
          "kiln::cube_linear(), "
          "kiln::unit_linear());\n",
          info_.layout.slot_count + 1);
    }
    if (info_.dynamic_shared_bytes) out += "  KILN_DYNAMIC_SHARED_BASE();\n";
    if (!wgmma_ops_.empty()) out += "  kiln::wgmma_state kiln_wg;\n";
    out += body_;
    out += "}\n";
    Source s;
    s.text = std::move(out);
    s.info = std::move(info_);
    return s;
  }

 private:
  const ir::Kernel& K;
  const CodegenOptions& O;
  abi::KernelInfo info_;
  uint32_t units_ = 1;     // the kernel's units (a pipeline's consumers)
  bool producer_ = false;  // the kernel has a pipeline, and the cube a producer plane
  bool needs_report_ = false;
  std::string body_;
  int indent_ = 1;
  ir::SourceLoc last_loc_{};
  std::map<ValueId, std::string> mem_name_;  // parameters and memory objects: their C++ names
  std::map<ValueId, uint32_t> shared_offset_;
  std::set<ValueId> wgmma_arrays_, wgmma_accs_;  // shared arrays and accumulators of wgmma
  // (input type, n, majors: bit 0 A MN-major, bit 1 B) of each wgmma.mma
  std::set<std::tuple<ElemType, int, int>> wgmma_ops_;
  std::map<ValueId, uint32_t> tmem_slot_;           // tmem.alloc result -> its slot's offset
  std::set<std::pair<ValueId, std::string>> used_;  // metadata the body reads
  std::map<std::string, std::string> param_name_;
  uint32_t shared_total_ = 0;

  const Type& type(ValueId v) const { return K.type_of(v); }
  std::string v(ValueId id) const {
    auto it = mem_name_.find(id);
    return it != mem_name_.end() ? it->second : fmt::format("v{}", id);
  }

  // ---- set-up -----------------------------------------------------------------------------

  Status check_supported(const ir::Region& r) {
    for (const ir::Op& op : r.ops) {
      if (op.kind == OpKind::Units)
        return Error(
            ErrorKind::InvalidArgument,
            fmt::format(
                "kernel '{}' is lowered for the CPU (it has 'units' loops); the CUDA backend "
                "takes the kernel before CPU lowering",
                K.name));
      for (const ir::Region& sub : op.regions) KILN_TRY(check_supported(sub));
    }
    return {};
  }
  bool uses_reports(const ir::Region& r) const {
    for (const ir::Op& op : r.ops) {
      if (op.kind == OpKind::Print || op.kind == OpKind::Assert) return true;
      for (const ir::Region& sub : op.regions)
        if (uses_reports(sub)) return true;
    }
    return false;
  }

  // Which lengths, shapes and strides the body reads (only those are unpacked).
  void find_used_metadata() {
    ir::walk(K.body, [&](const ir::Op& op) {
      if (op.kind == OpKind::Len) used_.insert({op.operands[0], "len"});
      if (op.kind == OpKind::Shape)
        used_.insert({op.operands[0], fmt::format("shape{}", op.attr.i)});
      if (op.kind == OpKind::Stride)
        used_.insert({op.operands[0], fmt::format("stride{}", op.attr.i)});
      const bool access = op.kind == OpKind::Load || op.kind == OpKind::Store ||
                          op.kind == OpKind::AtomicAdd || op.kind == OpKind::AtomicMin ||
                          op.kind == OpKind::AtomicMax || op.kind == OpKind::AtomicExchange ||
                          op.kind == OpKind::AtomicCas;
      if (access && O.checked)
        used_.insert(
            {op.operands[0], type(op.operands[0]).kind == TypeKind::Tensor ? "ext" : "len"});
      if (op.kind == OpKind::FragMmaScaled && O.checked)
        for (size_t m : {size_t{3}, size_t{6}})
          used_.insert(
              {op.operands[m], type(op.operands[m]).kind == TypeKind::Tensor ? "ext" : "len"});
      if (op.kind == OpKind::FragLdmatrix && O.checked) used_.insert({op.operands[1], "len"});
      if ((op.kind == OpKind::FragLoad || op.kind == OpKind::FragStore) && O.checked) {
        const ValueId m = op.operands[op.kind == OpKind::FragLoad ? 1 : 0];
        used_.insert({m, type(m).kind == TypeKind::Tensor ? "ext" : "len"});
      }
    });
  }
  bool used(ValueId mem, const std::string& what) const { return used_.count({mem, what}) > 0; }

  // Shared arrays: static when they fit in 48 KiB, else one dynamic allocation.
  void plan_shared() {
    // Arrays that hold wgmma operands start on 1024 bytes, so a swizzle's pattern (which follows
    // the absolute address) starts with the array.
    ir::walk(K.body, [&](const ir::Op& op) {
      // TMA's swizzle follows the absolute address as the multiplies' does.
      if (op.kind == OpKind::WgmmaDesc || op.kind == OpKind::Tcgen05Desc)
        wgmma_arrays_.insert(op.operands[0]);
      if (op.kind == OpKind::TmaLoad || op.kind == OpKind::TmaStore)
        wgmma_arrays_.insert(op.operands[ir::tma_operands(op.kind).shared]);
      if (op.kind == OpKind::Wgmma) {
        wgmma_accs_.insert(op.operands[0]);
        wgmma_ops_.insert({static_cast<ElemType>(op.attr.i & 0xff), type(op.operands[0]).n,
                           static_cast<int>(op.attr.i >> ir::kWgmmaMajorShift)});
      }
    });
    ir::walk(K.body, [&](const ir::Op& op) {
      if (op.kind != OpKind::AllocShared) return;
      const Type& t = type(op.result);
      const uint64_t bytes =
          uint64_t{t.count} * t.lanes * static_cast<uint64_t>(ir::elem_bytes(t.elem));
      if (wgmma_arrays_.count(op.result)) shared_total_ = (shared_total_ + 1023) / 1024 * 1024;
      shared_offset_[op.result] = shared_total_;
      shared_total_ += static_cast<uint32_t>((bytes + 15) / 16 * 16);
    });
    // Each tmem.alloc writes the allocated address into a shared slot of its own.
    ir::walk(K.body, [&](const ir::Op& op) {
      if (op.kind != OpKind::TmemAlloc) return;
      tmem_slot_[op.result] = shared_total_;
      shared_total_ += 16;
    });
    info_.shared_bytes = shared_total_;
    if (shared_total_ > kStaticSharedLimit) info_.dynamic_shared_bytes = shared_total_;
  }

  // Parameter names as the user wrote them, unless they would collide with C++ or with kiln's
  // own names (then with a trailing underscore).
  void name_params() {
    std::set<std::string> taken;
    auto reserved = [](const std::string& n) {
      if (is_keyword(n) || n.rfind("kiln", 0) == 0 || n.rfind("__", 0) == 0) return true;
      if (n.size() > 1 && (n[0] == 'v' || n[0] == 'k' || n[0] == 'n' || n[0] == 't') &&
          n.find_first_not_of("0123456789", 1) == std::string::npos)
        return true;
      return false;
    };
    for (const ir::Param& p : K.params) {
      std::string n = p.name;
      while (reserved(n) || taken.count(n)) n += "_";
      taken.insert(n);
      // Metadata names must not collide with another parameter either.
      for (const char* suffix : {"_len", "_ext", "_shape", "_stride"}) taken.insert(n + suffix);
      param_name_[p.name] = n;
      mem_name_[p.value] = n;
    }
  }

  std::string params_text() {
    std::string out;
    for (size_t i = 0; i < K.params.size(); ++i) {
      const ir::Param& p = K.params[i];
      const Type& t = type(p.value);
      const uint32_t s = info_.layout.params[i].first;
      const std::string& n = param_name_[p.name];
      if (t.kind == TypeKind::Tensor || t.kind == TypeKind::Array) {
        const std::string ty = mem_line_c(t);
        out += fmt::format("  {}{}* const {} = ({}{}*)args.slot[{}];\n",
                           t.read_only ? "const " : "", ty, n, t.read_only ? "const " : "", ty, s);
        if (used(p.value, "len"))
          out += fmt::format("  const kiln::u32 {}_len = (kiln::u32)args.slot[{}];\n", n,
                             s + abi::slot::kLen);
        if (t.kind == TypeKind::Tensor) {
          const uint32_t rank = static_cast<uint32_t>(t.rank);
          if (used(p.value, "ext"))
            out += fmt::format("  const kiln::u32 {}_ext = (kiln::u32)args.slot[{}];\n", n,
                               s + abi::slot::kExtent);
          for (uint32_t d = 0; d < rank; ++d)
            if (used(p.value, fmt::format("shape{}", d)))
              out += fmt::format("  const kiln::u32 {}_shape{} = (kiln::u32)args.slot[{}];\n", n, d,
                                 s + abi::slot::shape(d));
          for (uint32_t d = 0; d < rank; ++d)
            if (used(p.value, fmt::format("stride{}", d)))
              out += fmt::format("  const kiln::u32 {}_stride{} = (kiln::u32)args.slot[{}];\n", n,
                                 d, s + abi::slot::stride(rank, d));
        }
      } else {
        const std::string ty = elem_c(t.elem);
        std::string value;
        switch (t.elem) {
          case ElemType::Bool:
            value = fmt::format("args.slot[{}] != 0", s);
            break;
          case ElemType::F16:
          case ElemType::BF16:
            value = fmt::format("{}{{(kiln::u16)args.slot[{}]}}", ty, s);
            break;
          case ElemType::F8E4M3:
          case ElemType::F8E5M2:
            value = fmt::format("{}{{(kiln::u8)args.slot[{}]}}", ty, s);
            break;
          case ElemType::F32:
            value = fmt::format("__uint_as_float((kiln::u32)args.slot[{}])", s);
            break;
          case ElemType::F64:
            value = fmt::format("__longlong_as_double((long long)args.slot[{}])", s);
            break;
          default:
            value = fmt::format("({})args.slot[{}]", ty, s);
            break;
        }
        out += fmt::format("  const {} {} = {};\n", ty, n, value);
      }
    }
    return out;
  }

  // ---- emission ----------------------------------------------------------------------------

  // The emulator checks every access to a wgmma accumulator against the multiplies in flight.
  void wgmma_touch(const ir::Op& op) {
    for (ValueId x : op.operands)
      if (wgmma_accs_.count(x)) line(fmt::format("kiln::wgmma_touch(kiln_wg, &{});", v(x)));
  }
  // One wgmma.mma_async instruction per (input type, n) the kernel uses, for the GPU: d is n/2
  // registers (PTX ISA, "wgmma.mma_async": f16/bf16 take scale and transpose immediates, tf32
  // and e4m3/e5m2 the scales only, s8/u8 neither).
  std::string wgmma_instructions() const {
    if (wgmma_ops_.empty()) return {};
    std::string out = "#ifndef KILN_EMULATION\nnamespace kiln {\n";
    for (const auto& [in, n, majors] : wgmma_ops_) {
      const bool integer = ir::is_int(in);
      const int regs = n / 2, k = ir::frag_k_step(in);
      const std::string t = in == ElemType::F32      ? "tf32"
                            : in == ElemType::I8     ? "s8"
                            : in == ElemType::U8     ? "u8"
                            : in == ElemType::F8E4M3 ? "e4m3"
                            : in == ElemType::F8E5M2 ? "e5m2"
                                                     : std::string(ir::elem_name(in));
      std::string list;
      for (int i = 0; i < regs; ++i) list += fmt::format("{}%{}", i ? ", " : "", i);
      const bool transposable = in == ElemType::F16 || in == ElemType::BF16;
      // imm-trans-a/b: 1 for an MN-major operand (the verifier allows them for f16/bf16 only)
      const std::string tail = integer ? "p"
                               : transposable
                                   ? fmt::format("p, 1, 1, {}, {}", majors & 1, (majors >> 1) & 1)
                                   : "p, 1, 1";
      std::string outs;
      for (int i = 0; i < regs; ++i)
        outs += fmt::format("{}\"+{}\"(d[{}])", i ? ", " : "", integer ? "r" : "f", i);
      out += fmt::format(
          "template <> struct wgmma_op<{}, {}, {}> {{\n"
          "  __device__ static void run({}* d, u64 a, u64 b) {{\n"
          "    asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{}, 0;\\n"
          "wgmma.mma_async.sync.aligned.m64n{}k{}.{}.{}.{} {{{}}}, %{}, %{}, {};\\n}}\\n\"\n"
          "                 : {}\n"
          "                 : \"l\"(a), \"l\"(b), \"r\"(1));\n"
          "  }}\n}};\n",
          elem_c(in), n, majors, integer ? "i32" : "f32", regs + 2, n, k, integer ? "s32" : "f32",
          t, t, list, regs, regs + 1, tail, outs);
    }
    out += "}  // namespace kiln\n#endif\n\n";
    return out;
  }

  void line(const std::string& text) {
    body_.append(static_cast<size_t>(indent_) * 2, ' ');
    body_ += text;
    body_ += '\n';
  }
  void at(const ir::Op& op) {
    if (!op.loc.known() || op.loc == last_loc_ || op.loc.file > K.files.size()) return;
    last_loc_ = op.loc;
    body_ += fmt::format("#line {} \"{}\"\n", op.loc.line, K.files[op.loc.file - 1]);
  }
  void def(const ir::Op& op, const std::string& expr) {
    line(fmt::format("const {} v{} = {};", value_c(type(op.result)), op.result, expr));
  }
  std::string args(const ir::Op& op) const {
    std::string s;
    for (size_t i = 0; i < op.operands.size(); ++i) s += (i ? ", " : "") + v(op.operands[i]);
    return s;
  }

  Status region(const ir::Region& r) {
    for (const ir::Op& op : r.ops) KILN_TRY(emit(op));
    return {};
  }

  std::string memory_words(ValueId mem) const {
    for (const ir::Param& p : K.params)
      if (p.value == mem)
        return fmt::format("{} '{}'", type(mem).kind == TypeKind::Tensor ? "tensor" : "array",
                           p.name);
    return type(mem).kind == TypeKind::Local ? "a local array" : "a shared array";
  }
  // The bound of checked mode for a memory object, in lines.
  std::string bound(ValueId mem) const {
    const Type& t = type(mem);
    if (t.kind == TypeKind::Shared || t.kind == TypeKind::Local) return fmt::format("{}u", t.count);
    for (const ir::Param& p : K.params)
      if (p.value == mem)
        return param_name_.at(p.name) + (t.kind == TypeKind::Tensor ? "_ext" : "_len");
    return "0u";
  }
  uint32_t access_site(const ir::Op& op, size_t mem_operand = 0) {
    const auto id = static_cast<uint32_t>(info_.accesses.size());
    info_.accesses.push_back(abi::AccessSite{std::string(ir::op_name(op.kind)),
                                             memory_words(op.operands[mem_operand]),
                                             K.loc_string(op.loc)});
    return id;
  }

  std::string builtin(const ir::Op& op) const {
    static const char* axes[] = {"", "x", "y", "z"};
    const uint64_t a = op.attr.i;
    switch (op.kind) {
      case OpKind::UnitPos:
        return a == 0 ? "kiln::unit_linear()" : fmt::format("threadIdx.{}", axes[a]);
      case OpKind::CubePos:
        return a == 0 ? "kiln::cube_linear()" : fmt::format("blockIdx.{}", axes[a]);
      case OpKind::AbsolutePos:
        return a == 0 ? fmt::format("kiln::cube_linear() * {}u + kiln::unit_linear()", units_)
                      : fmt::format("blockIdx.{} * {}u + threadIdx.{}", axes[a], K.cube_dim[a - 1],
                                    axes[a]);
      case OpKind::CubeDim:
        return fmt::format("{}u", a == 0 ? units_ : K.cube_dim[a - 1]);
      case OpKind::CubeCount:
        return a == 0 ? "kiln::cube_count_linear()" : fmt::format("gridDim.{}", axes[a]);
      case OpKind::PlaneDim:
        return fmt::format("{}u", O.plane_width);
      case OpKind::PlaneLane:
        return "kiln::unit_linear() & 31u";
      case OpKind::PlanePos:
        return "kiln::unit_linear() >> 5";
      default:
        return "0u";
    }
  }

  Status emit(const ir::Op& op) {
    at(op);
    switch (op.kind) {
      case OpKind::Const: {
        const Type& t = type(op.result);
        const std::string lit = literal(t.elem, op.attr);
        def(op, t.lanes == 1
                    ? lit
                    : fmt::format("kiln::broadcast<{}, {}>({})", elem_c(t.elem), t.lanes, lit));
        return {};
      }
      case OpKind::UnitPos:
      case OpKind::CubePos:
      case OpKind::AbsolutePos:
      case OpKind::CubeDim:
      case OpKind::CubeCount:
      case OpKind::PlaneDim:
      case OpKind::PlaneLane:
      case OpKind::PlanePos:
        def(op, builtin(op));
        return {};
      case OpKind::Add:
      case OpKind::Sub:
      case OpKind::Mul:
      case OpKind::Div:
      case OpKind::Rem:
      case OpKind::Min:
      case OpKind::Max:
      case OpKind::Neg:
      case OpKind::Abs:
      case OpKind::Fma:
      case OpKind::Clamp:
      case OpKind::And:
      case OpKind::Or:
      case OpKind::Xor:
      case OpKind::Not:
      case OpKind::Shl:
      case OpKind::Shr:
      case OpKind::Eq:
      case OpKind::Ne:
      case OpKind::Lt:
      case OpKind::Le:
      case OpKind::Gt:
      case OpKind::Ge:
      case OpKind::Select:
      case OpKind::Sqrt:
      case OpKind::Rsqrt:
      case OpKind::Exp:
      case OpKind::Exp2:
      case OpKind::Log:
      case OpKind::Log2:
      case OpKind::Sin:
      case OpKind::Cos:
      case OpKind::Tanh:
      case OpKind::Pow:
      case OpKind::Floor:
      case OpKind::Ceil:
      case OpKind::Round:
      case OpKind::Trunc:
      case OpKind::IsNan:
      case OpKind::IsInf:
        def(op, fmt::format("kiln::{}({})", func_name(op.kind), args(op)));
        return {};
      case OpKind::Cast:
        def(op, fmt::format("kiln::cast<{}>({})", elem_c(type(op.result).elem), v(op.operands[0])));
        return {};
      case OpKind::Bitcast:
        def(op, fmt::format("kiln::bitcast<{}>({})", value_c(type(op.result)), v(op.operands[0])));
        return {};
      case OpKind::Broadcast: {
        const Type& t = type(op.result);
        def(op,
            fmt::format("kiln::broadcast<{}, {}>({})", elem_c(t.elem), t.lanes, v(op.operands[0])));
        return {};
      }
      case OpKind::Extract:  // a 1-lane line is its scalar
        def(op, type(op.operands[0]).lanes == 1
                    ? v(op.operands[0])
                    : fmt::format("{}[{}]", v(op.operands[0]), op.attr.i));
        return {};
      case OpKind::Insert:
        def(op, type(op.operands[0]).lanes == 1
                    ? v(op.operands[1])
                    : fmt::format("kiln::insert({}, {}, {})", v(op.operands[0]), op.attr.i,
                                  v(op.operands[1])));
        return {};
      case OpKind::AllocShared: {
        const Type& t = type(op.result);
        const std::string name = fmt::format("shared{}", op.result);
        mem_name_[op.result] = name;
        // Through the prelude's macros, which give the emulator (cuda-emu) a per-cube arena.
        if (!info_.dynamic_shared_bytes && wgmma_arrays_.count(op.result)) {
          line(fmt::format("KILN_SHARED_ALIGNED({}, {}, {}, {}, 1024);", mem_line_c(t), name,
                           t.count, shared_offset_.at(op.result)));
          return {};
        }
        line(fmt::format("{}({}, {}, {}, {});",
                         info_.dynamic_shared_bytes ? "KILN_SHARED_DYNAMIC" : "KILN_SHARED",
                         mem_line_c(t), name, t.count, shared_offset_.at(op.result)));
        return {};
      }
      case OpKind::AllocLocal: {
        const Type& t = type(op.result);
        const std::string name = fmt::format("local{}", op.result);
        mem_name_[op.result] = name;
        line(fmt::format("KILN_LOCAL({}, {}, {});", mem_line_c(t), name, t.count));
        return {};
      }
      case OpKind::Len: {
        const ValueId m = op.operands[0];
        const Type& t = type(m);
        std::string e = fmt::format("{}u", t.count);
        for (const ir::Param& p : K.params)
          if (p.value == m) e = param_name_.at(p.name) + "_len";
        def(op, e);
        return {};
      }
      case OpKind::Shape:
      case OpKind::Stride: {
        for (const ir::Param& p : K.params)
          if (p.value == op.operands[0])
            def(op, fmt::format("{}_{}{}", param_name_.at(p.name),
                                op.kind == OpKind::Shape ? "shape" : "stride", op.attr.i));
        return {};
      }
      case OpKind::Load: {
        const std::string load =
            fmt::format("kiln::load({}, {})", v(op.operands[0]), v(op.operands[1]));
        if (!O.checked) {
          def(op, load);
        } else {
          const uint32_t site = access_site(op);
          const std::string b = bound(op.operands[0]);
          def(op, fmt::format("{} < {} ? {} : kiln::fault<{}>(kiln_report, kiln_key, {}, {}, {})",
                              v(op.operands[1]), b, load, value_c(type(op.result)), site,
                              v(op.operands[1]), b));
        }
        return {};
      }
      case OpKind::Store: {
        const std::string store = fmt::format("kiln::store({}, {}, {});", v(op.operands[0]),
                                              v(op.operands[1]), v(op.operands[2]));
        if (!O.checked) {
          line(store);
        } else {
          const uint32_t site = access_site(op);
          const std::string b = bound(op.operands[0]);
          line(fmt::format(
              "if ({} < {}) {} else kiln::fault_store(kiln_report, kiln_key, {}, {}, {});",
              v(op.operands[1]), b, store, site, v(op.operands[1]), b));
        }
        return {};
      }
      case OpKind::Var:
        line(fmt::format("{} v{} = {};", value_c(type(op.operands[0])), op.result,
                         v(op.operands[0])));
        return {};
      case OpKind::VarRead:
        def(op, v(op.operands[0]));
        return {};
      case OpKind::VarWrite:
        line(fmt::format("{} = {};", v(op.operands[0]), v(op.operands[1])));
        return {};
      case OpKind::AtomicAdd:
      case OpKind::AtomicMin:
      case OpKind::AtomicMax:
      case OpKind::AtomicExchange:
      case OpKind::AtomicCas: {
        std::string rest;
        for (size_t i = 2; i < op.operands.size(); ++i) rest += ", " + v(op.operands[i]);
        const std::string call =
            fmt::format("kiln::{}(kiln::element({}, {}){})", func_name(op.kind), v(op.operands[0]),
                        v(op.operands[1]), rest);
        if (!O.checked) {
          def(op, call);
        } else {
          const uint32_t site = access_site(op);
          const std::string b = bound(op.operands[0]);
          def(op, fmt::format("{} < {} ? {} : kiln::fault<{}>(kiln_report, kiln_key, {}, {}, {})",
                              v(op.operands[1]), b, call, value_c(type(op.result)), site,
                              v(op.operands[1]), b));
        }
        return {};
      }
      case OpKind::SyncCube:
        if (!wgmma_arrays_.empty()) line("kiln::fence_async_shared();");
        line("__syncthreads();");
        return {};
      case OpKind::MbarInit:
        line(fmt::format("kiln::mbar_init({}, {}, {}u);", v(op.operands[0]), v(op.operands[1]),
                         op.attr.i));
        return {};
      case OpKind::MbarWait:
        line(fmt::format("kiln::mbar_wait({}, {}, {});", v(op.operands[0]), v(op.operands[1]),
                         v(op.operands[2])));
        return {};
      case OpKind::TmemAlloc: {
        const std::string slot = fmt::format("tmem_slot{}", op.result);
        line(fmt::format("{}(kiln::u32, {}, 4, {});",
                         info_.dynamic_shared_bytes ? "KILN_SHARED_DYNAMIC" : "KILN_SHARED", slot,
                         tmem_slot_.at(op.result)));
        def(op, fmt::format("kiln::tmem_alloc<{}u>({})", op.attr.i, slot));
        return {};
      }
      case OpKind::TmemFree:
        line(fmt::format("kiln::tmem_free<{}u>({});", op.attr.i, v(op.operands[0])));
        return {};
      case OpKind::Tcgen05Desc:
        def(op, fmt::format("kiln::tcgen05_desc({}, {}, {}, {}, {}u)", v(op.operands[0]),
                            v(op.operands[1]), v(op.operands[2]), v(op.operands[3]), op.attr.i));
        return {};
      case OpKind::Tcgen05Mma:
        line(fmt::format("kiln::tcgen05_mma<{}, {}, {}>({}, {}, {}, {});",
                         elem_c(static_cast<ElemType>(op.attr.i & 0xff)), (op.attr.i >> 8) & 0xffff,
                         op.attr.i >> ir::kTcgen05MajorShift, v(op.operands[0]), v(op.operands[1]),
                         v(op.operands[2]), v(op.operands[3])));
        return {};
      case OpKind::Tcgen05Commit:
        line(fmt::format("kiln::tcgen05_commit({}, {});", v(op.operands[0]), v(op.operands[1])));
        return {};
      case OpKind::MbarArriveTx:
        line(fmt::format("kiln::mbar_arrive_expect_tx({}, {}, {}u);", v(op.operands[0]),
                         v(op.operands[1]), op.attr.i));
        return {};
      case OpKind::AsyncCopy:
        line(fmt::format("kiln::copy_async({}, {}, {}, {}, {});", v(op.operands[0]),
                         v(op.operands[1]), v(op.operands[2]), v(op.operands[3]),
                         v(op.operands[4])));
        return {};
      case OpKind::AsyncCommit:
        line("kiln::copy_async_commit();");
        return {};
      case OpKind::AsyncWait:
        line(fmt::format("kiln::copy_async_wait<{}>();", op.attr.i));
        return {};
      case OpKind::TmaLoad:
      case OpKind::TmaStore:
      case OpKind::TmaPrefetch: {
        // kiln::tma_load<swizzle, box...>(dst, index, map, bars, bar index, {coordinates}),
        // kiln::tma_store<swizzle, box...>(map, src, index, {coordinates}),
        // kiln::tma_reduce<op, swizzle, box...>(map, src, index, {coordinates}), and their
        // _async forms,
        // kiln::tma_prefetch<swizzle, box...>(map, {coordinates}): box and coordinates
        // outermost first, as in the IR.
        const ir::TmaOperands at = ir::tma_operands(op.kind);
        const ir::TmaBox b = ir::tma_box(op.attr.i);
        std::string tmpl = fmt::format("{}u", b.swizzle), coords;
        for (uint32_t d = 0; d < b.rank; ++d) {
          tmpl += fmt::format(", {}u", b.box[d]);
          coords += (d ? ", " : "") + v(op.operands[at.coords + d]);
        }
        size_t map = 0;
        for (const abi::TensorMapSite& s : info_.tensor_maps) {
          if (K.params[s.param].value == op.operands[at.tensor] &&
              s.box == ir::tma_box_attr(op.attr.i))
            break;
          ++map;
        }
        KILN_CHECK(map < info_.tensor_maps.size(), "a TMA copy without its tensor-map site");
        if (op.kind == OpKind::TmaLoad) {
          line(fmt::format("kiln::tma_load<{}>({}, {}, args.map[{}], {}, {}, {{{}}});", tmpl,
                           v(op.operands[at.shared]), v(op.operands[at.index]), map,
                           v(op.operands[3]), v(op.operands[4]), coords));
        } else if (op.kind == OpKind::TmaStore) {
          // tma_store / tma_reduce<op>, with _async when the store does not wait.
          const ir::TmaReduce red = ir::tma_reduce(op.attr.i);
          const std::string fn =
              fmt::format("kiln::tma_{}{}", red == ir::TmaReduce::None ? "store" : "reduce",
                          ir::tma_async(op.attr.i) ? "_async" : "");
          const std::string targs = red == ir::TmaReduce::None
                                        ? tmpl
                                        : fmt::format("{}u, {}", static_cast<uint32_t>(red), tmpl);
          line(fmt::format("{}<{}>(args.map[{}], {}, {}, {{{}}});", fn, targs, map,
                           v(op.operands[at.shared]), v(op.operands[at.index]), coords));
        } else {
          line(fmt::format("kiln::tma_prefetch<{}>(args.map[{}], {{{}}});", tmpl, map, coords));
        }
        return {};
      }
      case OpKind::TmaStoreWait:
        line(fmt::format("kiln::tma_store_wait<{}>();", op.attr.i));
        return {};
      case OpKind::TmemLoad:
        line(fmt::format("kiln::tmem_load<{}u>({}, {}, {});", op.attr.i, v(op.operands[0]),
                         v(op.operands[1]), v(op.operands[2])));
        return {};
      case OpKind::TmemRead:
        def(op, fmt::format("kiln::tmem_read<{}>({}, {})", value_c(type(op.result)),
                            v(op.operands[0]), v(op.operands[1])));
        return {};
      case OpKind::SyncPlane:
        line(fmt::format("kiln::sync_plane({}u);", units_));
        return {};
      case OpKind::PlaneSum:
      case OpKind::PlaneMin:
      case OpKind::PlaneMax:
      case OpKind::PlaneAny:
      case OpKind::PlaneAll:
        def(op, fmt::format("kiln::{}({}u, {})", func_name(op.kind), units_, v(op.operands[0])));
        return {};
      case OpKind::PlaneBroadcast:
      case OpKind::PlaneShuffle:
        def(op, fmt::format("kiln::plane_shuffle({}u, {}, {})", units_, v(op.operands[0]),
                            v(op.operands[1])));
        return {};
      case OpKind::PlaneShuffleXor:
        def(op, fmt::format("kiln::plane_shuffle_xor({}u, {}, {})", units_, v(op.operands[0]),
                            v(op.operands[1])));
        return {};
      case OpKind::If: {
        line(fmt::format("if ({}) {{", v(op.operands[0])));
        KILN_TRY(nested(op.regions[0]));
        if (!op.regions[1].ops.empty()) {
          line("} else {");
          KILN_TRY(nested(op.regions[1]));
        }
        line("}");
        return {};
      }
      case OpKind::For: {
        const Type& t = type(op.operands[0]);
        const ValueId i = op.regions[0].args[0];
        const std::string u = uint_c(t.elem);
        if (op.attr.i == ir::kUnrollFull)
          line("#pragma unroll");
        else if (op.attr.i > 0)
          line(fmt::format("#pragma unroll {}", op.attr.i));
        line(
            fmt::format("for ({} k{} = 0, n{} = kiln::trip_count({}, {}, {}); k{} < n{}; ++k{}) {{",
                        u, i, i, v(op.operands[0]), v(op.operands[1]), v(op.operands[2]), i, i, i));
        ++indent_;
        line(fmt::format("const {} v{} = kiln::for_index({}, k{}, {});", value_c(t), i,
                         v(op.operands[0]), i, v(op.operands[2])));
        KILN_TRY(region(op.regions[0]));
        --indent_;
        line("}");
        return {};
      }
      case OpKind::Pipeline:
        return pipeline(op);
      case OpKind::Loop:
        line("for (;;) {");
        KILN_TRY(nested(op.regions[0]));
        line("}");
        return {};
      case OpKind::Break:
        line("break;");
        return {};
      case OpKind::Continue:
        line("continue;");
        return {};
      case OpKind::Return:
        line("return;");
        return {};
      case OpKind::Print: {
        abi::PrintSite site;
        site.format = op.attr.s;
        site.where = K.loc_string(op.loc);
        std::string bits;
        uint32_t total = 0;
        for (ValueId x : op.operands) {
          const Type& t = type(x);
          site.operands.push_back(t);
          for (int l = 0; l < t.lanes; ++l, ++total)
            bits += fmt::format("{}kiln::print_bits({}{})", total ? ", " : "", v(x),
                                t.lanes == 1 ? std::string() : fmt::format("[{}]", l));
        }
        const auto id = static_cast<uint32_t>(info_.prints.size());
        info_.prints.push_back(std::move(site));
        if (total == 0)
          line(fmt::format("kiln::print(kiln_report, kiln_key, {}, nullptr, 0u);", id));
        else
          line(
              fmt::format("{{ const kiln::u64 bits[] = {{{}}}; kiln::print(kiln_report, kiln_key, "
                          "{}, bits, {}u); }}",
                          bits, id, total));
        return {};
      }
      case OpKind::Assert: {
        const auto id = static_cast<uint32_t>(info_.asserts.size());
        info_.asserts.push_back(abi::AssertSite{op.attr.s, K.loc_string(op.loc)});
        line(fmt::format("if (!{}) kiln::assert_failed(kiln_report, kiln_key, {});",
                         v(op.operands[0]), id));
        return {};
      }
      case OpKind::AllocFrag: {
        const Type& t = type(op.result);
        const std::string name = fmt::format("frag{}", op.result);
        mem_name_[op.result] = name;
        line(fmt::format("{} {};", frag_c(t), name));
        return {};
      }
      case OpKind::FragFill:
        wgmma_touch(op);
        line(fmt::format("kiln::frag_fill({}, {});", v(op.operands[0]), v(op.operands[1])));
        return {};
      case OpKind::WgmmaDesc:
        def(op, fmt::format("kiln::wgmma_desc({}, {}, {}, {}, {}u)", v(op.operands[0]),
                            v(op.operands[1]), v(op.operands[2]), v(op.operands[3]), op.attr.i));
        return {};
      case OpKind::Wgmma:
        line(fmt::format("kiln::wgmma<{}, {}>(kiln_wg, {}, {}, {});",
                         elem_c(static_cast<ElemType>(op.attr.i & 0xff)),
                         op.attr.i >> ir::kWgmmaMajorShift, v(op.operands[0]), v(op.operands[1]),
                         v(op.operands[2])));
        return {};
      case OpKind::WgmmaFence:
        line("kiln::wgmma_fence(kiln_wg);");
        return {};
      case OpKind::WgmmaCommit:
        line("kiln::wgmma_commit(kiln_wg);");
        return {};
      case OpKind::WgmmaWait:
        line(fmt::format("kiln::wgmma_wait<{}>(kiln_wg);", op.attr.i));
        // The accumulators are the tensor cores' until the wait: no access moves above it.
        for (ValueId acc : wgmma_accs_) line(fmt::format("kiln::wgmma_fence_operand({});", v(acc)));
        return {};
      case OpKind::FragLoad:
      case OpKind::FragStore: {
        const bool load = op.kind == OpKind::FragLoad;
        const size_t m = load ? 1 : 0;
        wgmma_touch(op);
        const std::string check =
            O.checked
                ? fmt::format("{}, kiln_report, kiln_key, {}u", bound(op.operands[m]),
                              access_site(op, m))
                : fmt::format("{}, nullptr, 0ull, 0u", type(op.operands[m]).kind == TypeKind::Shared
                                                           ? bound(op.operands[m])
                                                           : "0u");
        std::string args;
        for (ValueId x : op.operands) args += (args.empty() ? "" : ", ") + v(x);
        // Loads from shared memory may go through ldmatrix (kiln::frag_load_shared).
        const bool shared = load && type(op.operands[1]).kind == TypeKind::Shared;
        line(fmt::format("kiln::frag_{}({}, {}u, {});",
                         !load    ? "store"
                         : shared ? "load_shared"
                                  : "load",
                         args, op.attr.i, check));
        return {};
      }
      case OpKind::FragLdmatrix: {
        const std::string check = O.checked
                                      ? fmt::format("{}, kiln_report, kiln_key, {}u",
                                                    bound(op.operands[1]), access_site(op, 1))
                                      : fmt::format("{}, nullptr, 0ull, 0u", bound(op.operands[1]));
        line(fmt::format("kiln::frag_load_ldmatrix({}, {}, {}, {}, {}u, {});", v(op.operands[0]),
                         v(op.operands[1]), v(op.operands[2]), v(op.operands[3]), op.attr.i,
                         check));
        return {};
      }
      case OpKind::FragMma:
        wgmma_touch(op);
        line(fmt::format("kiln::frag_mma({}, {}, {});", v(op.operands[0]), v(op.operands[1]),
                         v(op.operands[2])));
        return {};
      case OpKind::FragCast:
        wgmma_touch(op);
        line(fmt::format("kiln::frag_cast({}, {});", v(op.operands[0]), v(op.operands[1])));
        return {};
      case OpKind::FragMmaScaled: {
        wgmma_touch(op);
        // Each scale array with its bound, and the report where the launch is checked.
        auto scales = [&](size_t m) {
          return fmt::format("{}, {}, {}, {}, {}u", v(op.operands[m]), v(op.operands[m + 1]),
                             v(op.operands[m + 2]), O.checked ? bound(op.operands[m]) : "0u",
                             O.checked ? access_site(op, m) : 0u);
        };
        line(fmt::format("kiln::frag_mma_scaled({}, {}, {}, {}, {}, {});", v(op.operands[0]),
                         v(op.operands[1]), v(op.operands[2]), scales(3), scales(6),
                         O.checked ? "kiln_report, kiln_key" : "nullptr, 0ull"));
        return {};
      }
      case OpKind::Units:
      case OpKind::FragPlane:
        break;
    }
    return Error(ErrorKind::Unsupported, fmt::format("{}: the CUDA backend cannot generate '{}'",
                                                     K.where(op), ir::op_name(op.kind)));
  }

  // A pipeline with a producer plane of its own (the cube's last 32 units; ir.h and
  // docs/dsl.md "Warp specialization"): its first unit runs the produce regions, waiting for
  // each stage's release (the empty mbarrier's phase) before refilling it, then the plane
  // leaves; the consumers wait for each stage's copies (the full mbarrier's phase), run the
  // consume region and release the stage of round r - lag.
  Status pipeline(const ir::Op& op) {
    const uint32_t stages = ir::pipeline_stages(op.attr.i), lag = ir::pipeline_lag(op.attr.i);
    const std::string rounds = v(op.operands[0]), full = v(op.operands[1]),
                      empty = v(op.operands[2]);
    const ValueId pr = op.regions[0].args[0], ps = op.regions[0].args[1];
    const ValueId cr = op.regions[1].args[0], cs = op.regions[1].args[1];
    auto here = [&] {
      last_loc_ = {};
      at(op);
    };
    const bool commit = ir::pipeline_commit(op.attr.i);
    // The empty mbarriers count one arrival per consumer plane, or the consume region's
    // tcgen05.commit.
    line(fmt::format("kiln::pipe_begin({}, {}, {}u, {}u);", full, empty, stages,
                     commit ? 1u : units_ / 32));
    line(fmt::format("if (kiln::unit_linear() >= {}u) {{", units_));
    ++indent_;
    line(fmt::format("if (kiln::unit_linear() == {}u) {{", units_));
    ++indent_;
    line(fmt::format("for (kiln::u32 v{0} = 0; v{0} < {1}; ++v{0}) {{", pr, rounds));
    ++indent_;
    line(fmt::format("const kiln::u32 v{} = v{} % {}u;", ps, pr, stages));
    line(fmt::format("if (v{0} >= {1}u) kiln::pipe_wait({2}, v{3}, (v{0} / {1}u - 1u) & 1u);", pr,
                     stages, empty, ps));
    KILN_TRY(region(op.regions[0]));
    --indent_;
    line("}");
    --indent_;
    line("}");
    here();
    line("kiln::pipe_retire();");
    line("return;");
    --indent_;
    line("}");
    line(fmt::format("for (kiln::u32 v{0} = 0; v{0} < {1}; ++v{0}) {{", cr, rounds));
    ++indent_;
    line(fmt::format("const kiln::u32 v{} = v{} % {}u;", cs, cr, stages));
    line(fmt::format("kiln::pipe_wait({}, v{}, (v{} / {}u) & 1u);", full, cs, cr, stages));
    KILN_TRY(region(op.regions[1]));
    here();
    if (commit) {
      // Released by the consume region's tcgen05.commit.
    } else if (lag == 0)
      line(fmt::format("kiln::pipe_release({}, v{});", empty, cs));
    else
      line(fmt::format("if (v{0} >= {1}u) kiln::pipe_release({2}, (v{0} - {1}u) % {3}u);", cr, lag,
                       empty, stages));
    --indent_;
    line("}");
    return {};
  }

  Status nested(const ir::Region& r) {
    ++indent_;
    Status s = region(r);
    --indent_;
    return s;
  }
};

}  // namespace

Result<Source> generate(const ir::Kernel& k, const CodegenOptions& options) {
  return Gen(k, options).run();
}

}  // namespace kiln::cuda
