// Snake for the codec's non-exact streaming decode (s2studio/codec/fast_stream.py, `CodecOps`): one pass over memory.
//
// Snake is y = x + 1/(alpha + 1e-9) · sin(alpha·x)² per channel. Torch runs it as five elementwise ops (mul, sin, pow,
// mul, add), each a pass over the activations, and in the bfloat16 decode the next conv rounds the result in a sixth.
// A 4-frame push of S2's full-size codec runs 14.5 M values through Snake; in the bfloat16 decode that was 17-20 % of
// the push (1 thread, Zen 4), `sin` about 60 % of it. Here each value is read once, in float32 or bfloat16, and
// written once, in float32 or, when a bfloat16 conv reads it next, directly in bfloat16, rounded to nearest even as
// torch's `.to(torch.bfloat16)` rounds: 0.16-0.21x torch's time for the same tensors (1 thread, Zen 4, AVX-512).
//
// The sine is our own, vectorisable: t = q·π + r with q = round(t/π) (π in three float parts, one FMA each: the
// first is exact, the others round once), then an odd degree-9 polynomial in r on |r| <= π/2 (coefficients fitted
// for relative error, 1.75 ulp in float32 arithmetic there), negated for odd q (Snake squares it and skips that).
// Measured against the float64 sine (tests/test_cpu_codec.py): at most 1.77 ulp for |t| <= 2^17, 2 ulp from
// torch.sin. Beyond 2^17, where t·(1/π) in float32 is no longer near enough t/π to pick q, and for inf and NaN, the
// lane takes std::sin. The rest is torch's math: alpha·x rounded to float32, 1/(alpha + 1e-9) in float32; the last
// step, x + s²·inv, is one FMA (torch rounds the product first). sin(-0) gives +0 (Snake squares it).
//
// Activations are time-major (…, T, C): channels contiguous, rows evenly spaced (a slice in time is fine); a
// channels-first view or rows at two spacings are refused. Built into the kernels' library by cpu_gemv.py with the
// vector width torch chose for this CPU (AVX-512, AVX2 or none); the vector code and the scalar tail round alike
// (same constants, FMAs and rounding mode), so a value does not depend on its lane or on the thread count. Registered
// as a fragment of the `s2studio_cpu` library.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace {

constexpr float kInvPi = 0x1.45f306p-2f;
constexpr float kPi1 = 0x1.921fb6p+1f, kPi2 = -0x1.777a5cp-24f, kPi3 = -0x1.ee59dap-49f;  // π = kPi1 + kPi2 + kPi3
constexpr float kS3 = -0x1.55554cp-3f, kS5 = 0x1.110ed4p-7f, kS7 = -0x1.9f700cp-13f, kS9 = 0x1.5dbebap-19f;
// |t| above (or NaN): std::sin. Below, t·(1/π) in float32 is within 0.004 of t/π, so q is the nearest integer or its
// neighbour near a tie (|r| <= π/2 + 0.012, where the polynomial still holds).
constexpr float kSinLimit = 0x1p+17f;
constexpr float kEps = 1e-9f;          // torch adds the Python scalar 1e-9 to float32 alpha in float32
constexpr int64_t kGrain = 32768;      // values per thread at least: smaller tensors are not worth a fork

// sin(t) (or ±sin(t) without `kSigned`: Snake squares it) for |t| <= kSinLimit.
template <bool kSigned>
inline float sin_scalar(float t) {
  if (!(std::fabs(t) <= kSinLimit)) return std::sin(t);
  const float q = std::nearbyint(t * kInvPi);  // ties to even, as the vector rounding below
  float r = std::fma(-q, kPi1, t);
  r = std::fma(-q, kPi2, r);
  r = std::fma(-q, kPi3, r);
  const float s = r * r;
  const float p = std::fma(std::fma(std::fma(kS9, s, kS7), s, kS5), s, kS3);
  const float y = std::fma(p, r * s, r);
  return kSigned && (static_cast<int32_t>(q) & 1) ? -y : y;
}

