/*
 * Vectorised arithmetic in the prime field F_p, p = 2^127 - 1 (a Mersenne prime).
 *
 * An element is stored as two little-endian uint64 words (lo, hi), always canonical: 0 <= x < p.
 * Every function works on whole arrays (n elements = 2n words) so that Python pays one call per batch.
 * Loaded with ctypes from hss/field.py; nothing here allocates, does I/O or keeps state.
 *
 * Why this prime: the comparison protocol needs p > 2^(k + kappa + 1 + log2 C(m,t)) for k-bit values
 * and statistical security kappa (Catrina & de Hoogh 2010); 127 bits leave room for k = 42,
 * kappa = 64 and m up to 16 parties. Reduction mod a Mersenne prime is a shift and an add, and
 * (p + 1) / 4 = 2^125, so a square root is 125 squarings.
 */
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define API __declspec(dllexport)
#else
#define API __attribute__((visibility("default")))
#endif

typedef unsigned __int128 u128;

static const u128 P = (((u128)1) << 127) - 1;

static inline u128 ld(const uint64_t *a) { return (((u128)a[1]) << 64) | a[0]; }
static inline void st(uint64_t *o, u128 v) {
    o[0] = (uint64_t)v;
    o[1] = (uint64_t)(v >> 64);
}

static inline u128 fold(u128 s) { /* s < 2^128 -> s mod p */
    s = (s & P) + (s >> 127);
    if (s >= P) s -= P;
    return s;
}
static inline u128 addm(u128 a, u128 b) { return fold(a + b); } /* a, b < p: no overflow */
static inline u128 subm(u128 a, u128 b) { return a >= b ? a - b : a + (P - b); }

static inline u128 mulm(u128 a, u128 b) {
    uint64_t a0 = (uint64_t)a, a1 = (uint64_t)(a >> 64);
    uint64_t b0 = (uint64_t)b, b1 = (uint64_t)(b >> 64);
    u128 p00 = (u128)a0 * b0;
    u128 mid = (u128)a0 * b1 + (u128)a1 * b0; /* a1, b1 < 2^63: each term < 2^127, sum < 2^128 */
    u128 p11 = (u128)a1 * b1;
    u128 lo = p00 + (mid << 64);
    u128 carry = lo < p00;
    u128 hi = p11 + (mid >> 64) + carry; /* product = hi * 2^128 + lo, hi < 2^126 */
    /* 2^128 = 2 (mod p), 2^127 = 1 (mod p) */
    u128 r = (lo & P) + (lo >> 127) + (hi << 1);
    return fold(r);
}

API void f_add(const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) st(out + 2 * i, addm(ld(a + 2 * i), ld(b + 2 * i)));
}

API void f_sub(const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) st(out + 2 * i, subm(ld(a + 2 * i), ld(b + 2 * i)));
}

API void f_mul(const uint64_t *a, const uint64_t *b, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) st(out + 2 * i, mulm(ld(a + 2 * i), ld(b + 2 * i)));
}

/* out[i] = a[i] * s */
API void f_mul_scalar(const uint64_t *a, const uint64_t *s, uint64_t *out, size_t n) {
    u128 sv = ld(s);
    for (size_t i = 0; i < n; i++) st(out + 2 * i, mulm(ld(a + 2 * i), sv));
}

static inline u128 sqrm(u128 a) {
    uint64_t a0 = (uint64_t)a, a1 = (uint64_t)(a >> 64);
    u128 p00 = (u128)a0 * a0;
    u128 mid = (u128)a0 * a1; /* < 2^127: doubling fits */
    u128 p11 = (u128)a1 * a1;
    mid <<= 1;
    u128 lo = p00 + (mid << 64);
    u128 carry = lo < p00;
    u128 hi = p11 + (mid >> 64) + carry;
    u128 r = (lo & P) + (lo >> 127) + (hi << 1);
    return fold(r);
}

/* out[i] = a[i]^(2^k) on the general-purpose registers, for i in [lo, n). Four independent chains run in
 * lockstep so that the multiplier pipeline stays busy: each squaring depends on the previous one, and a
 * single chain is bound by multiply latency, not throughput. */
