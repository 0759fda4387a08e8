// Comptime parameters: kernel parameters of plain C++ types whose values are baked into the IR
// and are part of the specialization key. Supported: integers, bool, float/double, enums
// declared with KILN_COMPTIME_ENUM, and small structs of those declared with
// KILN_COMPTIME_STRUCT. Each has a text form (for the CLI and `kiln list`) and a byte encoding
// (for keys).
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ir/result.h"

namespace kiln::dsl {

// Appends key bytes into a caller's fixed buffer: no allocation on the launch path.
class KeyWriter {
 public:
  KeyWriter(uint8_t* buf, size_t cap) : buf_(buf), cap_(cap) {}
  void put(const void* p, size_t n) {
    if (size_ + n > cap_) {
      overflow_ = true;
      return;
    }
    std::memcpy(buf_ + size_, p, n);
    size_ += n;
  }
  template <class T>
  void put_value(const T& v) {
    put(&v, sizeof v);
  }
  size_t size() const { return size_; }
  bool overflow() const { return overflow_; }

 private:
  uint8_t* buf_;
  size_t cap_;
  size_t size_ = 0;
  bool overflow_ = false;
};

// ---- traits -------------------------------------------------------------------------------

template <class T, class = void>
struct ComptimeTraits;  // parse, format, encode, name

namespace detail {
std::string_view trim(std::string_view s);
std::optional<bool> parse_bool(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::string format_double(double v);
// Splits "{a, b, c}" into its top-level items; nullopt when not in braces.
std::optional<std::vector<std::string_view>> split_braced(std::string_view s);
}  // namespace detail

template <>
struct ComptimeTraits<bool> {
  static std::string_view name() { return "bool"; }
  static std::optional<bool> parse(std::string_view s) { return detail::parse_bool(s); }
  static std::string format(bool v) { return v ? "true" : "false"; }
  static void encode(bool v, KeyWriter& w) { w.put_value(static_cast<uint8_t>(v)); }
};

template <class T>
struct ComptimeTraits<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static std::string_view name() {
    if constexpr (std::is_signed_v<T>)
      return sizeof(T) == 1 ? "int8" : sizeof(T) == 2 ? "int16" : sizeof(T) == 4 ? "int" : "int64";
    else
      return sizeof(T) == 1   ? "uint8"
             : sizeof(T) == 2 ? "uint16"
             : sizeof(T) == 4 ? "unsigned"
                              : "uint64";
  }
  static std::optional<T> parse(std::string_view s) {
    s = detail::trim(s);
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
    return v;
  }
  static std::string format(T v) { return std::to_string(v); }
  static void encode(T v, KeyWriter& w) { w.put_value(v); }
};

template <class T>
struct ComptimeTraits<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string_view name() { return sizeof(T) == 4 ? "float" : "double"; }
  static std::optional<T> parse(std::string_view s) {
    auto d = detail::parse_double(s);
    if (!d) return std::nullopt;
    return static_cast<T>(*d);
  }
  static std::string format(T v) { return detail::format_double(v); }
  static void encode(T v, KeyWriter& w) { w.put_value(v); }
};

// Enums: KILN_COMPTIME_ENUM(Mode, Fast, Precise) next to the enum (same namespace).
template <class E>
struct EnumInfo {
  std::string_view type_name;
  std::vector<std::pair<std::string_view, E>> values;
};

template <class E>
struct ComptimeTraits<E, std::void_t<decltype(kiln_comptime_enum(static_cast<E*>(nullptr)))>> {
  static const EnumInfo<E>& info() { return kiln_comptime_enum(static_cast<E*>(nullptr)); }
  static std::string_view name() { return info().type_name; }
  static std::optional<E> parse(std::string_view s) {
    s = detail::trim(s);
    const size_t colon = s.rfind("::");  // accept Mode::Fast as well as Fast
    if (colon != std::string_view::npos) s = s.substr(colon + 2);
    for (const auto& [n, v] : info().values)
      if (n == s) return v;
    return std::nullopt;
  }
  static std::string format(E v) {
    for (const auto& [n, x] : info().values)
      if (x == v) return std::string(n);
    return std::to_string(static_cast<long long>(v));
  }
  static void encode(E v, KeyWriter& w) { w.put_value(v); }
};

