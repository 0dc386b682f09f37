"""The C source of loom's int8 library: u8 x s8 -> s32 GEMM with fused requantisation, and u8 im2col."""

SOURCE = r"""/* loom int8 kernels.
 *
 * loom_q8_gemm: C[m, n] = sum_k A[m, k] * B[n, k] + bias[n] in int32 (A uint8, row stride lda; B int8 packed
 * in blocks of 8 columns, see below), then an epilogue per output:
 *   kind 0  int32 C as it is
 *   kind 1  uint8  clamp(rint((float)C * mult[n]) + zp, lo, hi), rounding half to even
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
#include <stdlib.h>
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

/* B is packed in blocks of 8 columns: block[kq][8][4], 4 consecutive k of one column per 32-bit lane,
 * so one 32-byte load feeds 8 columns and each row's 4 activations are broadcast (no horizontal sums).
 * A zero block follows the last one. Kernels fill acc[4][16] for 4 rows (pointers; repeated when fewer). */
static inline int32_t load4(const uint8_t *p, int64_t rem) {
    int32_t v = 0;
    memcpy(&v, p, (size_t)(rem < 4 ? rem : 4));
    return v;
}

static void kernel_scalar(const uint8_t *const *ap, const int8_t *b0, int64_t k, int32_t *acc) {
    int32_t s[4][8] = {{0}};
    for (int64_t t = 0; t < k; t++) {
        const int8_t *bt = b0 + (t >> 2) * 32 + (t & 3);
        for (int i = 0; i < 4; i++) {
            int32_t av = ap[i][t];
            for (int j = 0; j < 8; j++) s[i][j] += av * (int32_t)bt[j * 4];
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) acc[i * 16 + j] = s[i][j];
}

#if HAVE_AVX2
#define KERNEL16(NAME, STEP)                                                                                 \
static void NAME(const uint8_t *const *ap, const int8_t *b0, const int8_t *b1, int64_t k, int32_t *acc) {  \
    const __m256i ones = _mm256_set1_epi16(1);                                                               \
    (void)ones;                                                                                              \
    __m256i c[4][2];                                                                                         \
    for (int i = 0; i < 4; i++) c[i][0] = c[i][1] = _mm256_setzero_si256();                                  \
    int64_t kq = (k + 3) / 4, kf = k / 4;                                                                    \
    for (int64_t t = 0; t < kq; t++) {                                                                       \
        __m256i w0 = _mm256_loadu_si256((const __m256i *)(b0 + t * 32));                                     \
        __m256i w1 = _mm256_loadu_si256((const __m256i *)(b1 + t * 32));                                     \
        for (int i = 0; i < 4; i++) {                                                                        \
            int32_t v;                                                                                       \
            if (t < kf) memcpy(&v, ap[i] + 4 * t, 4); else v = load4(ap[i] + 4 * t, k - 4 * t);              \
            __m256i a = _mm256_set1_epi32(v);                                                                \
            c[i][0] = STEP(c[i][0], a, w0);                                                                  \
            c[i][1] = STEP(c[i][1], a, w1);                                                                  \
        }                                                                                                    \
    }                                                                                                        \
    for (int i = 0; i < 4; i++) {                                                                            \
        _mm256_storeu_si256((__m256i *)(acc + i * 16), c[i][0]);                                             \
        _mm256_storeu_si256((__m256i *)(acc + i * 16 + 8), c[i][1]);                                         \
    }                                                                                                        \
}

#define STEP_NARROW(c, a, w) _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, w), ones))
KERNEL16(kernel_narrow, STEP_NARROW)

/* Weights beyond 7 bits: widen both to int16; vpmaddwd sums (k0,k1) and (k2,k3) of each column exactly,
 * and a final horizontal add joins the two halves of each column. */
static void kernel_wide(const uint8_t *const *ap, const int8_t *b0, int64_t k, int32_t *acc) {
    __m256i lo[4], hi[4];
    for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_si256();
    int64_t kq = (k + 3) / 4, kf = k / 4;
    for (int64_t t = 0; t < kq; t++) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(b0 + t * 32));
        __m256i wlo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(w));
        __m256i whi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1));
        for (int i = 0; i < 4; i++) {
            int32_t v;
            if (t < kf) memcpy(&v, ap[i] + 4 * t, 4); else v = load4(ap[i] + 4 * t, k - 4 * t);
            __m256i a = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(v)));
            lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(a, wlo));
            hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(a, whi));
        }
    }
    for (int i = 0; i < 4; i++)
        _mm256_storeu_si256((__m256i *)(acc + i * 16), _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo[i], hi[i]), 0xD8));
}
#endif

#if HAVE_VNNI
#define STEP_VNNI(c, a, w) DPBUSD(c, a, w)
KERNEL16(kernel_vnni, STEP_VNNI)
#endif

/* The epilogue of one row: plain loops the compiler vectorises. Rounding is half to even by the
 * float32 "magic number" (f + 1.5 * 2^23) - 1.5 * 2^23, exact for |f| < 2^22; f is clamped first to a
 * range that the integer clamp after it makes no difference to. */
#define MAGIC 12582912.0f
#define REQUANT(T)                                                                                           \
    for (int64_t j = 0; j < n; j++) {                                                                        \
        float f = (float)(acc[j] + (bias ? bias[j] : 0)) * mult[j];                                          \
        f = f < flo ? flo : (f > fhi ? fhi : f);                                                             \
        int32_t q = (int32_t)((f + MAGIC) - MAGIC) + zp;                                                     \
        ((T *)out)[j] = (T)(q < lo ? lo : (q > hi ? hi : q));                                                \
    }

static void epilogue(const int32_t *acc, int64_t n, const int32_t *bias, const float *mult, int32_t kind,
                     int32_t zp, int32_t lo, int32_t hi, int32_t relu, void *out) {
    float flo = (float)(lo - zp - 1), fhi = (float)(hi - zp + 1);
    if (kind == 0) {
        for (int64_t j = 0; j < n; j++) ((int32_t *)out)[j] = acc[j] + (bias ? bias[j] : 0);
    } else if (kind == 3) {
        float *o = (float *)out;
        for (int64_t j = 0; j < n; j++) o[j] = (float)(acc[j] + (bias ? bias[j] : 0)) * mult[j];
        if (relu)
            for (int64_t j = 0; j < n; j++) o[j] = o[j] < 0.0f ? 0.0f : o[j];
    } else if (kind == 1) {
        REQUANT(uint8_t)
    } else {
        REQUANT(int8_t)
    }
}

void loom_q8_gemm(int32_t path, int32_t nthreads, int32_t narrow, int64_t m, int64_t n, int64_t k,
                  const uint8_t *a, int64_t lda, const int8_t *b, const int32_t *bias, const float *mult,
                  int32_t kind, int32_t zp, int32_t lo, int32_t hi, int32_t relu, void *out, int64_t ldc) {
    if (path >= 2 && !HAVE_VNNI) path = 1;
    if (path >= 1 && !HAVE_AVX2) path = 0;
    int64_t mblocks = (m + 3) / 4, kq = (k + 3) / 4, nblocks = (n + 7) / 8;
    int wide16 = path == 2 || (path == 1 && narrow);  /* 16 columns per call, else 8. */
    size_t esize = kind == 1 || kind == 2 ? 1 : 4;
    #pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        int32_t *tile = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)(n + 16));
        #pragma omp for schedule(static)
        for (int64_t mb = 0; mb < mblocks; mb++) {
            int64_t m0 = mb * 4, rows = m - m0 < 4 ? m - m0 : 4;
            const uint8_t *ap[4];
            for (int i = 0; i < 4; i++) ap[i] = a + (m0 + (i < rows ? i : rows - 1)) * lda;
            int32_t acc[64];
            for (int64_t blk = 0; blk < nblocks; blk += wide16 ? 2 : 1) {
                const int8_t *b0 = b + blk * kq * 32, *b1 = b0 + kq * 32;  /* b1 may be the zero block. */
#if HAVE_VNNI
                if (path == 2) kernel_vnni(ap, b0, b1, k, acc); else
#endif
#if HAVE_AVX2
                if (path == 1 && narrow) kernel_narrow(ap, b0, b1, k, acc);
                else if (path == 1) kernel_wide(ap, b0, k, acc); else
#endif
                kernel_scalar(ap, b0, k, acc);
                int64_t n0 = blk * 8, cols = n - n0 < (wide16 ? 16 : 8) ? n - n0 : (wide16 ? 16 : 8);
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t j = 0; j < cols; j++) tile[i * n + n0 + j] = acc[i * 16 + j];
            }
            for (int64_t i = 0; i < rows; i++)
                epilogue(tile + i * n, n, bias, mult, kind, zp, lo, hi, relu,
                         (char *)out + (size_t)((m0 + i) * ldc) * esize);
        }
        free(tile);
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