static void pow2k_scalar(const uint64_t *a, uint64_t *out, size_t lo, size_t n, int k) {
    size_t i = lo;
    for (; i + 4 <= n; i += 4) {
        u128 x0 = ld(a + 2 * i), x1 = ld(a + 2 * i + 2), x2 = ld(a + 2 * i + 4), x3 = ld(a + 2 * i + 6);
        for (int j = 0; j < k; j++) {
            x0 = sqrm(x0);
            x1 = sqrm(x1);
            x2 = sqrm(x2);
            x3 = sqrm(x3);
        }
        st(out + 2 * i, x0);
        st(out + 2 * i + 2, x1);
        st(out + 2 * i + 4, x2);
        st(out + 2 * i + 6, x3);
    }
    for (; i < n; i++) {
        u128 x = ld(a + 2 * i);
        for (int j = 0; j < k; j++) x = sqrm(x);
        st(out + 2 * i, x);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
/* The square roots' squaring chains with AVX2, 8 elements at a time (the costliest kernel of the engine:
 * 41 roots per sign decision). An element is held in radix 2^26 as 5 limbs l_0..l_4 (130 bits), one
 * element per 64-bit lane, and 2^130 = 2^3 (mod p) folds the upper half of a product back (as Poly1305
 * does with 2^130 = 5 mod 2^130 - 5). Bounds, with every limb < 2^26 except l_1 < 2^26 + 2^10 after the
 * carry chain: each operand of _mm256_mul_epu32 (low 32 bits x low 32 bits) is at most 8 * l_4 < 2^29 or
 * 2 * l_1 < 2^28; each column sum is three products < 3 * 2^56 < 2^64; the carry chain leaves l_0 < 2^35
 * before its last carry, so l_1 gains < 2^10. Exact: the result is converted back and fully reduced;
 * tests/hss/test_field.py compares it with pow() and with the scalar path. */
typedef struct {
    __m256i l0, l1, l2, l3, l4;
} limbs4;

#define M26 ((1ULL << 26) - 1)

__attribute__((target("avx2"))) static inline limbs4 sqr_limbs(limbs4 x, __m256i mask) {
    __m256i d0 = _mm256_add_epi64(x.l0, x.l0), d1 = _mm256_add_epi64(x.l1, x.l1);
    __m256i d2 = _mm256_add_epi64(x.l2, x.l2), d3 = _mm256_add_epi64(x.l3, x.l3);
    __m256i e3 = _mm256_slli_epi64(x.l3, 3), e4 = _mm256_slli_epi64(x.l4, 3); /* the fold by 2^3 */
#define MU _mm256_mul_epu32
#define AD _mm256_add_epi64
    __m256i t0 = AD(AD(MU(x.l0, x.l0), MU(d1, e4)), MU(d2, e3));
    __m256i t1 = AD(AD(MU(d0, x.l1), MU(d2, e4)), MU(x.l3, e3));
    __m256i t2 = AD(AD(MU(d0, x.l2), MU(x.l1, x.l1)), MU(d3, e4));
    __m256i t3 = AD(AD(MU(d0, x.l3), MU(d1, x.l2)), MU(x.l4, e4));
    __m256i t4 = AD(AD(MU(d0, x.l4), MU(d1, x.l3)), MU(x.l2, x.l2));
    __m256i c;
    c = _mm256_srli_epi64(t0, 26), t0 = _mm256_and_si256(t0, mask), t1 = AD(t1, c);
    c = _mm256_srli_epi64(t1, 26), t1 = _mm256_and_si256(t1, mask), t2 = AD(t2, c);
    c = _mm256_srli_epi64(t2, 26), t2 = _mm256_and_si256(t2, mask), t3 = AD(t3, c);
    c = _mm256_srli_epi64(t3, 26), t3 = _mm256_and_si256(t3, mask), t4 = AD(t4, c);
    c = _mm256_srli_epi64(t4, 26), t4 = _mm256_and_si256(t4, mask), t0 = AD(t0, _mm256_slli_epi64(c, 3));
    c = _mm256_srli_epi64(t0, 26), t0 = _mm256_and_si256(t0, mask), t1 = AD(t1, c);
#undef MU
#undef AD
    limbs4 r = {t0, t1, t2, t3, t4};
    return r;
}

__attribute__((target("avx2"))) static void pow2k_avx2_8(const uint64_t *a, uint64_t *out, int k) {
    uint64_t l[5][8];
    for (int i = 0; i < 8; i++) {
        u128 v = ld(a + 2 * i);
        for (int q = 0; q < 5; q++, v >>= 26) l[q][i] = (uint64_t)(v & M26);
    }
    const __m256i mask = _mm256_set1_epi64x((long long)M26);
#define LOAD(j) _mm256_loadu_si256((const __m256i *)&l[j][h])
#define STORE(j, v) _mm256_storeu_si256((__m256i *)&l[j][h], v)
    int h = 0;
    limbs4 x = {LOAD(0), LOAD(1), LOAD(2), LOAD(3), LOAD(4)};
    h = 4;
    limbs4 y = {LOAD(0), LOAD(1), LOAD(2), LOAD(3), LOAD(4)};
    for (int j = 0; j < k; j++) {
        x = sqr_limbs(x, mask);
        y = sqr_limbs(y, mask);
    }
    h = 0;
    STORE(0, x.l0), STORE(1, x.l1), STORE(2, x.l2), STORE(3, x.l3), STORE(4, x.l4);
    h = 4;
    STORE(0, y.l0), STORE(1, y.l1), STORE(2, y.l2), STORE(3, y.l3), STORE(4, y.l4);
#undef LOAD
#undef STORE
    for (int i = 0; i < 8; i++) {
        /* bits >= 127 of l_4 * 2^104 fold back as 2^127 = 1 (mod p); the sum stays < 2^128 */
        u128 v = ((u128)(l[4][i] & ((1ULL << 23) - 1)) << 104) + ((u128)l[3][i] << 78) +
                 ((u128)l[2][i] << 52) + ((u128)l[1][i] << 26) + l[0][i] + (l[4][i] >> 23);
        st(out + 2 * i, fold(v));
    }
}
#endif

/* Which path f_pow2k takes on this CPU: 1 = AVX2 (8 elements at a time), 0 = general-purpose registers. */
API int f_pow2k_vectorised(void) {
#ifdef HAVE_AVX2_PATH
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

/* out[i] = a[i]^(2^k): k squarings. With k = 125 this is the square root of a quadratic residue.
 * vectorised = 0 forces the general-purpose path (the tests compare the two). */
API void f_pow2k_path(const uint64_t *a, uint64_t *out, size_t n, int k, int vectorised) {
    size_t i = 0;
#ifdef HAVE_AVX2_PATH
    if (vectorised && f_pow2k_vectorised())
        for (; i + 8 <= n; i += 8) pow2k_avx2_8(a + 2 * i, out + 2 * i, k);
#else
    (void)vectorised;
#endif
    pow2k_scalar(a, out, i, n, k);
}

API void f_pow2k(const uint64_t *a, uint64_t *out, size_t n, int k) { f_pow2k_path(a, out, n, k, 1); }

static u128 powm(u128 x, u128 e) {
    u128 r = 1;
    while (e) {
        if (e & 1) r = mulm(r, x);
        x = mulm(x, x);
        e >>= 1;
    }
    return r;
}

/* Montgomery's batch inversion: 3(n-1) multiplications and one exponentiation.
 * scratch holds n elements. Returns the index + 1 of the first zero element, 0 if all were invertible. */
API size_t f_inv_batch(const uint64_t *a, uint64_t *out, uint64_t *scratch, size_t n) {
    if (n == 0) return 0;
    u128 acc = 1;
    for (size_t i = 0; i < n; i++) {
        u128 x = ld(a + 2 * i);
        if (x == 0) return i + 1;
        st(scratch + 2 * i, acc); /* prefix product of a[0..i-1] */
        acc = mulm(acc, x);
    }
    u128 inv = powm(acc, P - 2);
    for (size_t i = n; i-- > 0;) {
        u128 x = ld(a + 2 * i);
        st(out + 2 * i, mulm(inv, ld(scratch + 2 * i)));
        inv = mulm(inv, x);
    }
    return 0;
}

/* a * b reduced only to a value < 2^128 that is congruent mod p (a, b < p). */
static inline u128 mul_partial(u128 a, u128 b) {
    uint64_t a0 = (uint64_t)a, a1 = (uint64_t)(a >> 64);
    uint64_t b0 = (uint64_t)b, b1 = (uint64_t)(b >> 64);
    u128 p00 = (u128)a0 * b0;
    u128 mid = (u128)a0 * b1 + (u128)a1 * b0;
    u128 p11 = (u128)a1 * b1;
    u128 lo = p00 + (mid << 64);
    u128 carry = lo < p00;
    u128 hi = p11 + (mid >> 64) + carry;
    return (lo & P) + (lo >> 127) + (hi << 1);
}

/* a * s for a < p and a small s < 2^64, reduced to a value < 2^128: two multiplications instead of four. */
static inline u128 mul_small_partial(u128 a, uint64_t s) {
    u128 lo = (u128)(uint64_t)a * s;
    u128 mid = (u128)(uint64_t)(a >> 64) * s; /* < 2^127 */
    u128 lo2 = lo + (mid << 64);
    u128 carry = lo2 < lo;
    u128 hi = (mid >> 64) + carry; /* product = hi * 2^128 + lo2 */
    return (lo2 & P) + (lo2 >> 127) + (hi << 1);
}

#define BLK 128

/* out (r x n) = M (r x c) @ X (c x n), all field elements, row-major.
 * Blocked over n so that the accumulators stay in cache; each term is reduced only partially and the
 * sum is kept in 192 bits (a 128-bit word plus a carry count), reduced once per output element. */
API void f_matmul(const uint64_t *M, const uint64_t *X, uint64_t *out, size_t r, size_t c, size_t n) {
    u128 acc[BLK];
    uint64_t cnt[BLK];
    for (size_t i = 0; i < r; i++) {
        for (size_t k0 = 0; k0 < n; k0 += BLK) {
            size_t nb = n - k0 < BLK ? n - k0 : BLK;
            for (size_t k = 0; k < nb; k++) {
                acc[k] = 0;
                cnt[k] = 0;
            }
            for (size_t j = 0; j < c; j++) {
                u128 mij = ld(M + 2 * (i * c + j));
                if (mij == 0) continue;
                const uint64_t *x = X + 2 * (j * n + k0);
                if (mij == 1) {
                    for (size_t k = 0; k < nb; k++) {
                        u128 v = ld(x + 2 * k);
                        acc[k] += v;
                        cnt[k] += acc[k] < v;
                    }
                } else if ((mij >> 64) == 0) {
                    uint64_t sm = (uint64_t)mij;
                    for (size_t k = 0; k < nb; k++) {
                        u128 v = mul_small_partial(ld(x + 2 * k), sm);
                        acc[k] += v;
                        cnt[k] += acc[k] < v;
                    }
                } else {
                    for (size_t k = 0; k < nb; k++) {
                        u128 v = mul_partial(ld(x + 2 * k), mij);
                        acc[k] += v;
                        cnt[k] += acc[k] < v;
                    }
                }
            }
            uint64_t *o = out + 2 * (i * n + k0);
            for (size_t k = 0; k < nb; k++) {
                /* value = cnt * 2^128 + acc = 2 cnt + acc (mod p); cnt <= c */
                u128 v = (acc[k] & P) + (acc[k] >> 127) + ((u128)cnt[k] << 1);
                st(o + 2 * k, fold(v));
            }
        }
    }
}

/* PRSS combination in one pass: out[k] = sum_j coeffs[j] * x_j[k], where x_j[k] is made from 16 random
 * bytes raw[j][k]: a uniform field element (bits = 127: keep 127 bits, p -> 0) or a uniform integer in
 * [0, 2^bits) (bits < 127). raw is (nkeys, n) blocks of two words. */
API void f_combine_random(const uint64_t *raw, const uint64_t *coeffs, uint64_t *out, size_t nkeys, size_t n,
                          int bits) {
    u128 acc[BLK];
    uint64_t cnt[BLK];
    u128 mask = bits >= 127 ? P : ((((u128)1) << bits) - 1);
    for (size_t k0 = 0; k0 < n; k0 += BLK) {
        size_t nb = n - k0 < BLK ? n - k0 : BLK;
        for (size_t k = 0; k < nb; k++) {
            acc[k] = 0;
            cnt[k] = 0;
        }
        for (size_t j = 0; j < nkeys; j++) {
            u128 cj = ld(coeffs + 2 * j);
            const uint64_t *x = raw + 2 * (j * n + k0);
            for (size_t k = 0; k < nb; k++) {
                u128 v = ld(x + 2 * k) & mask;
                if (v == P) v = 0;
                v = mul_partial(v, cj);
                acc[k] += v;
                cnt[k] += acc[k] < v;
            }
        }
        uint64_t *o = out + 2 * k0;
        for (size_t k = 0; k < nb; k++) {
            u128 v = (acc[k] & P) + (acc[k] >> 127) + ((u128)cnt[k] << 1);
            st(o + 2 * k, fold(v));
        }
    }
}

/* Signed 64-bit integers into the field: negative x maps to p + x. */
API void f_from_int64(const int64_t *x, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t v = x[i];
        u128 e = v >= 0 ? (u128)(uint64_t)v : P - (u128)(uint64_t)(-(v + 1)) - 1;
        st(out + 2 * i, e);
    }
}

/* Field elements read as signed integers in (-p/2, p/2) into int64. Returns the index + 1 of the
 * first element whose signed value does not fit in int64, 0 if all fit. */
API size_t f_to_int64(const uint64_t *a, int64_t *out, size_t n) {
    const u128 half = P >> 1;
    for (size_t i = 0; i < n; i++) {
        u128 v = ld(a + 2 * i);
        if (v <= half) {
            if (v > (u128)INT64_MAX) return i + 1;
            out[i] = (int64_t)v;
        } else {
            u128 neg = P - v; /* value is -neg */
            if (neg > ((u128)INT64_MAX) + 1) return i + 1;
            out[i] = neg == ((u128)INT64_MAX) + 1 ? INT64_MIN : -(int64_t)neg;
        }
    }
    return 0;
}

/* Field elements read as signed integers in (-p/2, p/2), as doubles scaled by 2^-scale_bits. */
API void f_to_double(const uint64_t *a, double *out, size_t n, int scale_bits) {
    const u128 half = P >> 1;
    double scale = 1.0;
    for (int j = 0; j < scale_bits; j++) scale *= 0.5;
    for (size_t i = 0; i < n; i++) {
        u128 v = ld(a + 2 * i);
        int neg = v > half;
        if (neg) v = P - v;
        double d = (double)(uint64_t)(v >> 64) * 18446744073709551616.0 + (double)(uint64_t)v;
        out[i] = (neg ? -d : d) * scale;
    }
}

/* Uniform field elements from 16 random bytes each: keep 127 bits, map the single value p to 0.
 * Statistical distance from uniform: 2^-127. */
API void f_from_random(const uint64_t *raw, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        u128 v = ld(raw + 2 * i) & P;
        if (v == P) v = 0;
        st(out + 2 * i, v);
    }
}

/* Uniform integers in [0, 2^bits) (bits <= 126) from 16 random bytes each. */
API void f_bounded_from_random(const uint64_t *raw, uint64_t *out, size_t n, int bits) {
    u128 mask = (((u128)1) << bits) - 1;
    for (size_t i = 0; i < n; i++) st(out + 2 * i, ld(raw + 2 * i) & mask);
}
