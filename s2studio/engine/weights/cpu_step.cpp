// The small ops of one fast-path step on the CPU (model/fast_forward.py's `StepOps`), float32, each one call.
//
// At batch 1 a layer-step of a small model does little arithmetic but ran ~50-60 torch ops (norm, qk-norm, RoPE
// through complex views, cache writes, two batched products and a softmax, reshapes), each with a fixed cost of
// several microseconds: torch's CPU rms_norm alone decomposes into five kernels (24-31 us on 512 floats). Here a
// layer-step is a handful of calls: the norm with the residual add, the attention of the new positions (qk-norm,
// RoPE, the cache writes and grouped-query attention over the filled cache), and silu(a) * b. The math is the
// torch code's they replace, step by step (x * rsqrt(mean(x²) + eps) * w; RoPE as the complex product; scores of
// q·scale against the keys, softmax, the weighted values); only the order of the additions differs.
//
// Built into the same library as cpu_gemv.cpp (cpu_gemv.py compiles both), registered as a fragment of its
// `s2studio_cpu` library.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/linear.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

// exp(x) within 1 ulp (measured over -87..20: 0.92 ulp with FMA, 1.2 without; torch's vectorised exp is a 1-ulp
// one too). Range reduction x = n·ln2 + r with ln2 in two parts, then the degree-7 Taylor polynomial of exp(r) on
// |r| <= ln2/2, times 2^n through the exponent bits. Below -87.33 (where float32's exp underflows) the result is 0,
// as exp(-inf); above 88 it stays at exp(88) (no input here is). std::exp is a scalar call per value (40 us for
// the 4097 logits of a draw); the vector form below does 8 at a time.
constexpr float kExpLow = -87.33f, kExpHigh = 88.0f, kLog2e = 1.44269504f, kLn2Hi = 0.693359375f,
                kLn2Lo = -2.12194440e-4f;
constexpr float kExpTerms[] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f,
                               1.0f};

inline float exp_approx(float x) {
  const float clamped = std::min(std::max(x, kExpLow), kExpHigh);
  const float n = std::floor(clamped * kLog2e + 0.5f);
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = kExpTerms[0];
  for (int i = 1; i < 8; ++i) p = p * r + kExpTerms[i];
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < kExpLow ? 0.0f : p * scale;
}

#if defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kWide = 8;
inline __m256 exp8(__m256 x) {
  const __m256 low = _mm256_set1_ps(kExpLow);
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, low), _mm256_set1_ps(kExpHigh));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(clamped, _mm256_set1_ps(kLog2e), _mm256_set1_ps(0.5f)));
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), clamped));
  __m256 p = _mm256_set1_ps(kExpTerms[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTerms[i]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, low, _CMP_LT_OQ), result);
}
inline float lanes_total(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else
constexpr int64_t kWide = 0;  // no vector code: every loop below runs its scalar tail
#endif

// y[i] = exp(x[i] - shift)
inline void exp_shifted(const float* x, float shift, int64_t n, float* y) {
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 by = _mm256_set1_ps(shift);
  for (; k + kWide <= n; k += kWide) _mm256_storeu_ps(y + k, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + k), by)));
#endif
  for (; k < n; ++k) y[k] = exp_approx(x[k] - shift);
}

// Σ a[k]·b[k]
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t k = 0;
  float s = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; k + 2 * kWide <= n; k += 2 * kWide) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + kWide), _mm256_loadu_ps(b + k + kWide), a1);
  }
  for (; k + kWide <= n; k += kWide) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), a0);
  s = lanes_total(_mm256_add_ps(a0, a1));
#endif
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// y[k] += w·x[k]
inline void add_scaled(float w, const float* x, int64_t n, float* y) {
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 wv = _mm256_set1_ps(w);
  for (; k + kWide <= n; k += kWide) {
    _mm256_storeu_ps(y + k, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
  }
#endif
  for (; k < n; ++k) y[k] += w * x[k];
}

// Σ x, in float32 lanes, each block of 64 values added into a double: about as exact as torch's reductions (a plain
// float loop over 4097 values drifts by ~1e-5).
inline double sum_of(const float* x, int64_t n) {
  double total = 0.0;
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; k + 64 <= n; k += 64) {
    __m256 part = _mm256_loadu_ps(x + k);
    for (int64_t b = kWide; b < 64; b += kWide) part = _mm256_add_ps(part, _mm256_loadu_ps(x + k + b));
    total += lanes_total(part);
  }
#endif
  for (; k < n; ++k) total += x[k];
  return total;
}

// max x over n >= 1 values
inline float max_of(const float* x, int64_t n) {
  float top = -INFINITY;
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if (n >= kWide) {
    __m256 m = _mm256_loadu_ps(x);
    for (k = kWide; k + kWide <= n; k += kWide) m = _mm256_max_ps(m, _mm256_loadu_ps(x + k));
    float lanes[kWide];
    _mm256_storeu_ps(lanes, m);
    top = *std::max_element(lanes, lanes + kWide);
  }
#endif
  for (; k < n; ++k) top = std::max(top, x[k]);
  return top;
}

// One row: out = x * rsqrt(mean(x²) + eps) * w, in that order (torch's composite rms_norm).
inline void norm_row(const float* x, const float* w, float eps, int64_t n, float* out) {
  const float r = 1.0f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  if (w != nullptr) {
    for (int64_t k = 0; k < n; ++k) out[k] = (x[k] * r) * w[k];
  } else {
    for (int64_t k = 0; k < n; ++k) out[k] = x[k] * r;
  }
}

void check_float(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous(), name,
              " must be a contiguous float32 CPU tensor");
}

void check_weight(const at::Tensor& weight, int64_t n, const char* name) {
  check_float(weight, name);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, name, " has ", weight.numel(), " values for rows of ", n);
}

// Elementwise work of a prefill (many rows) spread over torch's threads, pieces of at least this many values; a
// decode step's one or two rows stay on the calling thread (at::parallel_for runs a range below its grain inline).
// Each value is computed alone, so the result does not depend on the thread count.
constexpr int64_t kParallelValues = int64_t{1} << 16;

// F.rms_norm(x, (n,), weight, eps) over the last dimension.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_float(x, "x");
  const int64_t n = x.size(-1), rows = x.numel() / n;
  check_weight(weight, n, "weight");
  at::Tensor out = at::empty_like(x);
  const float *xs = x.data_ptr<float>(), *w = weight.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, kParallelValues / n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) norm_row(xs + r * n, w, static_cast<float>(eps), n, o + r * n);
  });
  return out;
}

