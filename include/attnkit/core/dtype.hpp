#pragma once
// Element types attnkit understands, and exact host conversions between them.
// Conversions are bit-level (no compiler extensions) so they behave the same in
// every translation unit, host compiler and CUDA host pass.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace attnkit {

enum class DType : std::uint8_t { f32, f16, bf16, f8e4m3, f8e5m2, i8, i32, u8, f64 };

inline constexpr DType kAllDTypes[] = {DType::f32,    DType::f16,    DType::bf16,
                                       DType::f8e4m3, DType::f8e5m2, DType::i8,
                                       DType::i32,    DType::u8,     DType::f64};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    default: return 1;
  }
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
    case DType::f8e4m3: return "fp8_e4m3";
    case DType::f8e5m2: return "fp8_e5m2";
    case DType::i8: return "int8";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
    case DType::f64: return "fp64";
  }
  return "?";
}

// Accepts the names above and the common aliases (float32, half, bfloat16, ...).
std::optional<DType> parse_dtype(std::string_view name);

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8e4m3 ||
         t == DType::f8e5m2 || t == DType::f64;
}

// A small set of dtypes, for capability declarations.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> types) {
    for (DType t : types) bits_ |= bit(t);
  }
  constexpr bool contains(DType t) const { return (bits_ & bit(t)) != 0; }
  constexpr void insert(DType t) { bits_ |= bit(t); }
  constexpr bool empty() const { return bits_ == 0; }

 private:
  static constexpr std::uint32_t bit(DType t) { return 1u << static_cast<unsigned>(t); }
  std::uint32_t bits_ = 0;
};

// ---- scalar conversions -------------------------------------------------------

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 is the top half of an fp32; round to nearest even, NaN stays NaN.
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

// IEEE binary16, round to nearest even, with subnormals, overflow to inf.
std::uint16_t float_to_f16(float f);
float f16_to_float(std::uint16_t h);

// OCP fp8: e4m3 "fn" (no inf, max 448, saturating) and e5m2 (IEEE-like, has inf).
std::uint8_t float_to_f8e4m3(float f);
float f8e4m3_to_float(std::uint8_t v);
std::uint8_t float_to_f8e5m2(float f);
float f8e5m2_to_float(std::uint8_t v);

// Reads element `index` of a buffer of type `t` as double / writes a double
// rounded to `t`. Slow, generic: for the reference, tests and I/O, not kernels.
double load_as_double(const void* base, DType t, std::int64_t index);
void store_from_double(void* base, DType t, std::int64_t index, double value);

// Relative rounding unit of a storage type, used to derive error bounds.
double dtype_epsilon(DType t);

}  // namespace attnkit
