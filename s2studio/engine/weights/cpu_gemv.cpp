// Linear layers with narrow (bf16, int8 or int4) weights and float32 arithmetic on the CPU, for the fast path: decode
// steps stream the weights once at memory speed; prefills go through torch's GEMM a block of rows at a time.
//
// At batch 1 a decode step reads every weight once and does two flops with it, so its time is the weight
// bytes over the memory bandwidth. Torch has no kernel that reads bfloat16 or int8 weights at that speed
// with float32 activations on a CPU without AVX512-BF16/AMX: its bf16 GEMV and its weight-only int8 kernel
// (`_weight_int8pack_mm`) are compute-bound at about half the bandwidth, fbgemm's int8 kernel is fast only
// because it also rounds the activations to 8 bits, and its int4 kernel (`_weight_int4pack_mm_for_cpu`, bfloat16
// activations) is compute-bound too (about int8's speed, for half the bytes). Here each bf16 weight is widened
// to float32 in registers and multiplied by the float32 activation, so the result is the float32 product of the
// stored weights (only the order of the additions differs from a float32 GEMM); int8 and int4 weights sum exact
// integer products against the activations rounded to 16 bits per group (int8: of 128; int4: the weights' own group
// of 64 or 128 columns; `Rows16` says why and how close).
//
// Built by s2studio/engine/weights/cpu_gemv.py with the vector width torch itself chose for this CPU (-mavx512* or
// -mavx2); the generic code below is the same for every width, including the scalar one.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && !defined(__AVX512BW__)
#error "the 512-bit code needs AVX512BW too (cpu_gemv.py's AVX512 flags give both)"
#endif
#if defined(_WIN32)
#include <process.h>
#else
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace {

#if defined(_WIN32)
inline int64_t process_id() { return _getpid(); }
#else
inline int64_t process_id() { return getpid(); }
#endif

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
using Vec = __m512;
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec widen(const uint16_t* p) {  // bfloat16 bits are the high half of a float32
  __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec splat(float v) { return _mm512_set1_ps(v); }
inline float total(Vec v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kLanes = 8;
using Vec = __m256;
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec widen(const uint16_t* p) {
  __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec splat(float v) { return _mm256_set1_ps(v); }
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
inline Vec add(Vec a, Vec b) { return a + b; }
inline Vec splat(float v) { return v; }
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
  float s = total(add(add(a0, a1), add(a2, a3)));  // one horizontal sum a row, not four
  for (; k < K; ++k) s += x[k] * scalar(w[k]);
  return s;
}

// max |x| over n values, or NaN if one of them is NaN (a max instruction would drop it).
inline float abs_max(const float* x, int64_t n) {
  float top = 0.0f;
  int64_t k = 0;
  bool nan = false;
#if defined(__AVX512F__)
  __m512 v = _mm512_setzero_ps();
  __mmask16 unordered = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512 a = _mm512_loadu_ps(x + k);
    unordered |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    v = _mm512_max_ps(v, _mm512_abs_ps(a));
  }
  top = _mm512_reduce_max_ps(v);
  nan = unordered != 0;
#elif defined(__AVX2__)
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v = _mm256_setzero_ps(), unordered = _mm256_setzero_ps();
  for (; k + 8 <= n; k += 8) {
    const __m256 a = _mm256_loadu_ps(x + k);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    v = _mm256_max_ps(v, _mm256_and_ps(a, magnitude));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, v);
  for (float lane : lanes) top = std::max(top, lane);
  nan = _mm256_movemask_ps(unordered) != 0;
#endif
  for (; k < n; ++k) {
    nan = nan || std::isnan(x[k]);
    top = std::max(top, std::fabs(x[k]));
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : top;
}

// X = x·inverse rounded to the nearest integer (ties to even), within ±32767, into `out`; returns Σ X. The vector
// code rounds as the scalar one does (the same product, clamp and rounding mode), so every width makes the same X.
inline int64_t round16(const float* x, int64_t n, float inverse, int16_t* out) {
  int64_t k = 0, total = 0;
#if defined(__AVX512F__)
  const __m512 scale = _mm512_set1_ps(inverse), high = _mm512_set1_ps(32767.0f), low = _mm512_set1_ps(-32767.0f);
  __m512i sums = _mm512_setzero_si512();
  for (; k + 16 <= n; k += 16) {
    const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + k), scale), low), high);
    const __m512i q = _mm512_cvtps_epi32(v);
    sums = _mm512_add_epi32(sums, q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm512_cvtepi32_epi16(q));
  }
  total = _mm512_reduce_add_epi32(sums);  // |X| <= 32767: the int32 total is exact below 2^16 values (a group)
#elif defined(__AVX2__)
  const __m256 scale = _mm256_set1_ps(inverse), high = _mm256_set1_ps(32767.0f), low = _mm256_set1_ps(-32767.0f);
  __m256i sums = _mm256_setzero_si256();
  for (; k + 16 <= n; k += 16) {
    const __m256i a = _mm256_cvtps_epi32(
        _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), scale), low), high));
    const __m256i b = _mm256_cvtps_epi32(
        _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), scale), low), high));
    sums = _mm256_add_epi32(sums, _mm256_add_epi32(a, b));
    // packs works within 128-bit halves: (a0-3 b0-3 a4-7 b4-7), put back in order
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
  }
  int32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), sums);
  for (int32_t lane : lanes) total += lane;