// (h, rms_norm(h)) with h = x + delta: a block's residual add and the norm after it in one call.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                double eps) {
  check_float(x, "x");
  check_float(delta, "delta");
  TORCH_CHECK(x.sizes() == delta.sizes(), "x ", x.sizes(), " and delta ", delta.sizes(), " differ in shape");
  const int64_t n = x.size(-1), rows = x.numel() / n;
  check_weight(weight, n, "weight");
  at::Tensor h = at::empty_like(x), out = at::empty_like(x);
  const float *xs = x.data_ptr<float>(), *d = delta.data_ptr<float>(), *w = weight.data_ptr<float>();
  float *hs = h.data_ptr<float>(), *o = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, kParallelValues / n), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * n; i < end * n; ++i) hs[i] = xs[i] + d[i];
    for (int64_t r = begin; r < end; ++r) norm_row(hs + r * n, w, static_cast<float>(eps), n, o + r * n);
  });
  return {h, out};
}

// F.silu(a) * b = a / (1 + exp(-a)) * b.
at::Tensor silu_mul(const at::Tensor& a, const at::Tensor& b) {
  check_float(a, "a");
  check_float(b, "b");
  TORCH_CHECK(a.sizes() == b.sizes(), "a ", a.sizes(), " and b ", b.sizes(), " differ in shape");
  at::Tensor out = at::empty_like(a);
  const float *as = a.data_ptr<float>(), *bs = b.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = a.size(-1), rows = a.numel() / std::max<int64_t>(n, 1);
  // a row at a time, its whole vectors then its tail: each value takes the same path (vector or scalar) on any
  // thread and beside any other rows (a batched step's)
  at::parallel_for(0, rows, std::max<int64_t>(1, kParallelValues / std::max<int64_t>(n, 1)), [&](int64_t first,
                                                                                                 int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      int64_t i = r * n;
      const int64_t end = i + n;
#if defined(__AVX2__) && defined(__FMA__)
      const __m256 one = _mm256_set1_ps(1.0f), none = _mm256_setzero_ps();
      for (; i + kWide <= end; i += kWide) {
        const __m256 x = _mm256_loadu_ps(as + i);
        const __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(none, x))));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(bs + i)));
      }
#endif
      for (; i < end; ++i) o[i] = as[i] / (1.0f + exp_approx(-as[i])) * bs[i];
    }
  });
  return out;
}

// From this many cached positions the products go to torch's batched GEMM: measured on this 2-core AVX2 EPYC at 1
// thread, H 32 / KV 8 / D 128 (S2): 96 us here against 128 us for torch's two bmm at 100 positions, 256 against
// 210 at 300, 845 against 678 at 1000; H 8 / KV 2 / D 64 (mid): 78 against 115 at 300, 229 against 165 at 1000.
// The GEMM also spreads the kv heads over torch's threads; below the threshold a second thread gained nothing.
constexpr int64_t kGemmPositions = 384;

