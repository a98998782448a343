#include "attnkit/core/dtype.hpp"

#include <cmath>
#include <string>

namespace attnkit {

std::optional<DType> parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType type;
  };
  static constexpr Alias kAliases[] = {
      {"fp32", DType::f32},         {"float32", DType::f32},     {"float", DType::f32},
      {"f32", DType::f32},          {"fp16", DType::f16},        {"float16", DType::f16},
      {"half", DType::f16},         {"f16", DType::f16},         {"bf16", DType::bf16},
      {"bfloat16", DType::bf16},    {"fp8_e4m3", DType::f8e4m3}, {"fp8", DType::f8e4m3},
      {"e4m3", DType::f8e4m3},      {"float8_e4m3fn", DType::f8e4m3},
      {"fp8_e5m2", DType::f8e5m2},  {"e5m2", DType::f8e5m2},     {"float8_e5m2", DType::f8e5m2},
      {"int8", DType::i8},          {"i8", DType::i8},           {"int32", DType::i32},
      {"uint8", DType::u8},         {"fp64", DType::f64},        {"float64", DType::f64},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.type;
  return std::nullopt;
}

std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): value = m * 2^-24. Round |f| * 2^24 to nearest even.
    const float scaled = bits_float(abs) * 16777216.0f;  // exact: power-of-two scaling
    const float r = std::nearbyint(scaled);                // default rounding: nearest even
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(r));
  }
  // Normal: rebias exponent (127 -> 15), round mantissa 23 -> 10 bits to nearest even.
  std::uint32_t v = abs - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // m * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

namespace {

// Generic small-float encode: `man_bits` mantissa bits, exponent bias `bias`,
// largest finite magnitude `max_finite`; saturate (e4m3fn) or overflow to inf.
std::uint8_t encode_small_float(float f, int man_bits, int bias, float max_finite,
                                bool has_inf, std::uint8_t nan_code) {
  if (std::isnan(f)) return nan_code;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a > max_finite) {
    if (!has_inf) return static_cast<std::uint8_t>(sign | 0x7e);  // e4m3fn saturates to 448
    // e5m2: values at or past the rounding midpoint above max become inf
    const float midpoint = max_finite * (1.0f + 1.0f / static_cast<float>(1 << (man_bits + 1)));
    if (a >= midpoint) return static_cast<std::uint8_t>(sign | 0x7c);
    a = max_finite;
  }
  if (a == 0.0f) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp_field = e - 1 + bias;
  // Quantum of the binade (or of the subnormal range).
  const int q_exp = (exp_field >= 1 ? e - 1 : 1 - bias) - man_bits;
  const float q = std::ldexp(1.0f, q_exp);
  float steps = std::nearbyint(a / q);  // ties to even
  float rounded = steps * q;
  if (rounded > max_finite) rounded = max_finite;
  if (rounded == 0.0f) return sign;  // below half the smallest subnormal: a signed zero
  // Re-derive the fields from the rounded value (rounding may carry into the exponent).
  std::frexp(rounded, &e);
  exp_field = e - 1 + bias;
  std::uint32_t code;
  if (exp_field >= 1) {
    const float frac = std::ldexp(rounded, -(e - 1)) - 1.0f;  // in [0, 1)
    const auto man = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(frac, man_bits)));
    code = (static_cast<std::uint32_t>(exp_field) << man_bits) | man;
  } else {
    code = static_cast<std::uint32_t>(std::nearbyint(std::ldexp(rounded, bias - 1 + man_bits)));
  }
  return static_cast<std::uint8_t>(sign | code);
}

float decode_small_float(std::uint8_t v, int man_bits, int bias) {
  const bool neg = (v & 0x80) != 0;
  const int exp_bits = 7 - man_bits;
  const int exp_field = (v >> man_bits) & ((1 << exp_bits) - 1);
  const int man = v & ((1 << man_bits) - 1);
  float r;
  if (exp_field == 0)
    r = std::ldexp(static_cast<float>(man), 1 - bias - man_bits);
  else
    r = std::ldexp(1.0f + std::ldexp(static_cast<float>(man), -man_bits), exp_field - bias);
  return neg ? -r : r;
}

}  // namespace

std::uint8_t float_to_f8e4m3(float f) { return encode_small_float(f, 3, 7, 448.0f, false, 0x7f); }

float f8e4m3_to_float(std::uint8_t v) {
  if ((v & 0x7f) == 0x7f) return std::nanf("");
  return decode_small_float(v, 3, 7);
}

std::uint8_t float_to_f8e5m2(float f) { return encode_small_float(f, 2, 15, 57344.0f, true, 0x7f); }

float f8e5m2_to_float(std::uint8_t v) {
  const int exp_field = (v >> 2) & 0x1f;
  if (exp_field == 31) {
    if ((v & 0x3) != 0) return std::nanf("");
    return (v & 0x80) ? -INFINITY : INFINITY;
  }
  return decode_small_float(v, 2, 15);
}

double load_as_double(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f8e4m3: return f8e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::f8e5m2: return f8e5m2_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::i8: return static_cast<const std::int8_t*>(base)[i];
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::i32: return static_cast<const std::int32_t*>(base)[i];
  }
  return 0.0;
}

void store_from_double(void* base, DType t, std::int64_t i, double x) {
  const auto f = static_cast<float>(x);
  switch (t) {
    case DType::f64: static_cast<double*>(base)[i] = x; break;
    case DType::f32: static_cast<float*>(base)[i] = f; break;
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = float_to_f16(f); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(f); break;
    case DType::f8e4m3: static_cast<std::uint8_t*>(base)[i] = float_to_f8e4m3(f); break;
    case DType::f8e5m2: static_cast<std::uint8_t*>(base)[i] = float_to_f8e5m2(f); break;
    case DType::i8:
      static_cast<std::int8_t*>(base)[i] =
          static_cast<std::int8_t>(std::fmax(-128.0, std::fmin(127.0, std::nearbyint(x))));
      break;
    case DType::u8:
      static_cast<std::uint8_t*>(base)[i] =
          static_cast<std::uint8_t>(std::fmax(0.0, std::fmin(255.0, std::nearbyint(x))));
      break;
    case DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(x); break;
  }
}

double dtype_epsilon(DType t) {
  switch (t) {
    case DType::f64: return 1.1e-16;
    case DType::f32: return 6.0e-8;
    case DType::f16: return 4.9e-4;
    case DType::bf16: return 3.9e-3;
    case DType::f8e4m3: return 6.25e-2;
    case DType::f8e5m2: return 1.25e-1;
    default: return 0.5;
  }
}

}  // namespace attnkit