#endif
  for (; k < n; ++k) {
    const int16_t v = static_cast<int16_t>(std::nearbyint(std::clamp(x[k] * inverse, -32767.0f, 32767.0f)));
    out[k] = v;
    total += v;
  }
  return total;
}

// dot(w0, x) and dot(w1, x) for two rows sharing each load of x, for rows too wide for x to stay in L1 (a float32 x
// of 9728 values is 38 KiB): measured on a Zen 4 core in L2, 9728 wide, 41 against 31 GB/s a row at a time (and
// 42 against 46 at 2560, where x fits: there a row at a time).
template <typename W>
void dot2(const W* w0, const W* w1, const float* x, int64_t K, float* out) {
  Vec a0 = zero(), a1 = zero(), b0 = zero(), b1 = zero();
  int64_t k = 0;
  for (; k + 2 * kLanes <= K; k += 2 * kLanes) {
    if ((k * int64_t(sizeof(W))) % 64 == 0) {
      __builtin_prefetch(reinterpret_cast<const char*>(w0 + k) + kAhead, 0, 2);
      __builtin_prefetch(reinterpret_cast<const char*>(w1 + k) + kAhead, 0, 2);
    }
    const Vec x0 = load(x + k), x1 = load(x + k + kLanes);
    a0 = fma(widen(w0 + k), x0, a0);
    a1 = fma(widen(w0 + k + kLanes), x1, a1);
    b0 = fma(widen(w1 + k), x0, b0);
    b1 = fma(widen(w1 + k + kLanes), x1, b1);
  }
  float s0 = total(add(a0, a1)), s1 = total(add(b0, b1));
  for (; k < K; ++k) {
    s0 += x[k] * scalar(w0[k]);
    s1 += x[k] * scalar(w1[k]);
  }
  out[0] = s0;
  out[1] = s1;
}

// From this many bytes of float32 x up, rows are taken in pairs (`dot2`): L1 holds 32-48 KiB of data.
constexpr int64_t kWideX = 24 << 10;

// Activations rounded to 16 bits, for the int8 and int4 rows. Widening every narrow weight to float32 makes a
// decode step compute-bound (measured, weights in L2, one core: int8 ~23 GB/s on a Zen 4 core at AVX512 against
// ~26 GB/s of memory bandwidth per core there; int4 ~15 G codes/s on an AVX2 Zen 3 core). So each row of x is
// rounded per group of G columns instead, x ≈ t·X with X an int16 and t = max|x| / 32767 of the group, and the
// weights' integers are multiplied by X exactly in int32 by `madd` (16 or 32 products and their pairwise sums in
// one instruction, the weights widened to 16 bits only): int8 ~46 GB/s a core (the same Zen 4, in L2). The
// rounding moves each activation by at most t/2 = max|x|·2⁻¹⁶ of its group: 256 times finer than the int8
// weights' own rounding (max|row|·2⁻⁸), and finer than the bfloat16 activations torch's int4 and int8 kernels
// take.
struct Rows16 {
  // x (M, K) per group of G columns (the last one shorter when G does not divide K): the int16 values X, the
  // step t and t·Σ X (the Σ x of the rounded values), `groups` per row.
  int64_t groups;
  std::vector<int16_t> values;
  std::vector<float> step, sum;
  Rows16(const float* x, int64_t M, int64_t K, int64_t G)
      : groups((K + G - 1) / G), values(M * K), step(M * groups), sum(M * groups) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t k0 = g * G, n = std::min(G, K - k0);
        const float top = abs_max(x + m * K + k0, n);
        if (!std::isfinite(top)) {  // NaN or infinity in x: NaN out, as a float32 product would give
          std::fill_n(values.data() + m * K + k0, n, int16_t{0});
          step[m * groups + g] = sum[m * groups + g] = std::numeric_limits<float>::quiet_NaN();
          continue;
        }
        const float t = top / 32767.0f, inverse = top > 0.0f ? 32767.0f / top : 0.0f;
        const int64_t total = round16(x + m * K + k0, n, inverse, values.data() + m * K + k0);
        step[m * groups + g] = t;
        sum[m * groups + g] = t * static_cast<float>(total);
      }
    }
  }
};

// int8 rows (one float scale per row): over a group, dot(w, x) = t·Σ q·X. A group's Σ q·X is exact in int32: its
// |q| <= 127 and |X| <= 32767 allow 516 products.
constexpr int64_t kGroup8 = 128;