// The attention of S new positions pos..pos+S-1 of one layer (`fast_forward.attention` for a few positions):
// qkv (1, S, (H + 2·KV)·D) from wqkv, rows q heads, k heads, v heads; per-head RMSNorm of q and k with their
// weights (when given); RoPE on adjacent pairs with `rope` (S, D/2) complex64; keys and values written into the
// caches (1, KV, L, D) at pos..pos+S-1; query s of head h attends to keys 0..pos+s of kv head h / (H / KV) with
// scale D^-0.5. Returns (1, S, H·D), the input of wo.
at::Tensor attend(const at::Tensor& qkv, const std::optional<at::Tensor>& q_norm, const std::optional<at::Tensor>& k_norm,
                  double eps, const at::Tensor& rope, const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t pos,
                  int64_t heads, int64_t kv_heads) {
  check_float(qkv, "qkv");
  check_float(k_cache, "k_cache");
  check_float(v_cache, "v_cache");
  TORCH_CHECK(rope.device().is_cpu() && rope.scalar_type() == at::kComplexFloat && rope.is_contiguous(),
              "rope must be a contiguous complex64 CPU tensor");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.size(0) == 1 && k_cache.size(1) == kv_heads &&
              v_cache.sizes() == k_cache.sizes(), "the caches must both be (1, ", kv_heads, ", length, head_dim)");
  TORCH_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, heads, " query heads do not group over ", kv_heads,
              " kv heads");
  const int64_t D = k_cache.size(3), L = k_cache.size(2), S = qkv.numel() / ((heads + 2 * kv_heads) * D);
  TORCH_CHECK(D % 2 == 0 && qkv.dim() == 3 && qkv.size(0) == 1 && qkv.size(2) == (heads + 2 * kv_heads) * D,
              "qkv must be (1, S, ", (heads + 2 * kv_heads) * D, ")");
  TORCH_CHECK(S >= 1 && pos >= 0 && pos + S <= L, "positions ", pos, "..", pos + S - 1, " do not fit the ", L,
              "-position cache");
  TORCH_CHECK(rope.dim() == 2 && rope.size(0) == S && rope.size(1) == D / 2, "rope must be (", S, ", ", D / 2, ")");
  if (q_norm) check_weight(*q_norm, D, "q_norm");
  if (k_norm) check_weight(*k_norm, D, "k_norm");
  const int64_t group = heads / kv_heads, width = (heads + 2 * kv_heads) * D;
  const float* in = qkv.data_ptr<float>();
  const float* table = reinterpret_cast<const float*>(rope.data_ptr());  // (S, D/2, 2): real, imaginary
  float *keys = k_cache.data_ptr<float>(), *values = v_cache.data_ptr<float>();
  const float* qn = q_norm ? q_norm->data_ptr<float>() : nullptr;
  const float* kn = k_norm ? k_norm->data_ptr<float>() : nullptr;

  // q heads (normed, rotated) per position, and the new keys and values into the caches
  std::vector<float> q(S * heads * D), normed(D);
  for (int64_t s = 0; s < S; ++s) {
    const float* row = in + s * width;
    const float* turn = table + s * D;
    auto rotate = [&](const float* x, const float* weight, float* out) {
      const float* src = x;
      if (weight != nullptr) {
        norm_row(x, weight, static_cast<float>(eps), D, normed.data());
        src = normed.data();
      }
      for (int64_t i = 0; i < D / 2; ++i) {
        const float a = src[2 * i], b = src[2 * i + 1], c = turn[2 * i], d = turn[2 * i + 1];
        out[2 * i] = a * c - b * d;
        out[2 * i + 1] = a * d + b * c;
      }
    };
    for (int64_t h = 0; h < heads; ++h) rotate(row + h * D, qn, q.data() + (s * heads + h) * D);
    for (int64_t j = 0; j < kv_heads; ++j) {
      rotate(row + (heads + j) * D, kn, keys + (j * L + pos + s) * D);
      std::copy_n(row + (heads + kv_heads + j) * D, D, values + (j * L + pos + s) * D);
    }
  }

  at::Tensor out = at::empty({1, S, heads * D}, qkv.options());
  float* y = out.data_ptr<float>();
  const float scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  const int64_t end = pos + S;
  // kv head j serves query heads j·group .. j·group + group - 1 at every new position: S·group queries, each key
  // and value row read once for all of them
  const int64_t queries = S * group;
  auto kv_head = [&](int64_t j) {
    const float* k = keys + j * L * D;
    const float* v = values + j * L * D;
    std::vector<float> scaled(queries * D), weights(queries * end);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < group; ++i) {
        const float* qh = q.data() + (s * heads + j * group + i) * D;
        for (int64_t d = 0; d < D; ++d) scaled[(s * group + i) * D + d] = qh[d] * scale;
      }
    }
    for (int64_t t = 0; t < end; ++t) {
      for (int64_t n = 0; n < queries; ++n) {  // causal: the query of position pos + s sees keys 0..pos + s
        weights[n * end + t] = t <= pos + n / group ? dot(scaled.data() + n * D, k + t * D, D) : -INFINITY;
      }
    }
    for (int64_t n = 0; n < queries; ++n) {
      float* w = weights.data() + n * end;
      const float top = max_of(w, end);
      exp_shifted(w, top, end, w);
      const float sum = static_cast<float>(sum_of(w, end));
      for (int64_t t = 0; t < end; ++t) w[t] /= sum;
      const int64_t s = n / group, h = j * group + n % group;
      std::fill_n(y + (s * heads + h) * D, D, 0.0f);
    }
    for (int64_t t = 0; t < end; ++t) {
      const float* vt = v + t * D;
      for (int64_t n = 0; n < queries; ++n) {
        const float w = weights[n * end + t];
        float* yh = y + ((n / group) * heads + j * group + n % group) * D;
        add_scaled(w, vt, D, yh);
      }
    }
  };
  if (end < kGemmPositions) {
    for (int64_t j = 0; j < kv_heads; ++j) kv_head(j);
    return out;
  }
  // a long cache: the two products as torch's batched GEMM over the kv heads (threaded by torch), the
  // mask and softmax here in between
  at::Tensor grouped = at::empty({kv_heads, queries, D}, qkv.options());
  float* g = grouped.data_ptr<float>();
  for (int64_t j = 0; j < kv_heads; ++j) {
    for (int64_t n = 0; n < queries; ++n) {
      const float* qh = q.data() + ((n / group) * heads + j * group + n % group) * D;
      for (int64_t d = 0; d < D; ++d) g[(j * queries + n) * D + d] = qh[d] * scale;
    }
  }
  at::Tensor scores = at::bmm(grouped, k_cache.select(0, 0).narrow(1, 0, end).transpose(1, 2)).contiguous();
  float* w = scores.data_ptr<float>();
  for (int64_t row = 0; row < kv_heads * queries; ++row) {
    float* r = w + row * end;
    const int64_t seen = pos + (row % queries) / group + 1;
    std::fill(r + seen, r + end, -INFINITY);
    const float top = max_of(r, end);
    exp_shifted(r, top, end, r);
    const float sum = static_cast<float>(sum_of(r, end));
    for (int64_t t = 0; t < end; ++t) r[t] /= sum;
  }
  at::Tensor attended = at::bmm(scores, v_cache.select(0, 0).narrow(1, 0, end)).contiguous();  // (KV, Q, D)
  const float* a = attended.data_ptr<float>();
  for (int64_t j = 0; j < kv_heads; ++j) {
    for (int64_t n = 0; n < queries; ++n) {
      std::copy_n(a + (j * queries + n) * D, D, y + ((n / group) * heads + j * group + n % group) * D);
    }
  }
  return out;
}

// ----------------------------------------------------------------------------- the sampler's draws
//
// `FastSampler` (engine/s2/fast.py) per draw: top-k of the logits, the cumulative probabilities of those rows under
// the softmax over ALL rows (logsumexp), then top-p and temperature over the k rows, a softmax, and the race
// argmax(p / -log u) at the kept ids. Eleven times a frame, ~10 torch ops each (logsumexp alone 30-150 us on 4097
// floats at batch 1); here two calls: `top_k_cum` once per logits, `kept_draw` once per draw. The uniforms u stay
// torch's own (`uniform_` from the request's generator, read at the same ids), so the random stream is unchanged.

