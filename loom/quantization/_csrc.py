"""The C source of loom's int8 library: u8 x s8 -> s32 GEMM with fused requantisation, and u8 im2col."""

SOURCE = r"""/* loom int8 kernels.
 *
 * loom_q8_gemm: C[m, n] = sum_k A[m, k] * B[n, k] + bias[n] in int32 (A uint8, row stride lda; B int8 packed
 * with row stride kp, a multiple of 32, zero beyond k), then an epilogue per output:
 *   kind 0  int32 C as it is
 *   kind 1  uint8  clamp(rint((float)C * mult[n]) + zp, lo, hi)
 *   kind 2  int8   the same, signed
 *   kind 3  float  (float)C * mult[n], then max(0, .) if relu
 * ReLU of kinds 1 and 2 is folded into lo (the output zero point) by the caller.
 *
 * path: 0 scalar, 1 AVX2, 2 VNNI (vpdpbusd on 256-bit registers). Paths the compiler cannot target fall back
 * to the next lower one; loom_q8_features says which were compiled in (bit 1 AVX2, bit 2 VNNI). All paths
 * give bit-identical results:
 *   - VNNI's vpdpbusd adds four u8*s8 products into int32 with no intermediate saturation;
 *   - AVX2's vpmaddubsw adds two u8*s8 products into a *saturated* int16: 255*127*2 = 64770 overflows it.
 *     It is used only when the caller says every weight lies in [-64, 63] (narrow: |2*255*64| = 32640 fits);
 *     otherwise both operands are widened to int16 and vpmaddwd adds pairs exactly into int32.
 * Threads: an OpenMP loop over row blocks with nthreads threads (loom's count, or 1).
 */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#if defined(__AVX2__)
#include <immintrin.h>
#define HAVE_AVX2 1
#else
#define HAVE_AVX2 0
#endif
#if defined(__AVXVNNI__)
#define HAVE_VNNI 1
#define DPBUSD(acc, a, b) _mm256_dpbusd_avx_epi32(acc, a, b)
#elif defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define HAVE_VNNI 1
#define DPBUSD(acc, a, b) _mm256_dpbusd_epi32(acc, a, b)
#else
#define HAVE_VNNI 0
#endif

void loom_q8_features(int32_t *out) { out[0] = (HAVE_AVX2 ? 2 : 0) | (HAVE_VNNI ? 4 : 0); }

static void dots_scalar(const uint8_t *a, int64_t lda, int64_t rows, const int8_t *b, int64_t kp, int64_t cols,
                        int64_t k, int32_t *acc /* rows x cols */) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            const uint8_t *ar = a + i * lda;
            const int8_t *br = b + j * kp;
            int32_t s = 0;
            for (int64_t t = 0; t < k; t++) s += (int32_t)ar[t] * (int32_t)br[t];
            acc[i * cols + j] = s;
        }
}

#if HAVE_AVX2
static inline int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* One 32-byte step for one (a, b) pair into acc, by the chosen instruction sequence. */
static inline __m256i step_narrow(__m256i acc, __m256i a, __m256i b, __m256i ones) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
}
static inline __m256i step_wide(__m256i acc, __m256i a, __m256i b) {
    __m256i alo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(a));
    __m256i ahi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(a, 1));
    __m256i blo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(b));
    __m256i bhi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(b, 1));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(alo, blo));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(ahi, bhi));
}

/* Up to 2 rows x 4 columns of dot products over k (b rows hold kp >= k bytes, zero from k on). */
#define DOTS_BODY(STEP)                                                                                      \
    __m256i c[2][4];                                                                                         \
    for (int i = 0; i < 2; i++)                                                                              \
        for (int j = 0; j < 4; j++) c[i][j] = _mm256_setzero_si256();                                        \
    int64_t full = k / 32 * 32;                                                                              \
    uint8_t tail[2][32];                                                                                     \
    for (int64_t t = 0; t < kp; t += 32) {                                                                   \
        __m256i av[2], bv[4];                                                                                \
        for (int i = 0; i < 2; i++) {                                                                        \
            const uint8_t *ar = a + (i < rows ? i : 0) * lda + t;                                            \
            if (t < full) av[i] = _mm256_loadu_si256((const __m256i *)ar);                                   \
            else {                                                                                           \
                memset(tail[i], 0, 32);                                                                      \
                if (k > t) memcpy(tail[i], ar, (size_t)(k - t));                                             \
                av[i] = _mm256_loadu_si256((const __m256i *)tail[i]);                                        \
            }                                                                                                \
        }                                                                                                    \
        for (int j = 0; j < 4; j++) bv[j] = _mm256_loadu_si256((const __m256i *)(b + (j < cols ? j : 0) * kp + t)); \
        for (int i = 0; i < 2; i++)                                                                          \
            for (int j = 0; j < 4; j++) c[i][j] = STEP;                                                      \
    }                                                                                                        \
    for (int64_t i = 0; i < rows; i++)                                                                       \
        for (int64_t j = 0; j < cols; j++) acc[i * cols + j] = hsum(c[i][j]);

static void dots_avx2(const uint8_t *a, int64_t lda, int64_t rows, const int8_t *b, int64_t kp, int64_t cols,
                      int64_t k, int narrow, int32_t *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (narrow) { DOTS_BODY(step_narrow(c[i][j], av[i], bv[j], ones)) }
    else { DOTS_BODY(step_wide(c[i][j], av[i], bv[j])) }
}
#endif

#if HAVE_VNNI
static void dots_vnni(const uint8_t *a, int64_t lda, int64_t rows, const int8_t *b, int64_t kp, int64_t cols,
                      int64_t k, int32_t *acc) {
    DOTS_BODY(DPBUSD(c[i][j], av[i], bv[j]))
}
#endif

void loom_q8_gemm(int32_t path, int32_t nthreads, int32_t narrow, int64_t m, int64_t n, int64_t k, int64_t kp,
                  const uint8_t *a, int64_t lda, const int8_t *b, const int32_t *bias, const float *mult,
                  int32_t kind, int32_t zp, int32_t lo, int32_t hi, int32_t relu, void *out, int64_t ldc) {
    if (path >= 2 && !HAVE_VNNI) path = 1;
    if (path >= 1 && !HAVE_AVX2) path = 0;
    int64_t mblocks = (m + 1) / 2;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
    for (int64_t mb = 0; mb < mblocks; mb++) {
        int64_t m0 = mb * 2, rows = m - m0 < 2 ? m - m0 : 2;
        int32_t acc[8];
        for (int64_t n0 = 0; n0 < n; n0 += 4) {
            int64_t cols = n - n0 < 4 ? n - n0 : 4;
            const uint8_t *ap = a + m0 * lda;
            const int8_t *bp = b + n0 * kp;
#if HAVE_VNNI
            if (path == 2) dots_vnni(ap, lda, rows, bp, kp, cols, k, acc); else
#endif
#if HAVE_AVX2
            if (path == 1) dots_avx2(ap, lda, rows, bp, kp, cols, k, narrow, acc); else
#endif
            dots_scalar(ap, lda, rows, bp, kp, cols, k, acc);
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    int64_t col = n0 + j, at = (m0 + i) * ldc + col;
                    int32_t v = acc[i * cols + j] + (bias ? bias[col] : 0);
                    if (kind == 0) { ((int32_t *)out)[at] = v; continue; }
                    float f = (float)v * mult[col];
                    if (kind == 3) { ((float *)out)[at] = relu && f < 0.0f ? 0.0f : f; continue; }
                    float q = nearbyintf(f) + (float)zp;
                    q = q < (float)lo ? (float)lo : (q > (float)hi ? (float)hi : q);
                    if (kind == 1) ((uint8_t *)out)[at] = (uint8_t)(int32_t)q;
                    else ((int8_t *)out)[at] = (int8_t)(int32_t)q;
                }
        }
    }
}

/* im2col of an NHWC uint8 image batch: rows (n, oh, ow), columns (i, j, c) with row stride kp (zero beyond
 * kh*kw*c); taps outside the image read pad (the input zero point: real 0). p: N H W C kh kw sh sw ph pw dh dw Ho Wo */
void loom_q8_im2col(int32_t nthreads, const int64_t *p, const uint8_t *x, uint8_t pad, uint8_t *out, int64_t kp) {
    int64_t N = p[0], H = p[1], W = p[2], C = p[3], kh = p[4], kw = p[5], sh = p[6], sw = p[7], ph = p[8];
    int64_t pw = p[9], dh = p[10], dw = p[11], Ho = p[12], Wo = p[13], k = kh * kw * C;
    int64_t rows = N * Ho * Wo;
    #pragma omp parallel for schedule(static) num_threads(nthreads) if (nthreads > 1)
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = r / (Ho * Wo), oh = (r / Wo) % Ho, ow = r % Wo;
        uint8_t *o = out + r * kp;
        for (int64_t i = 0; i < kh; i++) {
            int64_t ih = oh * sh - ph + i * dh;
            for (int64_t j = 0; j < kw; j++) {
                int64_t iw = ow * sw - pw + j * dw;
                uint8_t *dst = o + (i * kw + j) * C;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) memset(dst, pad, (size_t)C);
                else memcpy(dst, x + ((n * H + ih) * W + iw) * C, (size_t)C);
            }
        }
        if (kp > k) memset(o + k, 0, (size_t)(kp - k));
    }
}
"""