// The int32 lane sums of Σ q·X over the first n8 = n rounded down to the vector block (returned) of n values.
#if defined(__AVX512F__)
using Lanes = __m512i;
constexpr int64_t kBlock8 = 64;
inline Lanes sums8(const int8_t* w, const int16_t* X, int64_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
  for (int64_t k = 0; k + kBlock8 <= n; k += kBlock8) {
    __builtin_prefetch(reinterpret_cast<const char*>(w + k) + kAhead, 0, 2);
    const __m512i w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k)));
    const __m512i w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k + 32)));
    a0 = _mm512_add_epi32(a0, _mm512_madd_epi16(w0, _mm512_loadu_si512(X + k)));
    a1 = _mm512_add_epi32(a1, _mm512_madd_epi16(w1, _mm512_loadu_si512(X + k + 32)));
  }
  return _mm512_add_epi32(a0, a1);
}
inline Vec lanes_to_float(Lanes l) { return _mm512_cvtepi32_ps(l); }
#elif defined(__AVX2__) && defined(__FMA__)
using Lanes = __m256i;
constexpr int64_t kBlock8 = 64;
inline Lanes sums8(const int8_t* w, const int16_t* X, int64_t n) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int64_t k = 0; k + kBlock8 <= n; k += kBlock8) {
    __builtin_prefetch(reinterpret_cast<const char*>(w + k) + kAhead, 0, 2);
    for (int i = 0; i < 4; ++i) {
      const __m256i wi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + k + 16 * i)));
      a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(wi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(X + k + 16 * i))));
    }
  }
  return _mm256_add_epi32(_mm256_add_epi32(a[0], a[1]), _mm256_add_epi32(a[2], a[3]));
}
inline Vec lanes_to_float(Lanes l) { return _mm256_cvtepi32_ps(l); }
#else
using Lanes = int32_t;
constexpr int64_t kBlock8 = 1;
inline Lanes sums8(const int8_t* w, const int16_t* X, int64_t n) {
  int32_t s = 0;
  for (int64_t k = 0; k < n; ++k) s += int32_t{w[k]} * X[k];
  return s;
}
inline Vec lanes_to_float(Lanes l) { return static_cast<float>(l); }
#endif

// dot(w, x) of one int8 row against one row of x's `Rows16` parts (X, steps), groups of kGroup8.
float dot8(const int8_t* w, const int16_t* X, const float* step, int64_t K) {
  Vec acc = zero();
  float rest = 0.0f;  // the values past a group's last whole vector block
  for (int64_t k0 = 0, g = 0; k0 < K; k0 += kGroup8, ++g) {
    const int64_t n = std::min(kGroup8, K - k0), whole = n / kBlock8 * kBlock8;
    if (whole > 0) acc = fma(lanes_to_float(sums8(w + k0, X + k0, whole)), splat(step[g]), acc);
    int32_t tail = 0;
    for (int64_t k = k0 + whole; k < k0 + n; ++k) tail += int32_t{w[k]} * X[k];
    rest += step[g] * static_cast<float>(tail);
  }
  return total(acc) + rest;
}

// int4 weights. The codes q (0..15) of a row lie in blocks of 64 codes over 32 bytes, read as 16 lanes of 16 bits:
// bits 4i..4i+3 of lane j hold code 16i + j (int4.py packs them so), so one mask (or one shift) per 16 codes
// unpacks a block at every width (block_sums). Each group of G codes of a row (G a multiple of 64) has a bfloat16
// scale s and offset z, w = (q - 8)·s + z (torch's int4 form), and over a group dot(w, x) = s·Σ q·x + (z - 8s)·Σ x.
//
// Against x rounded to 16 bits per group (`Rows16`, the group of the weights' ranges) Σ q·X is summed exactly in
// int32 by `madd`: ~30 G codes/s per core (CPU time, weights in L2, a 2.9 GHz Zen 3 core: 2.1 ns per block of 64
// codes and row), twice what widening every code to float32 gave there. A group's error is at most
// 128 · t/2 · max|w| = max|x| · 2⁻⁹ · max|w|, what bfloat16 activations allow for their largest value alone.
constexpr int64_t kCodeBlock = 64;

// Code k of an int4 row (the layout above).
inline int code4(const uint8_t* row, int64_t k) {
  const uint8_t* lane = row + (k / kCodeBlock) * 32 + 2 * (k % 16);
  const int bits = lane[0] | (lane[1] << 8);
  return (bits >> (4 * ((k % kCodeBlock) / 16))) & 15;
}

// Row `row` of int4 codes (K of them, groups of G) widened to float32, w = (q - 8)·s + z, for a prefill's GEMM. A
// block's 16 lanes are read once and each gives its 4 codes (code 16i + j: bits 4i..4i+3 of lane j), which the
// compiler vectorises; a code at a time (`code4`) made S2 Pro's int4 prefill twice int8's (measured: 37 s against
// 17 s for the first frame of a 75-token prompt at 1 thread), the widening costing more than the GEMM.
void widen4(const uint8_t* row, const uint16_t* sz, int64_t K, int64_t G, float* dst) {
  for (int64_t g = 0; g < K / G; ++g) {
    const float s = scalar(sz[2 * g]), z = scalar(sz[2 * g + 1]);
    for (int64_t b = g * G; b < (g + 1) * G; b += kCodeBlock) {
      const uint8_t* block = row + b / 2;
      float* out = dst + b;
      for (int j = 0; j < 16; ++j) {
        const int bits = block[2 * j] | (block[2 * j + 1] << 8);
        for (int i = 0; i < 4; ++i) out[16 * i + j] = static_cast<float>(((bits >> (4 * i)) & 15) - 8) * s + z;
      }
    }
  }
}

