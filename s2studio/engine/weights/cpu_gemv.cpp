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
#include <utility>
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

// a·b + c rounded once where the CPU has FMA, else as two operations. Written out wherever a kernel's scalar code
// multiplies and adds, so that the compiler's own contraction choices (which may differ between two instantiations
// of one template) never decide a result's bits: a row must come out the same whatever tile computed it.
inline float fmadd(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// The decode-step products below compute R rows of W against a tile of up to `kTile` rows of x at once (each kind's
// own, as its accumulators fill the vector registers: 32 with AVX512, 16 with AVX2), so that a weight row read from
// memory serves every row of x (a batched decode step's B streams) from registers. Each output keeps its own
// accumulators, and its additions come in the same order whatever the tile (R, the rows of x beside it, the thread
// that took it): a row of x gives the same bits alone as in a batch.
#if defined(__AVX512F__)
constexpr int64_t kWideRegisters = 1;
#else
constexpr int64_t kWideRegisters = 0;
#endif

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
  // step t and t·Σ X (the Σ x of the rounded values), `groups` per row. `paired` (asked for by int4 with AVX512):
  // X again with each group's blocks of 64 taken in pairs, the 16 values of part p of the first block then those of
  // the second (`Int4Rows` reads both blocks' part p in one 512-bit load); an odd last block as it is.
  int64_t groups;
  std::vector<int16_t> values, paired;
  std::vector<float> step, sum;
  Rows16(const float* x, int64_t M, int64_t K, int64_t G, bool pair = false)
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
    if (!pair) return;
    paired = values;
    for (int64_t start = 0; start + G <= M * K; start += G) {  // int4: G divides K
      for (int64_t b = 0; b + 2 <= G / 64; b += 2) {
        const int16_t* first = values.data() + start + 64 * b;
        for (int p = 0; p < 4; ++p) {
          std::copy_n(first + 16 * p, 16, paired.data() + start + 64 * b + 32 * p);
          std::copy_n(first + 64 + 16 * p, 16, paired.data() + start + 64 * b + 32 * p + 16);
        }
      }
    }
  }
};

// The sum of a bf16 row's products with a row of x after its vector part, four accumulators (the k < `k` done):
// their lanes' total, then the tail a value at a time. Not inlined: one copy of these operations for every tile.
__attribute__((noinline)) float finish16(const Vec* acc, const uint16_t* w, const float* x, int64_t k, int64_t K) {
  float s = total(add(add(acc[0], acc[1]), add(acc[2], acc[3])));
  for (; k < K; ++k) s = fmadd(x[k], scalar(w[k]), s);
  return s;
}

// bf16 rows: each weight widened to float32 in registers once (exactly: its bits are a float32's high half) and
// multiplied into four accumulators per (row of W, row of x), blocks of 4 vectors in column order, one vector in
// each: enough independent sums in flight for one row of x alone, and one row of W at a time streams from memory
// as a single run. The last whole vectors that do not fill a block go into the first.
struct Bf16Rows {
  struct State {
    Vec acc[4];
  };
  static constexpr int64_t kTile = 2 + 2 * kWideRegisters, kXBytes = 4;
  const uint16_t* w;
  const float* x;
  int64_t K, N;
  float* y;

  int64_t step() const { return 4 * kLanes; }
  int64_t bytes(int64_t columns) const { return 2 * columns; }
  State start() const { return {{zero(), zero(), zero(), zero()}}; }

  template <int R, int Mt>
  void tile(int64_t n, int64_t m, int64_t k0, int64_t k1, int64_t ahead, State* s) const {
    static_assert(R == 1, "one row of W at a time");
    Vec acc[Mt][4];
    for (int i = 0; i < Mt; ++i) for (int a = 0; a < 4; ++a) acc[i][a] = s[i].acc[a];
    const uint16_t* row = w + n * K;
    const float* xs = x + m * K;
    int64_t k = k0;
    for (; k + 4 * kLanes <= k1; k += 4 * kLanes) {
      const char* next = reinterpret_cast<const char*>(row + k) + ahead;
      for (int64_t line = 0; line < 8 * kLanes; line += 64) __builtin_prefetch(next + line, 0, 2);
      Vec wv[4];
      for (int a = 0; a < 4; ++a) wv[a] = widen(row + k + a * kLanes);
      for (int i = 0; i < Mt; ++i) {
        for (int a = 0; a < 4; ++a) acc[i][a] = fma(wv[a], load(xs + i * K + k + a * kLanes), acc[i][a]);
      }
    }
    if (k1 == K) {
      for (; k + kLanes <= K; k += kLanes) {
        const Vec wv = widen(row + k);
        for (int i = 0; i < Mt; ++i) acc[i][0] = fma(wv, load(xs + i * K + k), acc[i][0]);
      }
    }
    for (int i = 0; i < Mt; ++i) for (int a = 0; a < 4; ++a) s[i].acc[a] = acc[i][a];
  }