// The k largest of the n logits `x` in descending order (ties: the lower row first) into `v` and their rows into
// `r`, and cumsum(exp(v - logsumexp(x))) into `c`; k <= n. `exps` and `order` are scratch space.
void top_k_into(const float* x, int64_t n, int64_t k, float* v, int64_t* r, float* c, std::vector<float>& exps,
                std::vector<int64_t>& order) {
  const float top = max_of(x, n);
  const float shift = std::isinf(top) ? 0.0f : top;  // as logsumexp: an infinite maximum is not subtracted
  exps.resize(n);
  exp_shifted(x, shift, n, exps.data());
  const float lse = static_cast<float>(std::log(sum_of(exps.data(), n))) + shift;
  order.clear();
  if (k <= 64) {  // a sorted list of the best k so far: a random row rarely enters it (~k·ln(n/k) insertions)
    order.reserve(k + 1);
    for (int64_t i = 0; i < n; ++i) {
      if (static_cast<int64_t>(order.size()) == k && !(x[i] > x[order.back()])) continue;
      auto at = std::upper_bound(order.begin(), order.end(), x[i], [x](float v, int64_t j) { return v > x[j]; });
      order.insert(at, i);  // after the rows of equal value: the lower row first
      if (static_cast<int64_t>(order.size()) > k) order.pop_back();
    }
  } else {
    order.resize(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    auto before = [x](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  }
  double running = 0.0;  // torch's CPU cumsum of float32 accumulates in double too
  for (int64_t i = 0; i < k; ++i) {
    r[i] = order[i];
    v[i] = x[order[i]];
    running += std::exp(v[i] - lse);
    c[i] = static_cast<float>(running);
  }
}

// (values, rows, cum): `top_k_into` as tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor> top_k_cum(const at::Tensor& logits, int64_t k) {
  check_float(logits, "logits");
  TORCH_CHECK(logits.dim() == 1 && logits.numel() >= 1, "logits must be 1-D");
  const int64_t n = logits.numel();
  k = std::min(k, n);
  TORCH_CHECK(k >= 1, "k must be at least 1");
  at::Tensor values = at::empty({k}, logits.options()), cum = at::empty({k}, logits.options());
  at::Tensor rows = at::empty({k}, logits.options().dtype(at::kLong));
  std::vector<float> exps;
  std::vector<int64_t> order;
  top_k_into(logits.data_ptr<float>(), n, k, values.data_ptr<float>(), rows.data_ptr<int64_t>(),
             cum.data_ptr<float>(), exps, order);
  return {values, rows, cum};
}

// One draw over the k top rows (`top_k_into`'s v, r, c): rows whose cumulative probability passed `p_max` are
// removed (the first always kept), the rest tempered by max(t, 1e-5) and softmaxed to p; returns the winner
// argmax(p / -log u[id]) (the first on a tie) over the kept rows' ids (`table[r]` of `table_n`, or `r` itself
// without a table), read from the `u_n` uniforms `us`.
int64_t draw_from(const float* v, const int64_t* r, const float* c, int64_t k, float t, float p_max, const float* us,
                  int64_t u_n, const int64_t* table, int64_t table_n, std::vector<float>& scaled) {
  t = std::max(t, 1e-5f);
  scaled.resize(k);
  float top = -INFINITY;
  for (int64_t i = 0; i < k; ++i) {
    scaled[i] = (i > 0 && c[i] > p_max ? -INFINITY : v[i]) / t;
    top = std::max(top, scaled[i]);
  }
  double sum = 0.0;
  for (int64_t i = 0; i < k; ++i) {
    scaled[i] = std::exp(scaled[i] - top);
    sum += scaled[i];
  }
  int64_t best = 0;
  float best_score = -INFINITY;
  for (int64_t i = 0; i < k; ++i) {
    TORCH_CHECK(!table || (r[i] >= 0 && r[i] < table_n), "row ", r[i], " is outside the ", table_n, " ids");
    const int64_t id = table ? table[r[i]] : r[i];
    TORCH_CHECK(id >= 0 && id < u_n, "id ", id, " is outside the ", u_n, " uniforms");
    const float score = (scaled[i] / static_cast<float>(sum)) / -std::log(us[id]);
    if (score > best_score) {
      best_score = score;
      best = id;
    }
  }
  return best;
}

// `draw_from` on tensors: values, rows and cum of `top_k_cum`, the uniforms `u` already drawn, the optional id
// table; returns the winner as a (1,) int32 tensor.
at::Tensor kept_draw(const at::Tensor& values, const at::Tensor& rows, const at::Tensor& cum, const at::Tensor& temperature,
                     const at::Tensor& top_p, const at::Tensor& u, const std::optional<at::Tensor>& ids) {
  check_float(values, "values");
  check_float(cum, "cum");
  check_float(u, "u");
  TORCH_CHECK(rows.scalar_type() == at::kLong && rows.is_contiguous() && rows.numel() == values.numel() &&
              cum.numel() == values.numel() && values.numel() >= 1, "values, rows and cum must be k each");
  if (ids) TORCH_CHECK(ids->scalar_type() == at::kLong && ids->is_contiguous() && ids->dim() == 1, "ids must be int64");
  std::vector<float> scaled;
  const int64_t best = draw_from(values.data_ptr<float>(), rows.data_ptr<int64_t>(), cum.data_ptr<float>(),
                                 values.numel(), temperature.item<float>(), top_p.item<float>(), u.data_ptr<float>(),
                                 u.numel(), ids ? ids->data_ptr<int64_t>() : nullptr, ids ? ids->numel() : 0, scaled);
  at::Tensor out = at::empty({1}, values.options().dtype(at::kInt));
  out.data_ptr<int32_t>()[0] = static_cast<int32_t>(best);
  return out;
}

// `FastSampler.main_token` and its window update in one call (a dozen torch ops at ~5 us each): the top k of the
// head's logits over the allowed `ids`; the main draw (`temperature`, `top_p`) and the repetition fallback's draw
// (`ras_temperature`, `ras_top_p`), each over `size` fresh uniforms from `generator` in that order; with `check`,
// a semantic main token already in `window` is replaced by the fallback; with `slot` >= 0 the token is then written
// to window[slot]. Returns it as a (1,) int32 tensor.
at::Tensor main_token(const at::Tensor& logits, const at::Tensor& ids, std::optional<at::Generator> generator,
                      const at::Tensor& temperature, const at::Tensor& top_p, const at::Tensor& ras_temperature,
                      const at::Tensor& ras_top_p, int64_t top_k, int64_t size, const at::Tensor& window, bool check,
                      int64_t slot, int64_t semantic_begin, int64_t semantic_end) {
  check_float(logits, "logits");
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.is_contiguous() && ids.numel() == logits.numel(),
              "ids must be int64, one per logit");
  TORCH_CHECK(window.scalar_type() == at::kInt && window.is_contiguous() && window.dim() == 1, "window must be int32");
  TORCH_CHECK(slot < window.numel(), "slot ", slot, " is outside the window of ", window.numel());
  const int64_t n = logits.numel(), k = std::min(top_k, n);
  TORCH_CHECK(k >= 1, "k must be at least 1");
  std::vector<float> values(k), cum(k), exps, scaled;
  std::vector<int64_t> rows(k), order;
  top_k_into(logits.data_ptr<float>(), n, k, values.data(), rows.data(), cum.data(), exps, order);
  auto draw = [&](const at::Tensor& t, const at::Tensor& p) {
    const at::Tensor u = at::empty({size}, logits.options()).uniform_(0.0, 1.0, generator);
    return draw_from(values.data(), rows.data(), cum.data(), k, t.item<float>(), p.item<float>(), u.data_ptr<float>(),
                     size, ids.data_ptr<int64_t>(), n, scaled);
  };
  int64_t main = draw(temperature, top_p);
  const int64_t fallback = draw(ras_temperature, ras_top_p);
  int32_t* seen = window.data_ptr<int32_t>();
  if (check && main >= semantic_begin && main <= semantic_end &&
      std::find(seen, seen + window.numel(), static_cast<int32_t>(main)) != seen + window.numel()) {
    main = fallback;
  }
  if (slot >= 0) seen[slot] = static_cast<int32_t>(main);
  at::Tensor out = at::empty({1}, logits.options().dtype(at::kInt));
  out.data_ptr<int32_t>()[0] = static_cast<int32_t>(main);
  return out;
}

