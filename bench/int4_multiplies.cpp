// How fast the int4 decode could multiply on this CPU, three ways (a benchmark, not part of the build): prints GB/s
// of int4 codes one core multiplies, weights in L2 (128 rows x 2560 codes, two rows sharing each load of x):
//
//   A  today's kernel (cpu_gemv.cpp `block_sums`): 16-bit activations, 16-bit multiplies (vpmaddwd);
//   B  the same exact sums through VNNI, the 16-bit activations split into a low (u8) and a high (s8) byte:
//      4 vpdpbusd per 128 codes, as many multiply instructions as A;
//   C  8-bit activations through VNNI: 2 vpdpbusd per 128 codes (what s2.cpp's q4_K does), coarser than
//      the bfloat16 activations of torch's own int4 kernel.
//
//   g++ -O3 -march=native bench/int4_multiplies.cpp -o /tmp/int4_multiplies && /tmp/int4_multiplies
//
// Needs AVX512-VNNI. Measured on a 2-vCPU AMD EPYC Zen 4, quiet: A 17-21, B 19-23, C 30-36 GB/s.
#if !defined(__AVX512VNNI__) || !defined(__AVX512BW__)
#error "needs AVX512BW and AVX512-VNNI (-march=native on such a CPU)"
#endif
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cstdlib>
// N rows x K codes, K/2 bytes per row; groups of 128 = 1 zmm of codes.
constexpr int K = 2560, N = 128;  // 160 KiB of codes: L2
// A: 16-bit X, madd, two rows at a time
void runA(const uint8_t* w, const int16_t* X, float* out) {
  const __m512i n0 = _mm512_set1_epi16(0x000F), n1 = _mm512_set1_epi16(0x00F0), n2 = _mm512_set1_epi16(0x0F00);
  for (int r = 0; r < N; r += 2) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < K / 128; ++g) {
      const int16_t* xk = X + g * 128;
      __m512i xv[4];
      for (int p = 0; p < 4; ++p) {
        __m256i lo = _mm256_loadu_si256((const __m256i*)(xk + 16 * p)), hi = _mm256_loadu_si256((const __m256i*)(xk + 64 + 16 * p));
        xv[p] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      for (int q = 0; q < 2; ++q) {
        const __m512i c = _mm512_loadu_si512(w + (r + q) * (K / 2) + g * 64);
        __m512i o = _mm512_madd_epi16(_mm512_and_si512(c, n0), xv[0]);
        __m512i s = _mm512_madd_epi16(_mm512_and_si512(c, n1), xv[1]);
        __m512i m = _mm512_madd_epi16(_mm512_and_si512(c, n2), xv[2]);
        o = _mm512_add_epi32(o, _mm512_madd_epi16(_mm512_srli_epi16(c, 12), xv[3]));
        __m512i sum = _mm512_add_epi32(o, _mm512_add_epi32(_mm512_srai_epi32(s, 4), _mm512_srai_epi32(m, 8)));
        __m256i f = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
        acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_set1_ps(0.5f), acc[q]);
      }
    }
    for (int q = 0; q < 2; ++q) { float t[8]; _mm256_storeu_ps(t, acc[q]); out[r+q] = t[0]+t[1]+t[2]+t[3]+t[4]+t[5]+t[6]+t[7]; }
  }
}
// B: X split into a low u8 and a high s8 byte (Σ q·X = Σ q·Xl + 256·Σ q·Xh), dpbusd
void runB(const uint8_t* w, const uint8_t* Xl, const int8_t* Xh, float* out) {
  const __m512i n0 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < N; r += 2) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < K / 128; ++g) {
      const __m512i l0 = _mm512_loadu_si512(Xl + g * 128), l1 = _mm512_loadu_si512(Xl + g * 128 + 64);
      const __m512i h0 = _mm512_loadu_si512(Xh + g * 128), h1 = _mm512_loadu_si512(Xh + g * 128 + 64);
      for (int q = 0; q < 2; ++q) {
        const __m512i c = _mm512_loadu_si512(w + (r + q) * (K / 2) + g * 64);
        const __m512i lo = _mm512_and_si512(c, n0), hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), n0);
        __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), l0, lo);  // u8 Xl x s8 codes
        a = _mm512_dpbusd_epi32(a, l1, hi);
        __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, h0);  // u8 codes x s8 Xh
        b = _mm512_dpbusd_epi32(b, hi, h1);
        __m512i sum = _mm512_add_epi32(a, _mm512_slli_epi32(b, 8));
        __m256i f = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
        acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_set1_ps(0.5f), acc[q]);
      }
    }
    for (int q = 0; q < 2; ++q) { float t[8]; _mm256_storeu_ps(t, acc[q]); out[r+q] = t[0]+t[1]+t[2]+t[3]+t[4]+t[5]+t[6]+t[7]; }
  }
}
// C: 8-bit X, dpbusd
void runC(const uint8_t* w, const int8_t* X8, float* out) {
  const __m512i n0 = _mm512_set1_epi8(0x0F);
  for (int r = 0; r < N; r += 2) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < K / 128; ++g) {
      const __m512i h0 = _mm512_loadu_si512(X8 + g * 128), h1 = _mm512_loadu_si512(X8 + g * 128 + 64);
      for (int q = 0; q < 2; ++q) {
        const __m512i c = _mm512_loadu_si512(w + (r + q) * (K / 2) + g * 64);
        const __m512i lo = _mm512_and_si512(c, n0), hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), n0);
        __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, h0);
        b = _mm512_dpbusd_epi32(b, hi, h1);
        __m256i f = _mm256_add_epi32(_mm512_castsi512_si256(b), _mm512_extracti64x4_epi64(b, 1));
        acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_set1_ps(0.5f), acc[q]);
      }
    }
    for (int q = 0; q < 2; ++q) { float t[8]; _mm256_storeu_ps(t, acc[q]); out[r+q] = t[0]+t[1]+t[2]+t[3]+t[4]+t[5]+t[6]+t[7]; }
  }
}
int main() {
  std::vector<uint8_t> w(N * K / 2); for (auto& b : w) b = rand();
  std::vector<int16_t> X(K); for (auto& v : X) v = (rand() % 65535) - 32767;
  std::vector<uint8_t> Xl(K); std::vector<int8_t> Xh(K), X8(K); for (int k = 0; k < K; ++k) { Xl[k] = rand(); Xh[k] = rand(); X8[k] = rand(); }
  std::vector<float> out(N);
  for (int rep = 0; rep < 5; ++rep) {
    double t[3];
    for (int v = 0; v < 3; ++v) {
      auto a = std::chrono::steady_clock::now();
      for (int i = 0; i < 2000; ++i) { if (v == 0) runA(w.data(), X.data(), out.data()); else if (v == 1) runB(w.data(), Xl.data(), Xh.data(), out.data()); else runC(w.data(), X8.data(), out.data()); }
      t[v] = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    }
    double bytes = 2000.0 * N * K / 2;
    printf("A %.1f GB/s  B %.1f GB/s  C %.1f GB/s  (%g)\n", bytes / t[0] / 1e9, bytes / t[1] / 1e9, bytes / t[2] / 1e9, out[3]);
  }
}