  void finish(int64_t n, int64_t m, const State& s) const {
    y[m * N + n] = finish16(s.acc, w + n * K, x + m * K, K / kLanes * kLanes, K);
  }
};

// int8 rows (one float scale per row): over a group, dot(w, x) = t·Σ q·X. A group's Σ q·X is exact in int32: its
// |q| <= 127 and |X| <= 32767 allow 516 products.
constexpr int64_t kGroup8 = 128;

// The int32 lane sums of Σ q·X, 64 weights at a time: the weights widened to 16 bits once (`widen8`), then multiplied
// and summed in pairs by `madd` against each row of x (`madd8`). A lane's sum is exact, so the same in any order.
#if defined(__AVX512F__)
using Lanes = __m512i;
constexpr int64_t kBlock8 = 64;
constexpr int kParts8 = 2;
using Part8 = __m512i;
inline Lanes lanes_zero() { return _mm512_setzero_si512(); }
inline void widen8(const int8_t* w, Part8* out) {
  for (int i = 0; i < kParts8; ++i) {
    out[i] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32 * i)));
  }
}
inline Lanes madd8(const Part8* wv, const int16_t* X, Lanes acc) {
  for (int i = 0; i < kParts8; ++i) {
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(wv[i], _mm512_loadu_si512(X + 32 * i)));
  }
  return acc;
}
inline Vec lanes_to_float(Lanes l) { return _mm512_cvtepi32_ps(l); }
#elif defined(__AVX2__) && defined(__FMA__)
using Lanes = __m256i;
constexpr int64_t kBlock8 = 64;
constexpr int kParts8 = 4;
using Part8 = __m256i;
inline Lanes lanes_zero() { return _mm256_setzero_si256(); }
inline void widen8(const int8_t* w, Part8* out) {
  for (int i = 0; i < kParts8; ++i) {
    out[i] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * i)));
  }
}
inline Lanes madd8(const Part8* wv, const int16_t* X, Lanes acc) {
  for (int i = 0; i < kParts8; ++i) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(X + 16 * i));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(wv[i], x));
  }
  return acc;
}
inline Vec lanes_to_float(Lanes l) { return _mm256_cvtepi32_ps(l); }
#else
using Lanes = int32_t;
constexpr int64_t kBlock8 = 1;
constexpr int kParts8 = 1;
using Part8 = int32_t;
inline Lanes lanes_zero() { return 0; }
inline void widen8(const int8_t* w, Part8* out) { out[0] = w[0]; }
inline Lanes madd8(const Part8* wv, const int16_t* X, Lanes acc) { return acc + wv[0] * X[0]; }
inline Vec lanes_to_float(Lanes l) { return static_cast<float>(l); }
#endif

// An int8 row's float sum after its groups: the vector accumulator's lanes, the groups' tails (`rest`), the scale.
__attribute__((noinline)) float finish8(Vec acc, float rest, float scale) { return (total(acc) + rest) * scale; }

// int8 rows against x rounded to 16 bits per group (`Rows16`): per group, the exact int32 lane sums, then one FMA
// with the group's step into one vector accumulator per (row of W, row of x); the values past a group's last whole
// block of 64 (a width not a multiple of 64) are summed a value at a time into `rest`.
struct Int8Rows {
  struct State {
    Vec acc;
    float rest;
  };
  static constexpr int64_t kTile = 4 + 4 * kWideRegisters, kXBytes = 2;
  const int8_t* w;
  const float* scale;
  const Rows16& x;
  int64_t K, N;
  float* y;

  int64_t step() const { return kGroup8; }
  int64_t bytes(int64_t columns) const { return columns; }
  State start() const { return {zero(), 0.0f}; }

