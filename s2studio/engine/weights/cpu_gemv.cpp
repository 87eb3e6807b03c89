// Linear layers with narrow (bf16 or int8) weights and float32 arithmetic on the CPU, for the fast path: decode
// steps stream the weights once at memory speed; prefills go through torch's GEMM a block of rows at a time.
//
// At batch 1 a decode step reads every weight once and does two flops with it, so its time is the weight
// bytes over the memory bandwidth. Torch has no kernel that reads bfloat16 or int8 weights at that speed
// with float32 activations on a CPU without AVX512-BF16/AMX: its bf16 GEMV and its weight-only int8 kernel
// (`_weight_int8pack_mm`) are compute-bound at about half the bandwidth, and fbgemm's int8 kernel is fast only
// because it also rounds the activations to 8 bits. Here each weight is widened to float32 in registers and
// multiplied by the float32 activation, so the result is the float32 product of the stored weights (only the
// order of the additions differs from a float32 GEMM).
//
// Built by s2studio/engine/weights/cpu_gemv.py with the vector width torch itself chose for this CPU (-mavx512* or
// -mavx2); the generic code below is the same for every width, including the scalar one.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec widen(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline Vec widen(const uint16_t* p) {  // bfloat16 bits are the high half of a float32
  __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float total(Vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kLanes = 8;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec widen(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline Vec widen(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float total(Vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else
constexpr int64_t kLanes = 1;
using Vec = float;
inline Vec zero() { return 0.0f; }
inline Vec load(const float* p) { return *p; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
inline float total(Vec v) { return v; }
#endif

inline float scalar(int8_t w) { return static_cast<float>(w); }
inline float scalar(uint16_t w) {
  uint32_t bits = static_cast<uint32_t>(w) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
inline Vec widen(const int8_t* p) { return scalar(*p); }
inline Vec widen(const uint16_t* p) { return scalar(*p); }
#endif

// How far ahead of the multiply-adds the weights are requested, into L2. Measured on a 2-core AVX512 Xeon
// (int8 rows of 9728 x 2560, against torch.sum over float32): without it 0.6x of the bandwidth, as the hardware
// prefetcher alone does not keep enough loads in flight; 3 KiB 0.87x, 4 KiB 0.89x, 6 KiB 0.93x at two threads
// (0.95x at one); 8 KiB no better. bf16 rows reach ~1.0x.
constexpr int64_t kAhead = 6144;

// dot(x, w) over K values; four accumulators keep enough independent FMAs in flight to hide their latency.
template <typename W>
float dot(const W* w, const float* x, int64_t K) {
  Vec a0 = zero(), a1 = zero(), a2 = zero(), a3 = zero();
  int64_t k = 0;
  for (; k + 4 * kLanes <= K; k += 4 * kLanes) {
    const char* ahead = reinterpret_cast<const char*>(w + k) + kAhead;
    for (size_t line = 0; line < 4 * kLanes * sizeof(W); line += 64) __builtin_prefetch(ahead + line, 0, 2);
    a0 = fma(widen(w + k), load(x + k), a0);
    a1 = fma(widen(w + k + kLanes), load(x + k + kLanes), a1);
    a2 = fma(widen(w + k + 2 * kLanes), load(x + k + 2 * kLanes), a2);
    a3 = fma(widen(w + k + 3 * kLanes), load(x + k + 3 * kLanes), a3);
  }
  for (; k + kLanes <= K; k += kLanes) a0 = fma(widen(w + k), load(x + k), a0);
  float s = total(a0) + total(a1) + total(a2) + total(a3);
  for (; k < K; ++k) s += x[k] * scalar(w[k]);
  return s;
}

constexpr int64_t kGemvRows = 8;  // up to this many rows of x, the weights are streamed once (gemv below)

// y (M, N) = x (M, K) @ w (N, K)^T, times scale[n] when given. Rows are split between torch's threads; each
// weight row is read from memory once and from cache for the other rows of x.
template <typename W>
void gemv(const float* x, const W* w, const float* scale, float* y, int64_t M, int64_t N, int64_t K) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (K * int64_t(sizeof(W))));
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t m = 0; m < M; ++m) {
        const float s = dot(w + n * K, x + m * K, K);
        y[m * N + n] = scale ? s * scale[n] : s;
      }
    }
  });
}