// ----------------------------------------------------------------------------- a whole step of a stack of layers
//
// `fast_forward.step_layers` calls the ops above 9 times per layer from Python, and each Python call costs ~5-10 us
// whatever it computes: on a small model (the tiny demo's 64-wide layers) that is most of a frame, ~100 calls of
// the fast transformer and ~20 of the slow step. `Stack` holds one stack's layers (norm weights, linears, heads,
// its key/value caches) and `stack_step` runs `step_layers` over all of them in one call, the same ops in the same
// order, so the values are those of the per-op route. `fast_codes` runs the fast transformer's 9 passes of a frame
// with their draws (`FastSampler.codes`) in one call.

// What a linear layer's weights are, and so which kernel multiplies them.
enum LinearKind : int64_t {
  kFloat = 0,       // float32 weights small enough to stay in cache (`kSmallFloat`): `gemv_f32` here
  kTorchFloat = 1,  // larger float32 weights (a kFloat layer becomes one): torch's threaded GEMV, as nn.Linear's
  kBf16 = 2,        // the project's kernels (cpu_gemv.cpp) ...
  kInt8 = 3,
  kInt4 = 4,
};

// The project's weight kernels live in cpu_gemv.cpp's own anonymous namespace and are that file's to change: they are
// called here through the dispatcher, by name and signature. A signature that changed is refused when a `Linear`
// is made (the Python side then keeps its per-op route), never at a step.
using Bf16Fn = at::Tensor(const at::Tensor&, const at::Tensor&, bool);
using Int8Fn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool);
using Int4Fn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, bool);

template <typename Fn>
c10::TypedOperatorHandle<Fn> find_kernel(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}
const c10::TypedOperatorHandle<Bf16Fn>& bf16_kernel() {
  static const auto op = find_kernel<Bf16Fn>("s2studio_cpu::linear_bf16");
  return op;
}
const c10::TypedOperatorHandle<Int8Fn>& int8_kernel() {
  static const auto op = find_kernel<Int8Fn>("s2studio_cpu::linear_int8");
  return op;
}
const c10::TypedOperatorHandle<Int4Fn>& int4_kernel() {
  static const auto op = find_kernel<Int4Fn>("s2studio_cpu::linear_int4");
  return op;
}

// Weights (<= this many) that `kFloat` takes: 1 MiB of float32, the size below which narrowing leaves a layer in
// float32 (bf16.py's SMALL). At batch 1 such a product is a few microseconds of arithmetic, and torch's mm costs
// ~3-5 us to dispatch before it starts (MKL/oneDNN's small-GEMV path); larger ones go to torch, threaded.
constexpr int64_t kSmallFloat = int64_t{1} << 18;

#if defined(__AVX2__) && defined(__FMA__)
// The totals of eight vectors, as the eight lanes of one: a row's dot product ends in a horizontal sum that costs
// as much as the products of a 64-wide row; summing eight rows' accumulators together shares it.
inline __m256 totals8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);  // halves: (0 1 2 3 | 0 1 2 3), (4..7 | 4..7)
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// y (rows, N) = x (rows, K) @ w (N, K)^T + bias, one sum of products per output (torch's mm adds in another order):
// eight weight rows at a time where K is a multiple of the vector width, else a row at a time.
at::Tensor gemv_f32(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  const int64_t N = w.size(0), K = w.size(1), rows = x.numel() / K;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor y = at::empty(shape, x.options());
  const float *xs = x.data_ptr<float>(), *ws = w.data_ptr<float>();
  const float* b = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* out = y.data_ptr<float>();
  for (int64_t m = 0; m < rows; ++m) {
    const float* xm = xs + m * K;
    float* ym = out + m * N;
    int64_t n = 0;
#if defined(__AVX2__) && defined(__FMA__)
    if (K % kWide == 0) {
      for (; n + 8 <= N; n += 8) {
        __m256 acc[8];
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
        const float* wn = ws + n * K;
        for (int64_t k = 0; k < K; k += kWide) {
          const __m256 xv = _mm256_loadu_ps(xm + k);
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(wn + r * K + k), xv, acc[r]);
        }
        __m256 sums = totals8(acc);
        if (b) sums = _mm256_add_ps(sums, _mm256_loadu_ps(b + n));
        _mm256_storeu_ps(ym + n, sums);
      }
    }
#endif
    for (; n < N; ++n) ym[n] = dot(ws + n * K, xm, K) + (b ? b[n] : 0.0f);
  }
  return y;
}

// One linear layer as the Python side found it (`cpu_step.linear_of`): its kind, weights, the kind's second
// tensor (int8: the row scales; int4: the groups' scales and offsets), int4's group and an optional float32 bias.
struct Linear : torch::CustomClassHolder {
  int64_t kind, group, in, out;
  at::Tensor w, aux, bias;

  Linear(int64_t kind_, at::Tensor w_, std::optional<at::Tensor> aux_, int64_t group_, std::optional<at::Tensor> bias_)
      : kind(kind_), group(group_), w(std::move(w_)), aux(aux_ ? *aux_ : at::Tensor()),
        bias(bias_ ? *bias_ : at::Tensor()) {
    TORCH_CHECK(w.device().is_cpu() && w.dim() == 2 && w.is_contiguous(), "w must be a contiguous 2-D CPU tensor");
    out = w.size(0);
    in = kind == kInt4 ? 2 * w.size(1) : w.size(1);
    switch (kind) {
      case kFloat:
      case kTorchFloat:
        check_float(w, "w");
        if (w.numel() > kSmallFloat) kind = kTorchFloat;
        break;
      case kBf16:
        TORCH_CHECK(w.scalar_type() == at::kShort || w.scalar_type() == at::kBFloat16, "bf16 weights as int16 bits");
        bf16_kernel();
        break;
      case kInt8:
        TORCH_CHECK(w.scalar_type() == at::kChar && aux.defined(), "int8 weights with their row scales");
        int8_kernel();
        break;
      case kInt4:
        TORCH_CHECK(w.scalar_type() == at::kByte && aux.defined() && group > 0, "int4 codes with their groups");
        int4_kernel();
        break;
      default:
        TORCH_CHECK(false, "unknown linear kind ", kind);
    }
    if (bias.defined()) check_weight(bias, out, "bias");
  }