// Structs: KILN_COMPTIME_STRUCT(Tile, m, n, k) next to the struct; text form {m=64, n=64, k=32}.
template <class S>
struct ComptimeTraits<S, std::void_t<decltype(kiln_comptime_fields(static_cast<S*>(nullptr)))>> {
  static auto fields() { return kiln_comptime_fields(static_cast<S*>(nullptr)); }
  static std::string_view name() { return kiln_comptime_struct_name(static_cast<S*>(nullptr)); }
  static std::optional<S> parse(std::string_view s) {
    auto items = detail::split_braced(s);
    if (!items) return std::nullopt;
    S out{};
    bool ok = true;
    size_t matched = 0;
    std::apply(
        [&](auto... f) {
          auto one = [&](auto field) {
            for (std::string_view item : *items) {
              const size_t eq = item.find('=');
              if (eq == std::string_view::npos) {
                ok = false;
                return;
              }
              if (detail::trim(item.substr(0, eq)) != field.first) continue;
              using F = std::remove_cvref_t<decltype(out.*(field.second))>;
              auto v = ComptimeTraits<F>::parse(item.substr(eq + 1));
              if (!v)
                ok = false;
              else {
                out.*(field.second) = *v;
                ++matched;
              }
              return;
            }
            ok = false;  // a field without a value
          };
          (one(f), ...);
        },
        fields());
    if (!ok || matched != items->size()) return std::nullopt;
    return out;
  }
  static std::string format(const S& v) {
    std::string s = "{";
    std::apply(
        [&](auto... f) {
          auto one = [&](auto field) {
            using F = std::remove_cvref_t<decltype(v.*(field.second))>;
            if (s.size() > 1) s += ", ";
            s += std::string(field.first) + "=" + ComptimeTraits<F>::format(v.*(field.second));
          };
          (one(f), ...);
        },
        fields());
    return s + "}";
  }
  static void encode(const S& v, KeyWriter& w) {
    std::apply(
        [&](auto... f) {
          auto one = [&](auto field) {
            using F = std::remove_cvref_t<decltype(v.*(field.second))>;
            ComptimeTraits<F>::encode(v.*(field.second), w);
          };
          (one(f), ...);
        },
        fields());
  }
};

template <class T>
concept Comptime = requires(std::string_view s, const T& v, KeyWriter& w) {
  { ComptimeTraits<T>::parse(s) } -> std::same_as<std::optional<T>>;
  { ComptimeTraits<T>::format(v) } -> std::same_as<std::string>;
  ComptimeTraits<T>::encode(v, w);
  { ComptimeTraits<T>::name() } -> std::convertible_to<std::string_view>;
};

// ---- type-erased comptime values ------------------------------------------------------------

namespace detail {
// The name of T as the compiler spells it ("int", "ns::Tile"): the same text in every shared
// library built by one compiler, unlike the address of anything instantiated for T (a plugin
// loaded with RTLD_LOCAL has its own copy of every template instance).
template <class T>
constexpr std::string_view type_identity() {
  std::string_view f = __PRETTY_FUNCTION__;  // "... [with T = int; ...]" or "... [T = int]"
  const size_t at = f.find("T = ");
  if (at == std::string_view::npos) return f;
  f.remove_prefix(at + 4);
  return f.substr(0, f.find_first_of(";]"));
}
}  // namespace detail

// A comptime value of any supported type, held by value (comptime types are trivially copyable
// and small).
class ComptimeValue {
 public:
  static constexpr size_t kMaxSize = 64;