  template <int R, int Mt>
  void tile(int64_t n, int64_t m, int64_t k0, int64_t k1, int64_t ahead, State* s) const {
    const int64_t groups = x.groups;
    Vec acc[R][Mt];
    for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) acc[r][i] = s[r * Mt + i].acc;
    const int8_t* rows = w + n * K;
    const int16_t* X = x.values.data() + m * K;
    const float* step = x.step.data() + m * groups;
    for (int64_t g = k0 / kGroup8, start = k0; start < k1; ++g, start += kGroup8) {
      const int64_t count = std::min(kGroup8, K - start), whole = count / kBlock8 * kBlock8;
      if (whole > 0) {
        Lanes sums[R][Mt];
        for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) sums[r][i] = lanes_zero();
        for (int64_t k = start; k < start + whole; k += kBlock8) {
          Part8 wv[R][kParts8];
          for (int r = 0; r < R; ++r) {
            if (kBlock8 > 1) __builtin_prefetch(reinterpret_cast<const char*>(rows + r * K + k) + ahead, 0, 2);
            widen8(rows + r * K + k, wv[r]);
          }
          for (int i = 0; i < Mt; ++i) {
            for (int r = 0; r < R; ++r) sums[r][i] = madd8(wv[r], X + i * K + k, sums[r][i]);
          }
        }
        for (int r = 0; r < R; ++r) {
          for (int i = 0; i < Mt; ++i) {
            acc[r][i] = fma(lanes_to_float(sums[r][i]), splat(step[i * groups + g]), acc[r][i]);
          }
        }
      }
      for (int r = 0; r < R && whole < count; ++r) {
        for (int i = 0; i < Mt; ++i) {
          int32_t tail = 0;
          for (int64_t k = start + whole; k < start + count; ++k) tail += int32_t{rows[r * K + k]} * X[i * K + k];
          s[r * Mt + i].rest = fmadd(step[i * groups + g], static_cast<float>(tail), s[r * Mt + i].rest);
        }
      }
    }
    for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) s[r * Mt + i].acc = acc[r][i];
  }

  void finish(int64_t n, int64_t m, const State& s) const { y[m * N + n] = finish8(s.acc, s.rest, scale[n]); }
};