  // x (..., in) contiguous float32 -> (..., out). `stream`: every row of x as it would be computed alone, however
  // many there are (a batched step: the project's kernels stream the weights once for all of them; torch's product,
  // whose additions may depend on the rows beside, takes one row at a time).
  at::Tensor forward(const at::Tensor& x, bool stream = false) const {
    check_float(x, "x");
    TORCH_CHECK(x.size(-1) == in, "x has ", x.size(-1), " columns but the layer takes ", in);
    at::Tensor y;
    switch (kind) {
      case kFloat:
        return gemv_f32(x, w, bias);
      case kTorchFloat:
        if (stream && x.numel() > in) {
          const at::Tensor rows = x.reshape({-1, in});
          std::vector<at::Tensor> each;
          for (int64_t r = 0; r < rows.size(0); ++r) each.push_back(forward(rows.narrow(0, r, 1)));
          std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
          shape.back() = out;
          return at::cat(each).view(shape);
        }
        return at::linear(x, w, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
      case kBf16:
        y = bf16_kernel().call(x, w, stream);
        break;
      case kInt8:
        y = int8_kernel().call(x, w, aux, stream);
        break;
      default:
        y = int4_kernel().call(x, w, aux, group, stream);
    }
    if (bias.defined()) {  // the Python layers add it after the product, as here
      float* ys = y.data_ptr<float>();
      const float* b = bias.data_ptr<float>();
      for (int64_t i = 0; i < y.numel(); ++i) ys[i] += b[i % out];
    }
    return y;
  }
};

using LinearRef = c10::intrusive_ptr<Linear>;

// One stack of transformer layers (the slow or the fast one) with its key/value caches and the norm after it,
// optionally with the output layer after that norm (the fast transformer's, which `fast_codes` needs).
struct Stack : torch::CustomClassHolder {
  struct Layer {
    at::Tensor attention_norm, ffn_norm, q_norm, k_norm, k_cache, v_cache;
    double attention_eps, ffn_eps, qk_eps;
    int64_t heads, kv_heads;
    LinearRef wqkv, wo, w1, w3, w2;
  };
  std::vector<Layer> layers;
  at::Tensor norm;
  double norm_eps = 0.0;
  LinearRef output;

  Stack(at::Tensor norm_, double eps) : norm(std::move(norm_)), norm_eps(eps) { check_float(norm, "norm"); }

  void add_layer(at::Tensor attention_norm, double attention_eps, at::Tensor ffn_norm, double ffn_eps,
                 std::optional<at::Tensor> q_norm, std::optional<at::Tensor> k_norm, double qk_eps, int64_t heads,
                 int64_t kv_heads, at::Tensor k_cache, at::Tensor v_cache, LinearRef wqkv, LinearRef wo, LinearRef w1,
                 LinearRef w3, LinearRef w2) {
    const int64_t dim = norm.numel();
    check_weight(attention_norm, dim, "attention_norm");
    check_weight(ffn_norm, dim, "ffn_norm");
    check_float(k_cache, "k_cache");
    check_float(v_cache, "v_cache");
    TORCH_CHECK(wqkv->in == dim && wo->out == dim && w1->in == dim && w3->in == dim && w2->out == dim &&
                w1->out == w3->out && w2->in == w1->out, "the layer's linears do not chain over width ", dim);
    layers.push_back(Layer{attention_norm, ffn_norm, q_norm ? *q_norm : at::Tensor(), k_norm ? *k_norm : at::Tensor(),
                           k_cache, v_cache, attention_eps, ffn_eps, qk_eps, heads, kv_heads, wqkv, wo, w1, w3, w2});
  }

  void set_output(LinearRef linear) {
    TORCH_CHECK(linear->in == norm.numel(), "the output layer takes ", linear->in, " inputs, not ", norm.numel());
    output = std::move(linear);
  }

  // `step_layers`: x (1, S, dim) at positions pos..pos+S-1 through every layer, then the norm: (x, norm(x)).
  std::tuple<at::Tensor, at::Tensor> step(const at::Tensor& x, const at::Tensor& rope, int64_t pos) const {
    return steps({this}, x, {rope}, {pos});
  }