#if defined(__AVX2__)
// Σ q·X over `blocks` blocks of 64 codes for R rows `row_bytes` apart, from `b` (codes) and `xk` (X): the int32
// lane sums, 8 lanes of pairs of products. Masking a lane in place leaves code 16 + j times 16 and code 32 + j
// times 256 (one instruction each, where a shift and a mask would be two), so those products are summed apart
// and divided back by a shift, exactly (every such sum is a multiple of 16 or 256; with |X| <= 32767 the
// times-256 sums of 8 blocks stay below 2^31). A lane's sum is the same set of integer products in any order.
// `Blocks` > 0: that many blocks, known when compiled (the loop disappears); 0: `blocks` (<= 8) at run time.
template <int R, int Blocks>
inline void block_sums_256(const uint8_t* b, int64_t row_bytes, const int16_t* xk, int64_t blocks, __m256i* lanes) {
  const __m256i nibble0 = _mm256_set1_epi16(0x000F), nibble1 = _mm256_set1_epi16(0x00F0);
  const __m256i nibble2 = _mm256_set1_epi16(0x0F00);
  __m256i ones[R], sixteens[R], many[R];
  for (int r = 0; r < R; ++r) ones[r] = sixteens[r] = many[r] = _mm256_setzero_si256();
  const int64_t count = Blocks > 0 ? Blocks : blocks;
  for (int64_t i = 0; i < count; ++i, b += 32, xk += kCodeBlock) {
    const __m256i* xv = reinterpret_cast<const __m256i*>(xk);
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = b + r * row_bytes;
      if (Blocks != 2 || i == 0) __builtin_prefetch(row + kAhead, 0, 2);  // Blocks 2: one 64-byte line
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
      ones[r] = _mm256_add_epi32(ones[r], _mm256_madd_epi16(_mm256_and_si256(c, nibble0), _mm256_loadu_si256(xv)));
      sixteens[r] =
          _mm256_add_epi32(sixteens[r], _mm256_madd_epi16(_mm256_and_si256(c, nibble1), _mm256_loadu_si256(xv + 1)));
      many[r] = _mm256_add_epi32(many[r], _mm256_madd_epi16(_mm256_and_si256(c, nibble2), _mm256_loadu_si256(xv + 2)));
      ones[r] = _mm256_add_epi32(ones[r], _mm256_madd_epi16(_mm256_srli_epi16(c, 12), _mm256_loadu_si256(xv + 3)));
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256i scaled = _mm256_add_epi32(_mm256_srai_epi32(sixteens[r], 4), _mm256_srai_epi32(many[r], 8));
    lanes[r] = _mm256_add_epi32(lanes[r], _mm256_add_epi32(ones[r], scaled));
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// `block_sums_256` two blocks at a time in 512-bit registers (block i in the low half, i + 1 in the high one,
// their X halves joined per load of x), the halves' lanes added at the end: the same 8 int32 lane sums, so the same
// result at every width. Half the instructions per code (measured on a Zen 4: 1.2x in L2 at one thread).
template <int R, int Blocks>
inline void block_sums(const uint8_t* b, int64_t row_bytes, const int16_t* xk, int64_t blocks, __m256i* lanes) {
  const __m512i nibble0 = _mm512_set1_epi16(0x000F), nibble1 = _mm512_set1_epi16(0x00F0);
  const __m512i nibble2 = _mm512_set1_epi16(0x0F00);
  __m512i ones[R], sixteens[R], many[R];
  for (int r = 0; r < R; ++r) ones[r] = sixteens[r] = many[r] = _mm512_setzero_si512();
  const int64_t count = Blocks > 0 ? Blocks : blocks;
  int64_t i = 0;
  for (; i + 2 <= count; i += 2, b += 64, xk += 2 * kCodeBlock) {
    __m512i xv[4];
    for (int part = 0; part < 4; ++part) {
      const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + 16 * part));
      const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk + kCodeBlock + 16 * part));
      xv[part] = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    }
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = b + r * row_bytes;
      __builtin_prefetch(row + kAhead, 0, 2);
      const __m512i c = _mm512_loadu_si512(row);
      ones[r] = _mm512_add_epi32(ones[r], _mm512_madd_epi16(_mm512_and_si512(c, nibble0), xv[0]));
      sixteens[r] = _mm512_add_epi32(sixteens[r], _mm512_madd_epi16(_mm512_and_si512(c, nibble1), xv[1]));
      many[r] = _mm512_add_epi32(many[r], _mm512_madd_epi16(_mm512_and_si512(c, nibble2), xv[2]));
      ones[r] = _mm512_add_epi32(ones[r], _mm512_madd_epi16(_mm512_srli_epi16(c, 12), xv[3]));
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512i scaled = _mm512_add_epi32(_mm512_srai_epi32(sixteens[r], 4), _mm512_srai_epi32(many[r], 8));
    const __m512i sums = _mm512_add_epi32(ones[r], scaled);
    const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
    lanes[r] = _mm256_add_epi32(lanes[r], folded);
  }
  if (i < count) block_sums_256<R, 0>(b, row_bytes, xk, 1, lanes);  // an odd block
}
#else
template <int R, int Blocks>
inline void block_sums(const uint8_t* b, int64_t row_bytes, const int16_t* xk, int64_t blocks, __m256i* lanes) {
  block_sums_256<R, Blocks>(b, row_bytes, xk, blocks, lanes);
}
#endif
#endif