// int4 weights. The codes q (0..15) of a row lie in blocks of 64 codes over 32 bytes, read as 16 lanes of 16 bits:
// bits 4i..4i+3 of lane j hold code 16i + j (int4.py packs them so), so one mask (or one shift) per 16 codes
// unpacks a block at every width (`sums4`). Each group of G codes of a row (G a multiple of 64) has a bfloat16
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
// Σ q·X of one block or two (a 256-bit vector, or a 512-bit one holding two) into int32 lanes: 16-bit lane j
// of a block holds codes 16i + j at bits 4i..4i+3, so part i of the codes, in the order of x's X[16i..16i+15], is
// one mask (and a shift) away, and `madd` multiplies it by those 16 values and sums them in pairs. With a few rows
// of x the masks leave code 16 + j times 16 and 32 + j times 256 in place (one instruction each, where a shift and
// a mask would be two), summed apart and divided back exactly when they are flushed (every such sum is a multiple
// of 16 or 256, and 8 steps of them stay below 2^31); with many rows of x each block's codes are shifted down once
// for all of them. Either way a lane's sum is the same set of exact integer products.
template <int Bits>
struct Lanes4;
template <>
struct Lanes4<256> {
  using V = __m256i;
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static __m256i mask(__m256i c, int16_t m) { return _mm256_and_si256(c, _mm256_set1_epi16(m)); }
  static __m256i down(__m256i c, int bits) { return _mm256_srli_epi16(c, bits); }
  static __m256i madd(__m256i a, __m256i b) { return _mm256_madd_epi16(a, b); }
  static __m256i add(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
  static __m256i exact(__m256i ones, __m256i sixteens, __m256i many) {
    return _mm256_add_epi32(ones, _mm256_add_epi32(_mm256_srai_epi32(sixteens, 4), _mm256_srai_epi32(many, 8)));
  }
  static __m256i eight(__m256i v) { return v; }
};
#if defined(__AVX512F__)
template <>
struct Lanes4<512> {
  using V = __m512i;
  static __m512i zero() { return _mm512_setzero_si512(); }
  static __m512i load(const void* p) { return _mm512_loadu_si512(p); }
  static __m512i mask(__m512i c, int16_t m) { return _mm512_and_si512(c, _mm512_set1_epi16(m)); }
  static __m512i down(__m512i c, int bits) { return _mm512_srli_epi16(c, bits); }
  static __m512i madd(__m512i a, __m512i b) { return _mm512_madd_epi16(a, b); }
  static __m512i add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
  static __m512i exact(__m512i ones, __m512i sixteens, __m512i many) {
    return _mm512_add_epi32(ones, _mm512_add_epi32(_mm512_srai_epi32(sixteens, 4), _mm512_srai_epi32(many, 8)));
  }
  static __m256i eight(__m512i v) {  // block b's lanes plus block b + 1's
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  }
};
#endif

// Σ q·X over `steps` steps of `Bits`-wide vectors (a block, or two) for R rows of codes `row_bytes` apart against
// Mt rows of X `K` apart (X's 4 parts of 16 lanes each, as wide, per step), added into lanes[r][i]. `Steps` > 0:
// that many, known when compiled (the groups of 128 or 64 int4.py makes: no loop left); 0: `runtime_steps`.
template <int Bits, int R, int Mt, int Steps>
inline void sums4(const uint8_t* codes, int64_t row_bytes, const int16_t* X, int64_t K, int64_t runtime_steps,
                  int64_t ahead, __m256i (&lanes)[R][Mt]) {
  using L = Lanes4<Bits>;
  using V = typename L::V;
  const int64_t steps = Steps > 0 ? Steps : runtime_steps;
  constexpr int64_t kBytes = sizeof(V), kXStep = 2 * sizeof(V);  // codes and X values per step
  if constexpr (Mt <= 2) {
    for (int64_t first = 0; first < steps; first += 8) {
      V ones[R][Mt], sixteens[R][Mt], many[R][Mt];
      for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) ones[r][i] = sixteens[r][i] = many[r][i] = L::zero();
      for (int64_t t = first; t < std::min(steps, first + 8); ++t) {
        for (int r = 0; r < R; ++r) {
          const uint8_t* row = codes + r * row_bytes + kBytes * t;
          __builtin_prefetch(row + ahead, 0, 2);
          const V c = L::load(row), p0 = L::mask(c, 0x000F), p1 = L::mask(c, 0x00F0), p2 = L::mask(c, 0x0F00);
          const V p3 = L::down(c, 12);
          for (int i = 0; i < Mt; ++i) {
            const int16_t* xs = X + i * K + kXStep * t;
            ones[r][i] = L::add(ones[r][i], L::madd(p0, L::load(xs)));
            sixteens[r][i] = L::add(sixteens[r][i], L::madd(p1, L::load(xs + kXStep / 4)));
            many[r][i] = L::add(many[r][i], L::madd(p2, L::load(xs + kXStep / 2)));
            ones[r][i] = L::add(ones[r][i], L::madd(p3, L::load(xs + 3 * kXStep / 4)));
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        for (int i = 0; i < Mt; ++i) {
          lanes[r][i] = _mm256_add_epi32(lanes[r][i], L::eight(L::exact(ones[r][i], sixteens[r][i], many[r][i])));
        }
      }
    }
  } else {
    V sums[R][Mt];
    for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) sums[r][i] = L::zero();
    for (int64_t t = 0; t < steps; ++t) {
      V part[R][4];
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = codes + r * row_bytes + kBytes * t;
        __builtin_prefetch(row + ahead, 0, 2);
        const V c = L::load(row);
        part[r][0] = L::mask(c, 0x000F);
        part[r][1] = L::mask(L::down(c, 4), 0x000F);
        part[r][2] = L::mask(L::down(c, 8), 0x000F);
        part[r][3] = L::down(c, 12);
      }
      for (int i = 0; i < Mt; ++i) {
        const int16_t* xs = X + i * K + kXStep * t;
        for (int r = 0; r < R; ++r) {
          for (int p = 0; p < 4; ++p) {
            sums[r][i] = L::add(sums[r][i], L::madd(part[r][p], L::load(xs + p * kXStep / 4)));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < Mt; ++i) lanes[r][i] = _mm256_add_epi32(lanes[r][i], L::eight(sums[r][i]));
    }
  }
}

// An int4 row's sum after its groups: the 8 lanes of its accumulator, then the groups' offsets. Not inlined (see
// `finish16`).
__attribute__((noinline)) float finish4(__m256 acc, float offsets) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t))) + offsets;
}
#endif