// y (M, N) = x (M, K) @ (w * scale)^T for many rows of x (a prefill): compute-bound, so the weights are
// widened to float32 one block of rows at a time (in cache, never the whole matrix) for torch's GEMM.
template <typename W>
void gemm_widened(const at::Tensor& x, const W* w, const float* scale, at::Tensor& y) {
  constexpr int64_t kBlock = 256;
  const int64_t N = y.size(1), K = x.size(1);
  float* out = y.data_ptr<float>();
  at::parallel_for(0, (N + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    at::Tensor block = at::empty({kBlock, K}, x.options());
    float* b = block.data_ptr<float>();
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n0 = i * kBlock, rows = std::min(kBlock, N - n0);
      for (int64_t r = 0; r < rows; ++r) {
        const W* src = w + (n0 + r) * K;
        const float s = scale ? scale[n0 + r] : 1.0f;
        for (int64_t k = 0; k < K; ++k) b[r * K + k] = scalar(src[k]) * s;
      }
      // Raw copies into y: a worker thread is outside the caller's InferenceMode (it is thread-local), where
      // writing into y with a tensor op would be refused when y is an inference tensor.
      const at::Tensor part = at::mm(x, block.narrow(0, 0, rows).t()).contiguous();
      for (int64_t m = 0; m < x.size(0); ++m) {
        std::memcpy(out + m * N + n0, part.data_ptr<float>() + m * rows, rows * sizeof(float));
      }
    }
  });
}

template <typename W>
void product(const at::Tensor& x, const W* w, const float* scale, at::Tensor& y) {
  if (x.size(0) <= kGemvRows) {
    gemv(x.data_ptr<float>(), w, scale, y.data_ptr<float>(), x.size(0), y.size(1), x.size(1));
  } else {
    gemm_widened(x, w, scale, y);
  }
}

// The products below take x of any shape (..., K) and dtype, and return (..., N) in x's dtype: doing the
// reshapes and casts here rather than in Python saves ~5 us per call, which is most of a small layer's time.
at::Tensor as_rows(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "the CPU kernels take CPU tensors");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "w must be a contiguous 2-D tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "x has ", x.size(-1), " columns but w has ", w.size(1));
  return x.reshape({-1, w.size(1)}).to(at::kFloat).contiguous();
}

at::Tensor as_output(const at::Tensor& y, const at::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = y.size(1);
  return y.view(shape).to(x.scalar_type());
}

// w: bfloat16 (out, in), or its bits as int16 (how Bf16Linear keeps it out of model.to(dtype)).
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kShort, "w must be bfloat16 or int16 bits");
  at::Tensor rows = as_rows(x, w);
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product(rows, static_cast<const uint16_t*>(w.data_ptr()), nullptr, y);
  return as_output(y, x);
}

// w: int8 (out, in); scale: one float32 per output row.
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "w must be int8");
  at::Tensor rows = as_rows(x, w);
  at::Tensor s = scale.to(at::kFloat).contiguous();
  TORCH_CHECK(s.dim() == 1 && s.size(0) == w.size(0), "scale must have one value per row of w");
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product(rows, w.data_ptr<int8_t>(), s.data_ptr<float>(), y);
  return as_output(y, x);
}

}  // namespace

TORCH_LIBRARY(s2studio_cpu, m) {
  m.def("linear_bf16(Tensor x, Tensor w) -> Tensor");
  m.def("linear_int8(Tensor x, Tensor w, Tensor scale) -> Tensor");
  m.impl("linear_bf16", c10::DispatchKey::CPU, &linear_bf16);
  m.impl("linear_int8", c10::DispatchKey::CPU, &linear_int8);
}