  // B streams at once, one stack each (the same layers, each its own caches): x (B, S, dim), stream b's S rows at its
  // positions[b].. with RoPE rows ropes[b] (S, D/2). The linears take all B·S rows in one pass over their weights,
  // each row computed as it is alone (`Linear::forward`'s `stream`); the norms, silu·mul and attention are each
  // row's or each stream's own: so a stream's rows are the same bits whatever streams step beside it.
  static std::tuple<at::Tensor, at::Tensor> steps(const std::vector<const Stack*>& slots, const at::Tensor& x0,
                                                  const std::vector<at::Tensor>& ropes,
                                                  const std::vector<int64_t>& positions) {
    TORCH_CHECK(!slots.empty() && slots.size() == ropes.size() && slots.size() == positions.size(),
                "one rope table and position per stack");
    const Stack& own = *slots.front();
    TORCH_CHECK(!own.layers.empty(), "the stack has no layers");
    const int64_t B = static_cast<int64_t>(slots.size()), dim = own.norm.numel();
    check_float(x0, "x");
    TORCH_CHECK(x0.dim() == 3 && x0.size(0) == B && x0.size(2) == dim, "x must be (", B, ", S, ", dim, ")");
    for (const Stack* other : slots) {
      TORCH_CHECK(other->layers.size() == own.layers.size(), "the stacks hold different layers");
      for (size_t l = 0; l < own.layers.size(); ++l) {
        TORCH_CHECK(other->layers[l].wqkv->w.is_same(own.layers[l].wqkv->w) &&
                        other->layers[l].w2->w.is_same(own.layers[l].w2->w),
                    "the stacks hold different weights");
      }
    }
    const Layer& first = own.layers.front();
    at::Tensor x = x0, normed = rms_norm(x, first.attention_norm, first.attention_eps), delta;
    for (size_t l = 0; l < own.layers.size(); ++l) {
      const Layer& layer = own.layers[l];
      if (delta.defined()) std::tie(x, normed) = add_rms_norm(x, delta, layer.attention_norm, layer.attention_eps);
      const std::optional<at::Tensor> qn = layer.q_norm.defined() ? std::optional(layer.q_norm) : std::nullopt;
      const std::optional<at::Tensor> kn = layer.k_norm.defined() ? std::optional(layer.k_norm) : std::nullopt;
      const at::Tensor qkv = layer.wqkv->forward(normed, true);
      std::vector<at::Tensor> each;
      for (int64_t b = 0; b < B; ++b) {
        const Layer& cached = slots[b]->layers[l];
        each.push_back(attend(qkv.narrow(0, b, 1), qn, kn, layer.qk_eps, ropes[b], cached.k_cache, cached.v_cache,
                              positions[b], layer.heads, layer.kv_heads));
      }
      const at::Tensor attended = layer.wo->forward(B == 1 ? each.front() : at::cat(each), true);
      std::tie(x, normed) = add_rms_norm(x, attended, layer.ffn_norm, layer.ffn_eps);
      delta = layer.w2->forward(silu_mul(layer.w1->forward(normed, true), layer.w3->forward(normed, true)), true);
    }
    return add_rms_norm(x, delta, own.norm, own.norm_eps);
  }
};

using StackRef = c10::intrusive_ptr<Stack>;

std::tuple<at::Tensor, at::Tensor> stack_step(const StackRef& stack, const at::Tensor& x, const at::Tensor& rope,
                                              int64_t pos) {
  return stack->step(x, rope, pos);
}

std::vector<const Stack*> stacks_of(const c10::List<StackRef>& stacks) {
  std::vector<const Stack*> out;
  for (const StackRef& stack : stacks) out.push_back(stack.get());
  return out;
}

// `Stack::steps` from Python: stream b through stacks[b] at positions[b], with RoPE rows rope[b] (S, D/2).
std::tuple<at::Tensor, at::Tensor> stacks_step(const c10::List<StackRef>& stacks, const at::Tensor& x,
                                               const at::Tensor& rope, at::IntArrayRef positions) {
  TORCH_CHECK(rope.dim() == 3 && rope.size(0) == static_cast<int64_t>(stacks.size()), "rope must be (B, S, D/2)");
  std::vector<at::Tensor> ropes;
  for (int64_t b = 0; b < rope.size(0); ++b) ropes.push_back(rope.select(0, b));
  return Stack::steps(stacks_of(stacks), x, ropes, positions.vec());
}

// `FastSampler.codes` after code 0 for B streams at once, stream b through stacks[b] (each a stack with its output
// layer and its own caches): positions 0 (`hidden[b]`, the slow model's state) and 1 (`table[code0[b]]`) as one
// step, then one position per code; after each step the output layer's logits of every stream, and per stream in
// turn their top k (`top_k_into`), `size` uniforms from its generator (drawn as torch's `uniform_` draws them, so
// the random stream is the torch sampler's) and the draw (`draw_from`) at its temperature, top-p and top-k; the code
// drawn is the stream's next input, `table`'s row. `rope`: the fast RoPE table, one row per position. Returns codes
// 1..count-1 of every stream, (B, count - 1) int32. Each stream draws only from its own generator, in the order of a
// stream alone, so the streams beside it change nothing.
at::Tensor fast_codes_streams(const std::vector<const Stack*>& stacks, const at::Tensor& table,
                              const at::Tensor& hidden, const std::vector<int64_t>& code0,
                              const std::vector<std::optional<at::Generator>>& generators, const at::Tensor& rope,
                              const std::vector<float>& temperature, const std::vector<float>& top_p,
                              const std::vector<int64_t>& top_k, int64_t size, int64_t count) {
  const Stack& own = *stacks.front();
  const int64_t B = static_cast<int64_t>(stacks.size());
  TORCH_CHECK(own.output, "the stack has no output layer");
  check_float(table, "table");
  check_float(hidden, "hidden");
  const int64_t dim = own.norm.numel(), n = own.output->out;
  TORCH_CHECK(table.dim() == 2 && table.size(1) == dim && hidden.numel() == B * dim, "table rows and hidden must be ",
              dim, " wide");
  TORCH_CHECK(count >= 2 && rope.size(0) >= count, "count must be 2..", rope.size(0));
  TORCH_CHECK(size >= n, "top_k must be at least 1 and size at least ", n);
  TORCH_CHECK(static_cast<int64_t>(code0.size()) == B && static_cast<int64_t>(generators.size()) == B &&
                  static_cast<int64_t>(temperature.size()) == B && static_cast<int64_t>(top_p.size()) == B &&
                  static_cast<int64_t>(top_k.size()) == B, "one code, generator and setting per stream");
  for (int64_t k : top_k) TORCH_CHECK(k >= 1, "top_k must be at least 1 and size at least ", n);
  const float* rows = table.data_ptr<float>();
  auto row_of = [&](int64_t code) {
    TORCH_CHECK(code >= 0 && code < table.size(0), "code ", code, " is outside the ", table.size(0), " rows");
    return rows + code * dim;
  };
  at::Tensor x = at::empty({B, 2, dim}, table.options());
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(hidden.data_ptr<float>() + b * dim, dim, x.data_ptr<float>() + 2 * b * dim);
    std::copy_n(row_of(code0[b]), dim, x.data_ptr<float>() + (2 * b + 1) * dim);
  }
  at::Tensor codes = at::empty({B, count - 1}, table.options().dtype(at::kInt));
  std::vector<float> values, cum, exps, scaled;
  std::vector<int64_t> top, order;
  int64_t start = 0;
  for (int64_t i = 0; i + 1 < count; ++i) {
    const int64_t S = x.size(1);
    const std::vector<at::Tensor> ropes(B, rope.narrow(0, start, S));
    const at::Tensor normed = std::get<1>(Stack::steps(stacks, x, ropes, std::vector<int64_t>(B, start)));
    const at::Tensor logits = own.output->forward(normed.narrow(1, S - 1, 1).contiguous(), true);
    at::Tensor next = at::empty({B, 1, dim}, table.options());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t k = std::min(top_k[b], n);
      values.resize(k);
      cum.resize(k);
      top.resize(k);
      top_k_into(logits.data_ptr<float>() + b * n, n, k, values.data(), top.data(), cum.data(), exps, order);
      const at::Tensor u = at::empty({size}, table.options()).uniform_(0.0, 1.0, generators[b]);
      const int64_t code = draw_from(values.data(), top.data(), cum.data(), k, temperature[b], top_p[b],
                                     u.data_ptr<float>(), size, nullptr, 0, scaled);
      codes.data_ptr<int32_t>()[b * (count - 1) + i] = static_cast<int32_t>(code);
      std::copy_n(row_of(code), dim, next.data_ptr<float>() + b * dim);
    }
    if (i + 2 == count) break;  // the last code: no pass follows it
    start += S;
    x = next;
  }
  return codes;
}