// int4 rows against x rounded to 16 bits per group of the weights' ranges (`Rows16`): per group, Σ q·X summed
// exactly in 8 int32 lanes (lane j: the products of codes 16i + 2j and 16i + 2j + 1 of every block; with AVX512 two
// blocks per 512-bit register whose halves are added at the group's end, so the same 8 sums at either width), then
// acc += lanes · s·t and offsets += (z - 8s)·t·Σ X per (row of W, row of x). Each block's codes are unpacked once
// for all the rows of x.
template <int Blocks>
struct Int4Rows {
#if defined(__AVX2__)
  struct State {
    __m256 acc;
    float offsets;
  };
  State start() const { return {_mm256_setzero_ps(), 0.0f}; }
#else
  struct State {
    float acc, offsets;
  };
  State start() const { return {0.0f, 0.0f}; }
#endif
  // 4 rows of x at every width: with 8 (AVX512's 32 registers) the group's float sums and offsets beside the
  // block's parts and integer sums no longer fit, and a tile of 8 made fewer multiply-adds a second than two
  // tiles of 4 reading the same weights again from L1 (`bench/gemv_speed.py --rows 8`).
  static constexpr int64_t kTile = 4, kXBytes = 2;
  const uint8_t* w;
  const uint16_t* sz;
  const Rows16& x;
  int64_t K, G, N;
  float* y;

  int64_t step() const { return G; }
  int64_t bytes(int64_t columns) const { return columns / 2; }

  template <int R, int Mt>
  void tile(int64_t n, int64_t m, int64_t k0, int64_t k1, int64_t ahead, State* s) const {
    const int64_t groups = K / G, row_bytes = K / 2;
    const int16_t* X = x.values.data() + m * K;
    const float *step = x.step.data() + m * groups, *xsum = x.sum.data() + m * groups;
    const uint16_t* ranges = sz + n * groups * 2;
#if defined(__AVX2__)
    __m256 acc[R][Mt];
    float offsets[R][Mt];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < Mt; ++i) acc[r][i] = s[r * Mt + i].acc, offsets[r][i] = s[r * Mt + i].offsets;
    }
#endif
    for (int64_t g = k0 / G; g < k1 / G; ++g) {
#if defined(__AVX2__)
      const uint8_t* codes = w + n * row_bytes + g * (G / 2);
      const int64_t blocks = Blocks > 0 ? Blocks : G / kCodeBlock;
      __m256i lanes[R][Mt];
      for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) lanes[r][i] = _mm256_setzero_si256();
      int64_t b = 0;
#if defined(__AVX512F__)
      b = blocks / 2 * 2;  // pairs of blocks, X in `paired` layout
      if (b > 0) {
        sums4<512, R, Mt, Blocks / 2>(codes, row_bytes, x.paired.data() + m * K + g * G, K, b / 2, ahead, lanes);
      }
#endif
      if (b < blocks) {  // AVX2, or an odd last block
        constexpr int kSingles = kWideRegisters ? Blocks % 2 : Blocks;
        sums4<256, R, Mt, kSingles>(codes + 32 * b, row_bytes, X + g * G + b * kCodeBlock, K, blocks - b, ahead,
                                        lanes);
      }
      for (int r = 0; r < R; ++r) {
        const float sc = scalar(ranges[r * groups * 2 + 2 * g]), z = scalar(ranges[r * groups * 2 + 2 * g + 1]);
        const float bias = fmadd(-8.0f, sc, z);
        for (int i = 0; i < Mt; ++i) {
          const __m256 scaled = _mm256_set1_ps(sc * step[i * groups + g]);
          acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes[r][i]), scaled, acc[r][i]);
          offsets[r][i] = fmadd(bias, xsum[i * groups + g], offsets[r][i]);
        }
      }