  ComptimeValue() = default;
  template <Comptime T>
  static ComptimeValue of(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxSize,
                  "kiln: comptime parameters must be small, trivially copyable types");
    ComptimeValue c;
    c.ops_ = &ops_for<T>;
    std::memcpy(c.storage_.data(), &v, sizeof(T));
    return c;
  }
  // The value if it holds a T.
  template <class T>
  const T* get() const {
    if (!same_type(ops_, &ops_for<T>)) return nullptr;
    return reinterpret_cast<const T*>(storage_.data());
  }
  bool empty() const { return ops_ == nullptr; }
  std::string format() const { return ops_ ? ops_->format(storage_.data()) : std::string(); }
  void encode(KeyWriter& w) const {
    if (ops_) ops_->encode(storage_.data(), w);
  }
  std::string_view type_name() const { return ops_ ? ops_->name() : std::string_view(); }
  // The value of an integer or bool; nothing for other types.
  std::optional<int64_t> as_integer() const {
    if (!ops_ || !ops_->integer) return std::nullopt;
    return ops_->integer(storage_.data());
  }
  // For numbers of the same type: -1, 0 or 1 as this value is below, equal to or above `other`
  // (NaN is below everything); nothing for other types, which have no order.
  std::optional<int> compare(const ComptimeValue& other) const {
    if (!ops_ || !same_type(ops_, other.ops_) || !ops_->compare) return std::nullopt;
    return ops_->compare(storage_.data(), other.storage_.data());
  }

 private:
  struct Ops {
    std::string (*format)(const void*);
    void (*encode)(const void*, KeyWriter&);
    std::string_view (*name)();
    int (*compare)(const void*, const void*);  // null: not ordered
    int64_t (*integer)(const void*);           // null: not an integer or bool
    std::string_view identity;                 // detail::type_identity<T>()
    size_t size;
  };
  // The same type, whichever shared library made either value.
  static bool same_type(const Ops* a, const Ops* b) {
    return a == b || (a && b && a->size == b->size && a->identity == b->identity);
  }
  template <class T>
  static constexpr int (*compare_of())(const void*, const void*) {
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      return [](const void* a, const void* b) {
        const T x = *static_cast<const T*>(a), y = *static_cast<const T*>(b);
        if (x < y) return -1;
        if (y < x) return 1;
        return x == y ? 0 : -1;  // NaN
      };
    } else {
      return nullptr;
    }
  }
  template <class T>
  static constexpr int64_t (*integer_of())(const void*) {
    if constexpr (std::is_integral_v<T>)
      return [](const void* p) { return static_cast<int64_t>(*static_cast<const T*>(p)); };
    else
      return nullptr;
  }
  template <class T>
  static inline const Ops ops_for = {
      [](const void* p) { return ComptimeTraits<T>::format(*static_cast<const T*>(p)); },
      [](const void* p, KeyWriter& w) { ComptimeTraits<T>::encode(*static_cast<const T*>(p), w); },
      [] { return std::string_view(ComptimeTraits<T>::name()); },
      compare_of<T>(),
      integer_of<T>(),
      detail::type_identity<T>(),
      sizeof(T),
  };
  const Ops* ops_ = nullptr;
  alignas(8) std::array<unsigned char, kMaxSize> storage_{};
};

// Parses the text of a comptime value of type T.
template <Comptime T>
Result<ComptimeValue> parse_comptime(std::string_view text) {
  auto v = ComptimeTraits<T>::parse(text);
  if (!v)
    return Error(ErrorKind::InvalidArgument, std::string("'") + std::string(text) +
                                                 "' is not a valid " +
                                                 std::string(ComptimeTraits<T>::name()));
  return ComptimeValue::of(*v);
}

}  // namespace kiln::dsl

// ---- declaring comptime enums and structs
// --------------------------------------------------------

// Up to 48 items (an enum of many values, a struct of many fields).
#define KILN_DSL_PP_NARG(...)                                                                    \
  KILN_DSL_PP_NARG_(__VA_ARGS__, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, \
                    32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,  \
                    13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define KILN_DSL_PP_NARG_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, \
                          _17, _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30,  \
                          _31, _32, _33, _34, _35, _36, _37, _38, _39, _40, _41, _42, _43, _44,  \
                          _45, _46, _47, _48, N, ...)                                            \
  N