// dot(w_r, x) for R adjacent weight rows (R = 1 or 2: two rows share each load of x) against one row of x.
// `w`, `sz`: the first row's codes and scale/offset pairs; `X` etc.: that row of x's `Rows16` parts. `Blocks`:
// the blocks of a group when known at compile time (block_sums), else 0.
template <int R, int Blocks>
void dot4(const uint8_t* w, const uint16_t* sz, const int16_t* X, const float* step, const float* xsum, int64_t K,
          int64_t G, float* out) {
  const int64_t groups = K / G;
  float offsets[R] = {};
#if defined(__AVX2__)
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const int64_t row_bytes = K / 2, blocks = G / kCodeBlock;
  const uint8_t* b = w;
  const int16_t* xk = X;
  for (int64_t g = 0; g < groups; ++g) {
    __m256i lanes[R];
    for (int r = 0; r < R; ++r) lanes[r] = _mm256_setzero_si256();
    if constexpr (Blocks > 0) {
      block_sums<R, Blocks>(b, row_bytes, xk, Blocks, lanes);
    } else {
      for (int64_t i = 0; i < blocks; i += 8) {
        block_sums<R, 0>(b + 32 * i, row_bytes, xk + kCodeBlock * i, std::min<int64_t>(8, blocks - i), lanes);
      }
    }
    b += G / 2;
    xk += G;
    for (int r = 0; r < R; ++r) {
      const float s = scalar(sz[r * groups * 2 + 2 * g]), z = scalar(sz[r * groups * 2 + 2 * g + 1]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes[r]), _mm256_set1_ps(s * step[g]), acc[r]);
      offsets[r] += (z - 8.0f * s) * xsum[g];
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    out[r] = _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t))) + offsets[r];
  }
#else
  for (int r = 0; r < R; ++r) {
    const uint8_t* row = w + r * (K / 2);
    float acc = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t p = 0;  // exact, as the vector code's int32 lanes
      for (int64_t k = g * G; k < (g + 1) * G; ++k) p += code4(row, k) * X[k];
      const float s = scalar(sz[r * groups * 2 + 2 * g]), z = scalar(sz[r * groups * 2 + 2 * g + 1]);
      acc += static_cast<float>(p) * (s * step[g]);
      offsets[r] += (z - 8.0f * s) * xsum[g];
    }
    out[r] = acc + offsets[r];
  }
#endif
}

constexpr int64_t kGemvRows = 8;  // up to this many rows of x, the weights are streamed once (gemv below)

// Rows [0, N) of a decode step shared between the calling thread and helper threads, without waiting for a
// thread that has not started. On a desktop (or this 2-core machine with other work) a woken thread often finds
// its core taken for milliseconds: split in fixed halves (at::parallel_for), every call then lasts until that
// thread has had its turn and done its half, 2-4x the time of the call alone (measured: per-call medians 3.5x
// their minimum at 2 threads with other work running). Here the caller starts at once and takes the rows in
// shrinking pieces ("guided": a quarter of what is left at 2 threads, down to `grain` rows), as does each helper
// once it runs; the caller waits only for pieces already taken, so rows a late helper never took are the
// caller's. Each row is computed by one thread alone, so the result does not depend on who took which rows.
//
// The helpers are threads of our own (`Helpers`), not torch's inter-op pool: a task posted there wakes a
// sleeping thread through a condition variable on every call, and a mid-model frame makes ~230 calls of
// 30-150 us, back to back with small torch ops between them, where a wake-up arrives late or not at all. Ours
// spin a short while after each job (`kSpin`) so that the next call of a frame finds them awake, yielding their
// core as they spin; then they sleep, so an idle studio burns nothing. When a yield shows that other work wants
// the core (`kTaken`, `switches`), they stop spinning for a while (`kBusy`): on a busy machine a spinning helper
// takes turns from the caller, and they are woken per call instead, as torch's pool would be.
struct Job {
  int64_t N = 0, grain = 1, threads = 1;
  const std::function<void(int64_t, int64_t)>* rows = nullptr;
  std::atomic<int64_t> next{0};

  void take() {
    for (int64_t begin = next.load(); begin < N;) {
      const int64_t size = std::max(grain, (N - begin) / (2 * threads));
      if (next.compare_exchange_weak(begin, std::min(N, begin + size))) {
        (*rows)(begin, std::min(N, begin + size));
        begin = next.load();
      }
    }
  }
};