inline float widen_scalar(float v) { return v; }
inline float widen_scalar(uint16_t v) {  // bfloat16 bits are the high half of a float32
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline void put_scalar(float* p, float v) { *p = v; }
inline void put_scalar(uint16_t* p, float v) {  // round to nearest even, NaN stays NaN (c10::BFloat16's rule)
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  *p = std::isnan(v) ? uint16_t{0x7FC0} : static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using Vec = __m512;
inline Vec splat(float v) { return _mm512_set1_ps(v); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec load(const uint16_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline void store(uint16_t* p, Vec v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), 16);
  rounded = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
}
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a·b, one rounding
inline Vec nearest(Vec v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec negate_if_odd(Vec y, Vec q) {
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(_mm512_cvtps_epi32(q), _mm512_set1_epi32(1)), 31);
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(y), sign));
}
inline bool all_within(Vec t) {  // |t| <= kSinLimit in every lane (false for NaN)
  return _mm512_cmp_ps_mask(_mm512_abs_ps(t), splat(kSinLimit), _CMP_LE_OQ) == 0xFFFF;
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kLanes = 8;
using Vec = __m256;
inline Vec splat(float v) { return _mm256_set1_ps(v); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec load(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline void store(uint16_t* p, Vec v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }
inline Vec nearest(Vec v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline Vec negate_if_odd(Vec y, Vec q) {
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(_mm256_cvtps_epi32(q), _mm256_set1_epi32(1)), 31);
  return _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(y), sign));
}
inline bool all_within(Vec t) {
  const Vec magnitude = _mm256_andnot_ps(splat(-0.0f), t);
  return _mm256_movemask_ps(_mm256_cmp_ps(magnitude, splat(kSinLimit), _CMP_LE_OQ)) == 0xFF;
}
#else
constexpr int64_t kLanes = 0;  // no vector code: every loop below runs its scalar tail
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// sin_scalar's steps on a vector; lanes out of range are redone by sin_scalar, which takes std::sin for them.
template <bool kSigned>
inline Vec sin_vec(Vec t) {
  const Vec q = nearest(mul(t, splat(kInvPi)));
  Vec r = fnma(q, splat(kPi1), t);
  r = fnma(q, splat(kPi2), r);
  r = fnma(q, splat(kPi3), r);
  const Vec s = mul(r, r);
  const Vec p = fma(fma(fma(splat(kS9), s, splat(kS7)), s, splat(kS5)), s, splat(kS3));
  Vec y = fma(p, mul(r, s), r);
  if (kSigned) y = negate_if_odd(y, q);
  if (!all_within(t)) {
    alignas(64) float lanes[kLanes], args[kLanes];
    store(lanes, y);
    store(args, t);
    for (int64_t i = 0; i < kLanes; ++i) {
      if (!(std::fabs(args[i]) <= kSinLimit)) lanes[i] = std::sin(args[i]);
    }
    y = load(lanes);
  }
  return y;
}
#endif

// Rows [begin, end) of Snake: x rows `x_row` apart, y contiguous, C channels each.
template <typename In, typename Out>
void snake_rows(const In* x, int64_t x_row, const float* alpha, const float* inv, int64_t C, Out* y, int64_t begin,
                int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const In* xr = x + row * x_row;
    Out* yr = y + row * C;
    int64_t c = 0;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    for (; c + kLanes <= C; c += kLanes) {
      const Vec v = load(xr + c);
      const Vec sine = sin_vec<false>(mul(load(alpha + c), v));
      store(yr + c, fma(mul(sine, sine), load(inv + c), v));
    }
#endif
    for (; c < C; ++c) {
      const float v = widen_scalar(xr[c]);
      const float sine = sin_scalar<false>(alpha[c] * v);
      put_scalar(yr + c, std::fma(sine * sine, inv[c], v));
    }
  }
}

template <typename In>
void snake_to(const In* x, int64_t x_row, const float* alpha, const float* inv, int64_t rows, int64_t C,
              at::Tensor& out) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(C, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    if (out.scalar_type() == at::kBFloat16) {
      snake_rows(x, x_row, alpha, inv, C, reinterpret_cast<uint16_t*>(out.data_ptr()), begin, end);
    } else {
      snake_rows(x, x_row, alpha, inv, C, out.data_ptr<float>(), begin, end);
    }
  });
}

// snake(x, alpha) for x (…, C) float32 or bfloat16, alpha's C float32 values; the result contiguous in out_dtype.
at::Tensor snake(const at::Tensor& x, const at::Tensor& alpha, c10::ScalarType out_dtype) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "snake: x must be float32 or bfloat16");
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16, "snake: the result is float32 or bfloat16");
  TORCH_CHECK(alpha.scalar_type() == at::kFloat && alpha.is_contiguous(), "snake: alpha must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == alpha.numel(), "snake: x's last dimension must be alpha's channels");
  const int64_t C = x.size(-1);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_dtype));
  if (x.numel() == 0) return out;
  TORCH_CHECK(x.stride(-1) == 1 || C == 1, "snake: channels must be contiguous (time-major (..., T, C)), got strides ",
              x.strides());
  const at::Tensor rows = x.view({-1, C});  // throws where the rows are not evenly spaced
  const float* a = alpha.data_ptr<float>();
  std::vector<float> inv(C);
  for (int64_t c = 0; c < C; ++c) inv[c] = 1.0f / (a[c] + kEps);
  if (x.scalar_type() == at::kBFloat16) {
    snake_to(reinterpret_cast<const uint16_t*>(rows.data_ptr()), rows.stride(0), a, inv.data(), rows.size(0), C, out);
  } else {
    snake_to(rows.data_ptr<float>(), rows.stride(0), a, inv.data(), rows.size(0), C, out);
  }
  return out;
}

// The sine above, elementwise over float32 `x` (any layout; for its accuracy tests and nothing else).
at::Tensor fast_sin(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "fast_sin: x must be float32");
  const at::Tensor in = x.contiguous();
  at::Tensor out = at::empty(in.sizes(), in.options());
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, in.numel(), kGrain, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    for (; i + kLanes <= end; i += kLanes) store(dst + i, sin_vec<true>(load(src + i)));
#endif
    for (; i < end; ++i) dst[i] = sin_scalar<true>(src[i]);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(s2studio_cpu, m) {
  m.def("snake(Tensor x, Tensor alpha, ScalarType out_dtype) -> Tensor");
  m.def("fast_sin(Tensor x) -> Tensor");
  m.impl("snake", c10::DispatchKey::CPU, &snake);
  m.impl("fast_sin", c10::DispatchKey::CPU, &fast_sin);
}