#define KILN_DSL_PP_CAT(a, b) KILN_DSL_PP_CAT_(a, b)
#define KILN_DSL_PP_CAT_(a, b) a##b
#define KILN_DSL_FE_1(m, t, x) m(t, x)
#define KILN_DSL_FE_2(m, t, x, ...) m(t, x), KILN_DSL_FE_1(m, t, __VA_ARGS__)
#define KILN_DSL_FE_3(m, t, x, ...) m(t, x), KILN_DSL_FE_2(m, t, __VA_ARGS__)
#define KILN_DSL_FE_4(m, t, x, ...) m(t, x), KILN_DSL_FE_3(m, t, __VA_ARGS__)
#define KILN_DSL_FE_5(m, t, x, ...) m(t, x), KILN_DSL_FE_4(m, t, __VA_ARGS__)
#define KILN_DSL_FE_6(m, t, x, ...) m(t, x), KILN_DSL_FE_5(m, t, __VA_ARGS__)
#define KILN_DSL_FE_7(m, t, x, ...) m(t, x), KILN_DSL_FE_6(m, t, __VA_ARGS__)
#define KILN_DSL_FE_8(m, t, x, ...) m(t, x), KILN_DSL_FE_7(m, t, __VA_ARGS__)
#define KILN_DSL_FE_9(m, t, x, ...) m(t, x), KILN_DSL_FE_8(m, t, __VA_ARGS__)
#define KILN_DSL_FE_10(m, t, x, ...) m(t, x), KILN_DSL_FE_9(m, t, __VA_ARGS__)
#define KILN_DSL_FE_11(m, t, x, ...) m(t, x), KILN_DSL_FE_10(m, t, __VA_ARGS__)
#define KILN_DSL_FE_12(m, t, x, ...) m(t, x), KILN_DSL_FE_11(m, t, __VA_ARGS__)
#define KILN_DSL_FE_13(m, t, x, ...) m(t, x), KILN_DSL_FE_12(m, t, __VA_ARGS__)
#define KILN_DSL_FE_14(m, t, x, ...) m(t, x), KILN_DSL_FE_13(m, t, __VA_ARGS__)
#define KILN_DSL_FE_15(m, t, x, ...) m(t, x), KILN_DSL_FE_14(m, t, __VA_ARGS__)
#define KILN_DSL_FE_16(m, t, x, ...) m(t, x), KILN_DSL_FE_15(m, t, __VA_ARGS__)
#define KILN_DSL_FE_17(m, t, x, ...) m(t, x), KILN_DSL_FE_16(m, t, __VA_ARGS__)
#define KILN_DSL_FE_18(m, t, x, ...) m(t, x), KILN_DSL_FE_17(m, t, __VA_ARGS__)
#define KILN_DSL_FE_19(m, t, x, ...) m(t, x), KILN_DSL_FE_18(m, t, __VA_ARGS__)
#define KILN_DSL_FE_20(m, t, x, ...) m(t, x), KILN_DSL_FE_19(m, t, __VA_ARGS__)
#define KILN_DSL_FE_21(m, t, x, ...) m(t, x), KILN_DSL_FE_20(m, t, __VA_ARGS__)
#define KILN_DSL_FE_22(m, t, x, ...) m(t, x), KILN_DSL_FE_21(m, t, __VA_ARGS__)
#define KILN_DSL_FE_23(m, t, x, ...) m(t, x), KILN_DSL_FE_22(m, t, __VA_ARGS__)
#define KILN_DSL_FE_24(m, t, x, ...) m(t, x), KILN_DSL_FE_23(m, t, __VA_ARGS__)
#define KILN_DSL_FE_25(m, t, x, ...) m(t, x), KILN_DSL_FE_24(m, t, __VA_ARGS__)
#define KILN_DSL_FE_26(m, t, x, ...) m(t, x), KILN_DSL_FE_25(m, t, __VA_ARGS__)
#define KILN_DSL_FE_27(m, t, x, ...) m(t, x), KILN_DSL_FE_26(m, t, __VA_ARGS__)
#define KILN_DSL_FE_28(m, t, x, ...) m(t, x), KILN_DSL_FE_27(m, t, __VA_ARGS__)
#define KILN_DSL_FE_29(m, t, x, ...) m(t, x), KILN_DSL_FE_28(m, t, __VA_ARGS__)
#define KILN_DSL_FE_30(m, t, x, ...) m(t, x), KILN_DSL_FE_29(m, t, __VA_ARGS__)
#define KILN_DSL_FE_31(m, t, x, ...) m(t, x), KILN_DSL_FE_30(m, t, __VA_ARGS__)
#define KILN_DSL_FE_32(m, t, x, ...) m(t, x), KILN_DSL_FE_31(m, t, __VA_ARGS__)
#define KILN_DSL_FE_33(m, t, x, ...) m(t, x), KILN_DSL_FE_32(m, t, __VA_ARGS__)
#define KILN_DSL_FE_34(m, t, x, ...) m(t, x), KILN_DSL_FE_33(m, t, __VA_ARGS__)
#define KILN_DSL_FE_35(m, t, x, ...) m(t, x), KILN_DSL_FE_34(m, t, __VA_ARGS__)
#define KILN_DSL_FE_36(m, t, x, ...) m(t, x), KILN_DSL_FE_35(m, t, __VA_ARGS__)
#define KILN_DSL_FE_37(m, t, x, ...) m(t, x), KILN_DSL_FE_36(m, t, __VA_ARGS__)
#define KILN_DSL_FE_38(m, t, x, ...) m(t, x), KILN_DSL_FE_37(m, t, __VA_ARGS__)
#define KILN_DSL_FE_39(m, t, x, ...) m(t, x), KILN_DSL_FE_38(m, t, __VA_ARGS__)
#define KILN_DSL_FE_40(m, t, x, ...) m(t, x), KILN_DSL_FE_39(m, t, __VA_ARGS__)
#define KILN_DSL_FE_41(m, t, x, ...) m(t, x), KILN_DSL_FE_40(m, t, __VA_ARGS__)
#define KILN_DSL_FE_42(m, t, x, ...) m(t, x), KILN_DSL_FE_41(m, t, __VA_ARGS__)
#define KILN_DSL_FE_43(m, t, x, ...) m(t, x), KILN_DSL_FE_42(m, t, __VA_ARGS__)
#define KILN_DSL_FE_44(m, t, x, ...) m(t, x), KILN_DSL_FE_43(m, t, __VA_ARGS__)
#define KILN_DSL_FE_45(m, t, x, ...) m(t, x), KILN_DSL_FE_44(m, t, __VA_ARGS__)
#define KILN_DSL_FE_46(m, t, x, ...) m(t, x), KILN_DSL_FE_45(m, t, __VA_ARGS__)
#define KILN_DSL_FE_47(m, t, x, ...) m(t, x), KILN_DSL_FE_46(m, t, __VA_ARGS__)
#define KILN_DSL_FE_48(m, t, x, ...) m(t, x), KILN_DSL_FE_47(m, t, __VA_ARGS__)
#define KILN_DSL_FOR_EACH(m, t, ...) \
  KILN_DSL_PP_CAT(KILN_DSL_FE_, KILN_DSL_PP_NARG(__VA_ARGS__))(m, t, __VA_ARGS__)