// One stream: the sampler's `fast_codes` (codes 1..count-1 as int32).
at::Tensor fast_codes(const StackRef& stack, const at::Tensor& table, const at::Tensor& hidden, int64_t code0,
                      std::optional<at::Generator> generator, const at::Tensor& rope, const at::Tensor& temperature,
                      const at::Tensor& top_p, int64_t top_k, int64_t size, int64_t count) {
  return fast_codes_streams({stack.get()}, table, hidden, {code0}, {generator}, rope, {temperature.item<float>()},
                            {top_p.item<float>()}, {top_k}, size, count).view({count - 1});
}

// B streams (`fast_codes_streams`): stream b through stacks[b], from hidden[b] and code0[b], drawing from
// generators[b] at temperature[b], top_p[b] (float32) and top_k[b].
at::Tensor fast_codes_batch(const c10::List<StackRef>& stacks, const at::Tensor& table, const at::Tensor& hidden,
                            at::IntArrayRef code0, const c10::List<std::optional<at::Generator>>& generators,
                            const at::Tensor& rope, const at::Tensor& temperature, const at::Tensor& top_p,
                            at::IntArrayRef top_k, int64_t size, int64_t count) {
  check_float(temperature, "temperature");
  check_float(top_p, "top_p");
  TORCH_CHECK(temperature.numel() == static_cast<int64_t>(stacks.size()) && top_p.numel() == temperature.numel(),
              "one temperature and top-p per stream");
  std::vector<std::optional<at::Generator>> each;
  for (const auto& g : generators) each.push_back(g);
  const float *t = temperature.data_ptr<float>(), *p = top_p.data_ptr<float>();
  return fast_codes_streams(stacks_of(stacks), table, hidden, code0.vec(), each, rope,
                            std::vector<float>(t, t + temperature.numel()), std::vector<float>(p, p + top_p.numel()),
                            top_k.vec(), size, count);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(s2studio_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor delta, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_mul(Tensor a, Tensor b) -> Tensor");
  m.def("attend(Tensor qkv, Tensor? q_norm, Tensor? k_norm, float eps, Tensor rope, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, int pos, int heads, int kv_heads) -> Tensor");
  m.def("top_k_cum(Tensor logits, int k) -> (Tensor, Tensor, Tensor)");
  m.def("kept_draw(Tensor values, Tensor rows, Tensor cum, Tensor temperature, Tensor top_p, Tensor u, Tensor? ids) "
        "-> Tensor");
  m.impl("top_k_cum", c10::DispatchKey::CPU, &top_k_cum);
  m.impl("kept_draw", c10::DispatchKey::CPU, &kept_draw);
  m.impl("rms_norm", c10::DispatchKey::CPU, &rms_norm);
  m.impl("add_rms_norm", c10::DispatchKey::CPU, &add_rms_norm);
  m.impl("silu_mul", c10::DispatchKey::CPU, &silu_mul);
  m.impl("attend", c10::DispatchKey::CPU, &attend);
  m.class_<Linear>("Linear")
      .def(torch::init<int64_t, at::Tensor, std::optional<at::Tensor>, int64_t, std::optional<at::Tensor>>())
      .def("forward", [](const c10::intrusive_ptr<Linear>& self, const at::Tensor& x) { return self->forward(x); })
      .def("rows", [](const c10::intrusive_ptr<Linear>& self, const at::Tensor& x) { return self->forward(x, true); })
      .def("kind", [](const c10::intrusive_ptr<Linear>& self) { return self->kind; });
  m.class_<Stack>("Stack")
      .def(torch::init<at::Tensor, double>())
      .def("add_layer", &Stack::add_layer)
      .def("set_output", &Stack::set_output);
  m.def("stack_step(__torch__.torch.classes.s2studio_cpu.Stack stack, Tensor x, Tensor rope, int pos) -> "
        "(Tensor, Tensor)");
  m.def("fast_codes(__torch__.torch.classes.s2studio_cpu.Stack stack, Tensor table, Tensor hidden, int code0, "
        "Generator? generator, Tensor rope, Tensor temperature, Tensor top_p, int top_k, int size, int count) "
        "-> Tensor");
  m.def("main_token(Tensor logits, Tensor ids, Generator? generator, Tensor temperature, Tensor top_p, "
        "Tensor ras_temperature, Tensor ras_top_p, int top_k, int size, Tensor(a!) window, bool check, int slot, "
        "int semantic_begin, int semantic_end) -> Tensor");
  m.impl("main_token", c10::DispatchKey::CPU, &main_token);
  m.impl("stack_step", c10::DispatchKey::CPU, &stack_step);
  m.def("stacks_step(__torch__.torch.classes.s2studio_cpu.Stack[] stacks, Tensor x, Tensor rope, int[] positions) -> "
        "(Tensor, Tensor)");
  m.impl("stacks_step", c10::DispatchKey::CPU, &stacks_step);
  m.def("fast_codes_batch(__torch__.torch.classes.s2studio_cpu.Stack[] stacks, Tensor table, Tensor hidden, "
        "int[] code0, Generator?[] generators, Tensor rope, Tensor temperature, Tensor top_p, int[] top_k, int size, "
        "int count) -> Tensor");
  m.impl("fast_codes_batch", c10::DispatchKey::CPU, &fast_codes_batch);
  m.impl("fast_codes", c10::DispatchKey::CPU, &fast_codes);
}