// How long an idle helper keeps looking for the next job before it sleeps. A frame's linears come 5-50 us
// apart (the small ops between them), so 200 us catches them; between frames or lines the helpers sleep.
constexpr auto kSpin = std::chrono::microseconds(200);
// A yield that returns this late let another thread run on the helper's core: the machine is busy, and spinning
// there would take turns from that work and from the caller (measured, a helper that always spun 200 us: mid
// frames beside two busy processes 3.0-3.5 frames/s against 5.2-8.9 with torch's pool); the helper sleeps instead.
constexpr auto kTaken = std::chrono::microseconds(20);
// After that, or once the helper was switched out while it spun (another thread ran on its core), it does not
// spin for this long: it is woken per call, as torch's pool would be.
constexpr auto kBusy = std::chrono::milliseconds(20);

// Times the calling thread was switched out while it could have run (a yield that let another thread run, or
// a preemption); 0 where the platform does not count them per thread.
inline int64_t switches() {
#if defined(__linux__)
  rusage usage;
  if (getrusage(RUSAGE_THREAD, &usage) == 0) return usage.ru_nivcsw;
#endif
  return 0;
}

constexpr char kHelperName[] = "s2studio-rows";

// One job at a time, posted by whichever thread holds `posting` (another caller meanwhile computes its rows
// alone: correct, and on 2 cores no slower). The job lives here, never freed, and a caller ends its job only
// when no helper is inside it (`active`), so a helper never touches a job's rows after the call returned.
// The threads are created on first use, one more whenever torch's thread count grows, and never stopped:
// detached, they die with the process (at exit they are asleep or spinning on this object, which is never
// destroyed). In a forked child none of them exist; the caller there computes its rows alone.
class Helpers {
 public:
  static Helpers& get() {
    static Helpers* helpers = new Helpers;  // never destroyed: detached threads may still look at it at exit
    return *helpers;
  }

  void share(int64_t N, int64_t grain, int64_t threads, const std::function<void(int64_t, int64_t)>& rows) {
    std::unique_lock<std::mutex> mine(posting, std::try_to_lock);
    if (!mine.owns_lock() || process_id() != owner || !hire(threads - 1)) {
      rows(0, N);
      return;
    }
    job.N = N;
    job.grain = grain;
    job.threads = threads;
    job.rows = &rows;
    job.next.store(0);
    wanted.store(threads - 1);
    open.store(++serial);  // seq_cst, read by a helper after it entered (`active`): see `help`
    if (sleepers.load() > 0) {
      std::unique_lock<std::mutex> lock(sleep, std::try_to_lock);  // never wait here; a helper holding it is
      if (lock.owns_lock()) wake.notify_all();                      // about to see the new job anyway
    }
    job.take();
    open.store(0);
    for (int spins = 0; active.load() != 0; ++spins) {  // a helper finishing the rows it took
      if (spins > 64) std::this_thread::yield();
    }
  }

 private:
  std::mutex posting, sleep;
  std::condition_variable wake;
  std::atomic<uint64_t> open{0};  // the serial of the job open to helpers, 0 for none
  std::atomic<int> active{0}, sleepers{0};
  std::atomic<int64_t> wanted{0};
  uint64_t serial = 0;  // under `posting`
  Job job;
  std::vector<std::thread> threads_;  // under `posting`
  const int64_t owner = process_id();

  // At least `count` helpers running; false if a thread cannot be made (the caller then works alone).
  bool hire(int64_t count) {
    try {
      while (static_cast<int64_t>(threads_.size()) < count) {
        const int64_t index = static_cast<int64_t>(threads_.size());
        threads_.emplace_back([this, index] { run(index); });
        threads_.back().detach();
      }
    } catch (const std::system_error&) {
      return false;
    }
    return true;
  }

  void run(int64_t index) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), kHelperName);  // how `top -H` and the tests tell them apart
#endif
    uint64_t seen = 0;
    auto calm = std::chrono::steady_clock::time_point{};  // no spinning before this: the machine was busy
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      const int64_t switched = switches();
      uint64_t now = open.load();
      for (int spins = 1; (now == 0 || now == seen) && start >= calm; ++spins) {
        if (spins % 16 == 0) {
          const auto before = std::chrono::steady_clock::now();
          if (before - start >= kSpin) break;
          std::this_thread::yield();  // a core that other work wants is theirs
          if (std::chrono::steady_clock::now() - before > kTaken || switches() != switched) {
            calm = std::chrono::steady_clock::now() + kBusy;
            break;
          }
        }
        now = open.load();
      }
      if (now == 0 || now == seen) {
        std::unique_lock<std::mutex> lock(sleep);
        sleepers.fetch_add(1);
        wake.wait(lock, [&] { now = open.load(); return now != 0 && now != seen; });
        sleepers.fetch_sub(1);
      }
      seen = now;
      if (index < wanted.load()) help(now);
    }
  }

  // Enter first, then look: a caller that closed its job before we entered never waits for us, and one that
  // closes it after waits until we leave, so the job's fields are not rewritten while we read them.
  void help(uint64_t serial_seen) {
    active.fetch_add(1);
    if (open.load() == serial_seen) job.take();
    active.fetch_sub(1);
  }
};