#define KILN_DSL_ENUM_ITEM(E, v)   \
  std::pair<std::string_view, E> { \
#v, E::v                       \
  }
#define KILN_DSL_FIELD_ITEM(S, f)                \
  std::pair<std::string_view, decltype(&S::f)> { \
#f, &S::f                                    \
  }

// Declares an enum as a comptime type, in the enum's namespace: KILN_COMPTIME_ENUM(Mode, A, B).
#define KILN_COMPTIME_ENUM(E, ...)                                    \
  inline const ::kiln::dsl::EnumInfo<E>& kiln_comptime_enum(E*) {     \
    static const ::kiln::dsl::EnumInfo<E> info{                       \
        #E, {KILN_DSL_FOR_EACH(KILN_DSL_ENUM_ITEM, E, __VA_ARGS__)}}; \
    return info;                                                      \
  }

// Declares a struct of comptime fields as a comptime type, in the struct's namespace:
// KILN_COMPTIME_STRUCT(Tile, m, n, k).
#define KILN_COMPTIME_STRUCT(S, ...)                                                \
  inline auto kiln_comptime_fields(S*) {                                            \
    return std::make_tuple(KILN_DSL_FOR_EACH(KILN_DSL_FIELD_ITEM, S, __VA_ARGS__)); \
  }                                                                                 \
  inline std::string_view kiln_comptime_struct_name(S*) {                           \
    return #S;                                                                      \
  }