#else
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w + (n + r) * row_bytes;
        const float sc = scalar(ranges[r * groups * 2 + 2 * g]), z = scalar(ranges[r * groups * 2 + 2 * g + 1]);
        for (int i = 0; i < Mt; ++i) {
          int64_t p = 0;  // exact, as the vector code's int32 lanes
          for (int64_t k = g * G; k < (g + 1) * G; ++k) p += code4(row, k) * X[i * K + k];
          State& st = s[r * Mt + i];
          st.acc = fmadd(static_cast<float>(p), sc * step[i * groups + g], st.acc);
          st.offsets = fmadd(fmadd(-8.0f, sc, z), xsum[i * groups + g], st.offsets);
        }
      }
#endif
    }
#if defined(__AVX2__)
    for (int r = 0; r < R; ++r) for (int i = 0; i < Mt; ++i) s[r * Mt + i] = {acc[r][i], offsets[r][i]};
#endif
  }

#if defined(__AVX2__)
  void finish(int64_t n, int64_t m, const State& s) const { y[m * N + n] = finish4(s.acc, s.offsets); }
#else
  void finish(int64_t n, int64_t m, const State& s) const { y[m * N + n] = s.acc + s.offsets; }
#endif
};

constexpr int64_t kGemvRows = 8;  // up to this many rows of x, the weights are streamed once (gemv below)

// Rows [0, N) of a decode step shared between the calling thread and helper threads, without waiting for a
// thread that has not started. On a desktop (or this 2-core machine with other work) a woken thread often finds
// its core taken for milliseconds: split in fixed halves (at::parallel_for), every call then lasts until that
// thread has had its turn and done its half, 2-4x the time of the call alone (measured: per-call medians 3.5x
// their minimum at 2 threads with other work running). Here the caller starts at once and takes the rows in
// shrinking pieces ("guided": a quarter of what is left at 2 threads, down to `grain` rows), as does each helper
// once it runs; the caller waits only for pieces already taken, so rows a late helper never took are the
// caller's. Each row is computed by one thread alone, so the result does not depend on who took which rows. A
// call that computes many rows of x per weight row (a batched step) lasts longer for the same weights, so its
// pieces are that many times smaller (`parts`): a helper switched out in the middle of one holds less up.
//
// The helpers are threads of our own (`Helpers`), not torch's inter-op pool: a task posted there wakes a
// sleeping thread through a condition variable on every call, and a mid-model frame makes ~230 calls of
// 30-150 us, back to back with small torch ops between them, where a wake-up arrives late or not at all. Ours
// spin a short while after each job (`kSpin`) so that the next call of a frame finds them awake, yielding their
// core as they spin; then they sleep, so an idle studio burns nothing. When a yield shows that other work wants
// the core (`kTaken`, `switches`), they stop spinning for a while (`kBusy`): on a busy machine a spinning helper
// takes turns from the caller, and they are woken per call instead, as torch's pool would be.
struct Job {
  int64_t N = 0, grain = 1, threads = 1, parts = 2;
  const std::function<void(int64_t, int64_t)>* rows = nullptr;
  std::atomic<int64_t> next{0};