template <typename Rows>
void share_rows(int64_t N, int64_t grain, const Rows& rows) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || N <= grain || at::in_parallel_region()) {
    rows(int64_t{0}, N);
    return;
  }
  const std::function<void(int64_t, int64_t)> call = rows;
  Helpers::get().share(N, grain, threads, call);
}

// y (M, N) = x (M, K) @ w (N, K)^T, times scale[n] when given. Each weight row is read from memory once and from
// cache for the other rows of x. `row_bytes`: the weight bytes of one row (pieces of at least ~64 KiB).
template <typename RowDot>
void gemv(int64_t M, int64_t N, int64_t row_bytes, float* y, RowDot row_dot) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / row_bytes);
  share_rows(N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t m = 0; m < M; ++m) y[m * N + n] = row_dot(n, m);
    }
  });
}

// `gemv` with the rows taken in pairs that share each load of x (`dot2`, `dot4<2, ...>`): `pair(n, m, two)` writes
// rows n and n + 1 against x's row m, `one(n, m)` returns the last row alone when N is odd. `pair_bytes`: the
// weight bytes of two rows (pieces of at least ~64 KiB, as `gemv`'s).
template <typename PairDot, typename RowDot>
void gemv_pairs(int64_t M, int64_t N, int64_t pair_bytes, float* y, PairDot pair, RowDot one) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / pair_bytes);
  share_rows((N + 1) / 2, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = 2 * begin; n < std::min(N, 2 * end); n += 2) {
      for (int64_t m = 0; m < M; ++m) {
        if (n + 1 < N) {
          float two[2];
          pair(n, m, two);
          y[m * N + n] = two[0];
          y[m * N + n + 1] = two[1];
        } else {
          y[m * N + n] = one(n, m);
        }
      }
    }
  });
}

// y (M, N) = x (M, K) @ W^T for many rows of x (a prefill): compute-bound, so the weights are widened to float32
// one block of rows at a time (in cache, never the whole matrix) for torch's GEMM. `widen_row(n, dst)` writes
// row n of W, K floats.
template <typename WidenRow>
void gemm_widened(const at::Tensor& x, at::Tensor& y, WidenRow widen_row) {
  constexpr int64_t kBlock = 256;
  const int64_t N = y.size(1), K = x.size(1);
  float* out = y.data_ptr<float>();
  at::parallel_for(0, (N + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    at::Tensor block = at::empty({kBlock, K}, x.options());
    float* b = block.data_ptr<float>();
    for (int64_t i = begin; i < end; ++i) {
      const int64_t n0 = i * kBlock, rows = std::min(kBlock, N - n0);
      for (int64_t r = 0; r < rows; ++r) widen_row(n0 + r, b + r * K);
      // Raw copies into y: a worker thread is outside the caller's InferenceMode (it is thread-local), where
      // writing into y with a tensor op would be refused when y is an inference tensor.
      const at::Tensor part = at::mm(x, block.narrow(0, 0, rows).t()).contiguous();
      for (int64_t m = 0; m < x.size(0); ++m) {
        std::memcpy(out + m * N + n0, part.data_ptr<float>() + m * rows, rows * sizeof(float));
      }
    }
  });
}

// A prefill's rows of narrow weights: `scalar(w)·scale` widened for torch's GEMM.
template <typename W>
void gemm_scaled(const at::Tensor& x, const W* w, const float* scale, at::Tensor& y) {
  const int64_t K = x.size(1);
  gemm_widened(x, y, [&](int64_t n, float* dst) {
    const W* src = w + n * K;
    const float s = scale ? scale[n] : 1.0f;
    for (int64_t k = 0; k < K; ++k) dst[k] = scalar(src[k]) * s;
  });
}

// bf16 rows: each weight widened to float32 in registers (exactly: its bits are a float32's high half).
void product16(const at::Tensor& x, const uint16_t* w, at::Tensor& y) {
  const int64_t M = x.size(0), N = y.size(1), K = x.size(1);
  if (M > kGemvRows) return gemm_scaled(x, w, nullptr, y);
  const float* xs = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  if (K * 4 < kWideX) {
    gemv(M, N, K * 2, out, [&](int64_t n, int64_t m) { return dot(w + n * K, xs + m * K, K); });
    return;
  }
  gemv_pairs(
      M, N, 4 * K, out, [&](int64_t n, int64_t m, float* two) { dot2(w + n * K, w + (n + 1) * K, xs + m * K, K, two); },
      [&](int64_t n, int64_t m) { return dot(w + n * K, xs + m * K, K); });
}

// int8 rows with one scale each, against x rounded to 16 bits per group (`Rows16`, `dot8`).
void product8(const at::Tensor& x, const int8_t* w, const float* scale, at::Tensor& y) {
  const int64_t M = x.size(0), K = x.size(1);
  if (M > kGemvRows) return gemm_scaled(x, w, scale, y);
  const Rows16 rows(x.data_ptr<float>(), M, K, kGroup8);
  gemv(M, y.size(1), K, y.data_ptr<float>(), [&](int64_t n, int64_t m) {
    return dot8(w + n * K, rows.values.data() + m * K, rows.step.data() + m * rows.groups, K) * scale[n];
  });
}