  void take() {
    for (int64_t begin = next.load(); begin < N;) {
      const int64_t size = std::max(grain, (N - begin) / (parts * threads));
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

  void share(int64_t N, int64_t grain, int64_t threads, int64_t parts,
             const std::function<void(int64_t, int64_t)>& rows) {
    std::unique_lock<std::mutex> mine(posting, std::try_to_lock);
    if (!mine.owns_lock() || process_id() != owner || !hire(threads - 1)) {
      rows(0, N);
      return;
    }
    job.N = N;
    job.grain = grain;
    job.threads = threads;
    job.parts = parts;
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
void share_rows(int64_t N, int64_t grain, const Rows& rows, int64_t parts = 2) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || N <= grain || at::in_parallel_region()) {
    rows(int64_t{0}, N);
    return;
  }
  const std::function<void(int64_t, int64_t)> call = rows;
  Helpers::get().share(N, grain, threads, parts, call);
}

// y (M, N) = x (M, K) @ W^T through a kind of rows (`Bf16Rows`, `Int8Rows`, `Int4Rows`), each weight row read from
// memory once for all M rows of x: R rows of W at a time against a tile of up to the kind's `kTile` rows of x. Where
// a tile's rows of x do not fit in L1 beside the weights going by (kChunkBytes), the columns go in chunks (a multiple
// of the kind's step), a block of kBlockRows rows of W at a time, each output's accumulators kept in a `State` between
// chunks: the same additions in the same order, only stored and reloaded. Tiles of x after the first read the
// block's weights from cache; rows left over at the end of W go one at a time. Each tile asks for each of its rows'
// bytes `ahead` of those it reads: the same row's next chunk, after the last chunk the row a block further on.
constexpr int64_t kChunkBytes = 24 << 10;
constexpr int64_t kBlockRows = 16;

template <int R, typename Rows, int... Mt>
void tile_of(const Rows& rows, int64_t n, int64_t m, int64_t count, int64_t k0, int64_t k1, int64_t ahead,
             typename Rows::State* s, std::integer_sequence<int, Mt...>) {
  ((count == Mt + 1 ? rows.template tile<R, Mt + 1>(n, m, k0, k1, ahead, s) : void()), ...);
}

template <int R, typename Rows>
void stream_rows(int64_t M, int64_t N, int64_t K, const Rows& rows) {
  const auto sizes = std::make_integer_sequence<int, Rows::kTile>{};
  const int64_t tile = std::min(M, Rows::kTile), step = rows.step(), row_bytes = rows.bytes(K);
  const int64_t chunk = std::max(step, kChunkBytes / (tile * Rows::kXBytes) / step * step);
  const int64_t block = chunk >= K ? R : kBlockRows;  // rows of W whose states are kept (one chunk: none)
  const int64_t grain = std::max<int64_t>(block / R, (int64_t{1} << 16) / (R * row_bytes));
  share_rows((N + R - 1) / R, grain, [&](int64_t begin, int64_t end) {
    typename Rows::State states[kBlockRows * Rows::kTile];
    for (int64_t first = begin; first < end; first += block / R) {
      const int64_t n0 = first * R, n1 = std::min({N, end * R, n0 + block});
      for (int64_t m = 0; m < M; m += Rows::kTile) {
        const int64_t count = std::min(Rows::kTile, M - m);
        std::fill_n(states, (n1 - n0) * count, rows.start());
        for (int64_t k0 = 0; k0 < K; k0 += chunk) {
          const int64_t k1 = std::min(K, k0 + chunk);
          const int64_t ahead = chunk >= K ? kAhead : k1 < K ? rows.bytes(chunk) : block * row_bytes - rows.bytes(k0);
          for (int64_t n = n0; n < n1; n += R) {
            typename Rows::State* s = states + (n - n0) * count;
            if (n + R <= n1) {
              tile_of<R>(rows, n, m, count, k0, k1, ahead, s, sizes);
            } else {
              for (int64_t r = n; r < n1; ++r) tile_of<1>(rows, r, m, count, k0, k1, ahead, s + (r - n) * count, sizes);
            }
          }
        }
        for (int64_t n = n0; n < n1; ++n) {
          for (int64_t i = 0; i < count; ++i) rows.finish(n, m + i, states[(n - n0) * count + i]);
        }
      }
    }
  }, 2 * std::min<int64_t>(M, kGemvRows));
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

// bf16 rows, one at a time (`Bf16Rows`).
void product16(const at::Tensor& x, const uint16_t* w, at::Tensor& y, bool stream) {
  const int64_t M = x.size(0), N = y.size(1), K = x.size(1);
  if (M > kGemvRows && !stream) return gemm_scaled(x, w, nullptr, y);
  stream_rows<1>(M, N, K, Bf16Rows{w, x.data_ptr<float>(), K, N, y.data_ptr<float>()});
}

// int8 rows with one scale each, against x rounded to 16 bits per group (`Rows16`, `Int8Rows`).
void product8(const at::Tensor& x, const int8_t* w, const float* scale, at::Tensor& y, bool stream) {
  const int64_t M = x.size(0), K = x.size(1);
  if (M > kGemvRows && !stream) return gemm_scaled(x, w, scale, y);
  const Rows16 rows(x.data_ptr<float>(), M, K, kGroup8);
  stream_rows<1>(M, y.size(1), K, Int8Rows{w, scale, rows, K, y.size(1), y.data_ptr<float>()});
}

// int4 rows: `w` (N, K/2) codes in the layout above, `sz` (N, K/G, 2) bfloat16 scale and offset bits. One row of x
// leaves registers for two rows of W (sharing each load of x).
void product4(const at::Tensor& x, const uint8_t* w, const uint16_t* sz, int64_t G, at::Tensor& y, bool stream) {
  const int64_t M = x.size(0), N = y.size(1), K = x.size(1), groups = K / G;
  if (M > kGemvRows && !stream) {
    return gemm_widened(x, y, [&](int64_t n, float* dst) { widen4(w + n * (K / 2), sz + n * groups * 2, K, G, dst); });
  }
#if defined(__AVX512F__)
  const Rows16 rows(x.data_ptr<float>(), M, K, G, true);
#else
  const Rows16 rows(x.data_ptr<float>(), M, K, G);
#endif
  const auto run = [&](auto kind) { M == 1 ? stream_rows<2>(M, N, K, kind) : stream_rows<1>(M, N, K, kind); };
  if (G == 128) return run(Int4Rows<2>{w, sz, rows, K, G, N, y.data_ptr<float>()});
  if (G == 64) return run(Int4Rows<1>{w, sz, rows, K, G, N, y.data_ptr<float>()});
  run(Int4Rows<0>{w, sz, rows, K, G, N, y.data_ptr<float>()});
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
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w, bool stream) {
  TORCH_CHECK(w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kShort, "w must be bfloat16 or int16 bits");
  at::Tensor rows = as_rows(x, w, w.size(1));
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product16(rows, static_cast<const uint16_t*>(w.data_ptr()), y, stream);
  return as_output(y, x);
}

// w: int8 (out, in); scale: one float32 per output row.
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale, bool stream) {
  TORCH_CHECK(w.scalar_type() == at::kChar, "w must be int8");
  at::Tensor rows = as_rows(x, w, w.size(1));
  at::Tensor s = scale.to(at::kFloat).contiguous();
  TORCH_CHECK(s.dim() == 1 && s.size(0) == w.size(0), "scale must have one value per row of w");
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product8(rows, w.data_ptr<int8_t>(), s.data_ptr<float>(), y, stream);
  return as_output(y, x);
}

// w: uint8 (out, in/2) int4 codes in the layout above; sz: (out, in/group, 2) scale and offset per group,
// bfloat16 or its bits as int16 (Int4Linear keeps them out of model.to(dtype)).
at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& w, const at::Tensor& sz, int64_t group, bool stream) {
  TORCH_CHECK(w.scalar_type() == at::kByte, "w must be uint8 (two int4 codes per byte)");
  TORCH_CHECK(sz.scalar_type() == at::kBFloat16 || sz.scalar_type() == at::kShort,
              "scales must be bfloat16 or int16 bits");
  at::Tensor rows = as_rows(x, w, 2 * w.size(1));
  const int64_t K = rows.size(1);
  TORCH_CHECK(group > 0 && group % kCodeBlock == 0 && K % group == 0 && group <= (int64_t{1} << 15), "the group (",
              group, ") must be a multiple of 64 that divides the width ", K, ", at most 32768");
  TORCH_CHECK(sz.dim() == 3 && sz.size(0) == w.size(0) && sz.size(1) == K / group && sz.size(2) == 2 &&
              sz.is_contiguous(), "scales must be a contiguous (out, in/group, 2) tensor");
  at::Tensor y = at::empty({rows.size(0), w.size(0)}, rows.options());
  product4(rows, w.data_ptr<uint8_t>(), static_cast<const uint16_t*>(sz.data_ptr()), group, y, stream);
  return as_output(y, x);
}

}  // namespace

TORCH_LIBRARY(s2studio_cpu, m) {
  // `stream`: stream the weights once for any number of rows of x, each row computed as it would be alone (a
  // batched decode step); by default more than 8 rows (a prefill) go through torch's GEMM.
  m.def("linear_bf16(Tensor x, Tensor w, bool stream=False) -> Tensor");
  m.def("linear_int8(Tensor x, Tensor w, Tensor scale, bool stream=False) -> Tensor");
  m.def("linear_int4(Tensor x, Tensor w, Tensor scales_and_zeros, int group, bool stream=False) -> Tensor");
  m.impl("linear_bf16", c10::DispatchKey::CPU, &linear_bf16);
  m.impl("linear_int8", c10::DispatchKey::CPU, &linear_int8);
  m.impl("linear_int4", c10::DispatchKey::CPU, &linear_int4);
}