// int4 rows: `w` (N, K/2) codes in the layout above, `sz` (N, K/G, 2) bfloat16 scale and offset bits.
void product4(const at::Tensor& x, const uint8_t* w, const uint16_t* sz, int64_t G, at::Tensor& y) {
  const int64_t M = x.size(0), N = y.size(1), K = x.size(1), groups = K / G;
  if (M <= kGemvRows) {
    const Rows16 rows(x.data_ptr<float>(), M, K, G);
    // the group's blocks known when compiled for the layouts int4.py makes (groups of 128, or 64)
    const auto pair_dot = G == 128 ? dot4<2, 2> : G == 64 ? dot4<2, 1> : dot4<2, 0>;
    const auto one_dot = G == 128 ? dot4<1, 2> : G == 64 ? dot4<1, 1> : dot4<1, 0>;
    const auto dot_of = [&](auto dot_fn, int64_t n, int64_t m, float* out) {
      dot_fn(w + n * (K / 2), sz + n * groups * 2, rows.values.data() + m * K, rows.step.data() + m * groups,
             rows.sum.data() + m * groups, K, G, out);
    };
    gemv_pairs(M, N, K, y.data_ptr<float>(), [&](int64_t n, int64_t m, float* two) { dot_of(pair_dot, n, m, two); },
               [&](int64_t n, int64_t m) {
                 float one[1];
                 dot_of(one_dot, n, m, one);
                 return one[0];
               });
  } else {
    gemm_widened(x, y, [&](int64_t n, float* dst) { widen4(w + n * (K / 2), sz + n * groups * 2, K, G, dst); });
  }
}

// The products below take x of any shape (..., K) and dtype, and return (..., N) in x's dtype: doing the
// reshapes and casts here rather than in Python saves ~5 us per call, which is most of a small layer's time.
// `columns`: the weights' input width (w.size(1), or twice it for int4's bytes of two codes).
at::Tensor as_rows(const at::Tensor& x, const at::Tensor& w, int64_t columns) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "the CPU kernels take CPU tensors");
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "w must be a contiguous 2-D tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == columns, "x has ", x.size(-1), " columns but w has ", columns);
  return x.reshape({-1, columns}).to(at::kFloat).contiguous();
}

at::Tensor as_output(const at::Tensor& y, const at::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = y.size(1);
  return y.view(shape).to(x.scalar_type());
}

// w: bfloat16 (out, in), or its bits as int16 (how Bf16Linear keeps it out of model.to(dtype)).
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kShort, "w must be bfloat16 or int16 bits");
  at::Tensor rows = as_rows(x, w, w.size(1));
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product16(rows, static_cast<const uint16_t*>(w.data_ptr()), y);
  return as_output(y, x);
}

// w: int8 (out, in); scale: one float32 per output row.
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "w must be int8");
  at::Tensor rows = as_rows(x, w, w.size(1));
  at::Tensor s = scale.to(at::kFloat).contiguous();
  TORCH_CHECK(s.dim() == 1 && s.size(0) == w.size(0), "scale must have one value per row of w");
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product8(rows, w.data_ptr<int8_t>(), s.data_ptr<float>(), y);
  return as_output(y, x);
}

// w: uint8 (out, in/2) int4 codes in the layout above; sz: (out, in/group, 2) scale and offset per group,
// bfloat16 or its bits as int16 (Int4Linear keeps them out of model.to(dtype)).
at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz, int64_t group) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "w must be uint8 (two int4 codes per byte)");
  TORCH_CHECK(sz.scalar_type() == at::kBFloat16 || sz.scalar_type() == at::kShort,
              "scales must be bfloat16 or int16 bits");
  at::Tensor rows = as_rows(x, w, 2 * w.size(1));
  const int64_t K = rows.size(1);
  TORCH_CHECK(group > 0 && group % kCodeBlock == 0 && K % group == 0, "the group (", group,
              ") must be a multiple of 64 that divides the width ", K);
  TORCH_CHECK(sz.dim() == 3 && sz.size(0) == w.size(0) && sz.size(1) == K / group && sz.size(2) == 2 &&
              sz.is_contiguous(), "scales must be a contiguous (out, in/group, 2) tensor");
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product4(rows, w.data_ptr<uint8_t>(), static_cast<const uint16_t*>(sz.data_ptr()), group, y);
  return as_output(y, x);
}

}  // namespace

TORCH_LIBRARY(s2studio_cpu, m) {
  m.def("linear_bf16(Tensor x, Tensor w) -> Tensor");
  m.def("linear_int8(Tensor x, Tensor w, Tensor scale) -> Tensor");
  m.def("linear_int4(Tensor x, Tensor w, Tensor scales_and_zeros, int group) -> Tensor");
  m.impl("linear_bf16", c10::DispatchKey::CPU, &linear_bf16);
  m.impl("linear_int8", c10::DispatchKey::CPU, &linear_int8);
  m.impl("linear_int4", c10::DispatchKey::CPU, &linear_int4);
}
