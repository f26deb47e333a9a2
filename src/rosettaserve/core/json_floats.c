/* Float32 arrays written as JSON text (json_nonfinite.array's writer).

   write(array, prefix=b"", suffix=b"") -> bytes   (prefix + the array's text + suffix)

   ``array`` is a C-contiguous buffer of native float32 values (a numpy array), of any number of
   dimensions; the text is its nested JSON lists, each value as the shortest decimal that reads
   back to the same float32 (the nearest of them when several are as short), laid out as orjson
   lays out float32 values with OPT_SERIALIZE_NUMPY: "0.0", "-0.0", "1.5", "100.0", "0.000001",
   "1e-7", "1.2345678e+13". NaN and the infinities are the tokens NaN, Infinity and -Infinity
   (core/json_nonfinite.py). On 262,144 normal values (bench/json_floats_cost.py, OIP's
   encode_infer) orjson takes ~22-23 ns a value, this writer ~12 (~6% less than the 12.8 it
   took before PLACING and the two passes of write_array, alternated in process; more in its
   build for any x86-64, see write_array; callgrind: 143 instructions a value, orjson's ~214; it
   was ~19-20 ns and ~210 instructions before the comparisons below were made on the unrounded
   products, the choices and the layout without branches).
   tests/unit/test_json_floats.py compares the two on a million values and more; every one of
   the 2^32 float32 values was compared (the same text as orjson, tokens aside), and again with
   each change of the writer (the same text as the writer before it).

   The shortest decimal is found with Schubfach (R. Giulietti, "The Schubfach way to render
   doubles", 2020) for binary32: a value v = c 2^q has the rounding interval R between its
   halfway points to its neighbours (both ends in it when c is even). With k = floor(log10 of
   the interval's width), the interval scaled by 10^-k is 1 to 10 wide, so it holds one or two
   integers, and at most one multiple of ten: that multiple is the shortest decimal when R holds
   it, else the integer of the two in R nearest to v. The scaled ends are computed from a 64-bit
   upper approximation of 10^-k, rounded to odd, which keeps every comparison with an even
   integer exact. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* G[k - K_MIN] = ceil(10^-k / 2^B(k)), where B(k) = floor(log2(10^-k)) - 63 puts it in
   [2^63, 2^64) (exact where 10^-k 2^-B(k) is an integer). Computed with Python's integers:
     for k in range(-45, 32): p = Fraction(10)**-k; b = floor_log2(p) - 63; ceil(p / 2**b) */
#define K_MIN (-45)
static const uint64_t G[] = {
    UINT64_C(0xB35DBF821AE4F38C), UINT64_C(0x8F7E32CE7BEA5C70), UINT64_C(0xE596B7B0C643C71A),
    UINT64_C(0xB7ABC627050305AE), UINT64_C(0x92EFD1B8D0CF37BF), UINT64_C(0xEB194F8E1AE525FE),
    UINT64_C(0xBC143FA4E250EB32), UINT64_C(0x96769950B50D88F5), UINT64_C(0xF0BDC21ABB48DB21),
    UINT64_C(0xC097CE7BC90715B4), UINT64_C(0x9A130B963A6C115D), UINT64_C(0xF684DF56C3E01BC7),
    UINT64_C(0xC5371912364CE306), UINT64_C(0x9DC5ADA82B70B59E), UINT64_C(0xFC6F7C4045812297),
    UINT64_C(0xC9F2C9CD04674EDF), UINT64_C(0xA18F07D736B90BE6), UINT64_C(0x813F3978F8940985),
    UINT64_C(0xCECB8F27F4200F3A), UINT64_C(0xA56FA5B99019A5C8), UINT64_C(0x84595161401484A0),
    UINT64_C(0xD3C21BCECCEDA100), UINT64_C(0xA968163F0A57B400), UINT64_C(0x878678326EAC9000),
    UINT64_C(0xD8D726B7177A8000), UINT64_C(0xAD78EBC5AC620000), UINT64_C(0x8AC7230489E80000),
    UINT64_C(0xDE0B6B3A76400000), UINT64_C(0xB1A2BC2EC5000000), UINT64_C(0x8E1BC9BF04000000),
    UINT64_C(0xE35FA931A0000000), UINT64_C(0xB5E620F480000000), UINT64_C(0x9184E72A00000000),
    UINT64_C(0xE8D4A51000000000), UINT64_C(0xBA43B74000000000), UINT64_C(0x9502F90000000000),
    UINT64_C(0xEE6B280000000000), UINT64_C(0xBEBC200000000000), UINT64_C(0x9896800000000000),
    UINT64_C(0xF424000000000000), UINT64_C(0xC350000000000000), UINT64_C(0x9C40000000000000),
    UINT64_C(0xFA00000000000000), UINT64_C(0xC800000000000000), UINT64_C(0xA000000000000000),
    UINT64_C(0x8000000000000000), UINT64_C(0xCCCCCCCCCCCCCCCD), UINT64_C(0xA3D70A3D70A3D70B),
    UINT64_C(0x83126E978D4FDF3C), UINT64_C(0xD1B71758E219652C), UINT64_C(0xA7C5AC471B478424),
    UINT64_C(0x8637BD05AF6C69B6), UINT64_C(0xD6BF94D5E57A42BD), UINT64_C(0xABCC77118461CEFD),
    UINT64_C(0x89705F4136B4A598), UINT64_C(0xDBE6FECEBDEDD5BF), UINT64_C(0xAFEBFF0BCB24AAFF),
    UINT64_C(0x8CBCCC096F5088CC), UINT64_C(0xE12E13424BB40E14), UINT64_C(0xB424DC35095CD810),
    UINT64_C(0x901D7CF73AB0ACDA), UINT64_C(0xE69594BEC44DE15C), UINT64_C(0xB877AA3236A4B44A),
    UINT64_C(0x9392EE8E921D5D08), UINT64_C(0xEC1E4A7DB69561A6), UINT64_C(0xBCE5086492111AEB),
    UINT64_C(0x971DA05074DA7BEF), UINT64_C(0xF1C90080BAF72CB2), UINT64_C(0xC16D9A0095928A28),
    UINT64_C(0x9ABE14CD44753B53), UINT64_C(0xF79687AED3EEC552), UINT64_C(0xC612062576589DDB),
    UINT64_C(0x9E74D1B791E07E49), UINT64_C(0xFD87B5F28300CA0E), UINT64_C(0xCAD2F7F5359A3B3F),
    UINT64_C(0xA2425FF75E14FC32), UINT64_C(0x81CEB32C4B43FCF5),
};

/* floor(q log10 2), floor(q log10 2 + log10 3/4), floor(j log2 10), exact for every q of a
   float32 (-149..104) and every j of the table (-31..45): checked with Python's fractions. */
static inline int floor_log10_pow2(int q) { return (q * 78913) >> 18; }
static inline int floor_log10_three_quarters_pow2(int q) { return (q * 78913 - 32715) >> 18; }
static inline int floor_log2_pow10(int j) { return (j * 1741647) >> 19; }

/* The scaling of each binary exponent (its index: the biased exponent of a float32), computed
   once at import: 10^-k as g 2^B(k), and the shift h that puts the scaled value's binary point
   at bit 32 of the upper half of a 128-bit product. IRREGULAR is for a power of two, whose
   interval reaches only half as far below it. Looking them up costs fewer instructions than
   computing them for every value. */
typedef struct {
    uint64_t g;
    int32_t shift, k;              /* shift: h + 2, for 4c (c is below 2^24: no overflow) */
    unsigned __int128 below, above; /* the scaled distances of the interval's ends from v */
    uint32_t hidden;                /* the significand's implicit bit (0 below the normals) */
} scale;
static scale REGULAR[256], IRREGULAR[256]; /* by the biased exponent */

static void fill_scale(scale *s, int q, int irregular) {
    int k = irregular ? floor_log10_three_quarters_pow2(q) : floor_log10_pow2(q);
    int h = q + floor_log2_pow10(-k) + 33; /* the scaled value's binary point at bit 32 */
    s->g = G[k - K_MIN];
    s->shift = h + 2;
    s->k = k;
    /* the ends are 4c - 2 (4c - 1 below a power of two) and 4c + 2, in units of 2^(q-2) */
    s->above = (unsigned __int128)s->g << (h + 1);
    s->below = (unsigned __int128)s->g << (h + !irregular);
}

static void fill_scales(void) {
    for (int biased = 0; biased < 255; biased++) {
        int q = (biased ? biased : 1) - 150;
        fill_scale(&REGULAR[biased], q, 0);
        fill_scale(&IRREGULAR[biased], q, biased > 1);
        REGULAR[biased].hidden = IRREGULAR[biased].hidden = biased ? 0x800000u : 0;
    }
}

static const uint32_t POW10[] = {1,       10,       100,       1000,      10000,
                                  100000,  1000000,  10000000,  100000000, 1000000000};

/* The number of digits of 0 < d < 2^32 in one addition (D. Lemire's way): for the d of a bit
   length, COUNT_OF[length - 1] is (count << 32) with 2^32 - 10^count added when 10^count has
   that bit length too (then d reaching it carries into the count). SCALE_TO_NINE[count] is
   10^(9 - count). */
static uint64_t COUNT_OF[32];
static uint32_t SCALE_TO_NINE[10];

static void fill_digit_counts(void) {
    uint64_t power = 10; /* the first power of ten above 2^bit */
    int count = 1;
    for (int bit = 0; bit < 32; bit++) {
        while (power <= (UINT64_C(1) << bit)) power *= 10, count++;
        COUNT_OF[bit] = (uint64_t)count << 32;
        if (power < UINT64_C(2) << bit) COUNT_OF[bit] += (UINT64_C(1) << 32) - power;
    }
    for (int k = 0; k < 10; k++) SCALE_TO_NINE[k] = POW10[9 - k];
}

static inline int digit_count(uint32_t d) {
    return (int)((d + COUNT_OF[31 ^ __builtin_clz(d)]) >> 32);
}

/* The shortest decimal of c 2^q (c > 0), with sc the scaling of q: nine digits, the first not
   0 (maybe trailing zeros), and where the decimal point goes: after *point of them (before the
   first when 0, and so on). The candidates are chosen between with arithmetic rather
   than branches: on random values a branch here is mispredicted about a third of the time.

   Schubfach compares the scaled ends, rounded to odd below 2^-32 (x = hi >> 32 with its lowest
   bit set when hi has any bit below 2^32), with even integers 4m. That is the same as comparing
   hi itself with 4m 2^32 (x <= 4m exactly when hi <= 4m 2^32, x < 4m when hi < 4m 2^32), so
   the rounding is never done: hi, the upper 64 bits of the product, is compared with m << 34. */
static inline uint32_t shortest(uint32_t c, const scale *sc, int *point) {
    uint64_t out = c & 1; /* odd c: the interval's ends are not in it */
    /* v 10^-k is g 4c 2^h, from one multiply; its ends differ from it by exact products */
    unsigned __int128 vb128 = (unsigned __int128)sc->g * ((uint64_t)c << sc->shift);
    uint64_t vb = (uint64_t)(vb128 >> 64);
    /* below/above the integers (in R when its ends are: <=, else <), each at least 2^32 */
    uint64_t vbl = (uint64_t)((vb128 - sc->below) >> 64) + out - 1; /* in R: vbl < 4m 2^32 */
    uint64_t vbr = (uint64_t)((vb128 + sc->above) >> 64) - out;     /* in R: vbr >= 4m 2^32 */
    /* the integers in R: from lo to hi (one or more; one of them s or t) */
    uint32_t lo = (uint32_t)(vbl >> 34) + 1, hi = (uint32_t)(vbr >> 34);
    /* the multiple of ten at or below hi, the shortest when in R (R is below 10 wide) */
    uint32_t ten = hi / 10 * 10;
    /* else the integer nearest to v (s or t = s + 1; the even one when v is halfway), moved
       into R when it is not in it */
    uint32_t nearest = (uint32_t)((vb + ((vb >> 34) & 1) + ((UINT64_C(1) << 33) - 1)) >> 34);
    nearest = nearest < lo ? lo : nearest;
    nearest = nearest > hi ? hi : nearest;
    /* chosen with a mask: as a branch, mispredicted about a third of the time */
    uint32_t tens = 0 - (uint32_t)(ten >= lo);
    uint32_t digits = (ten & tens) | (nearest & ~tens);
    /* as nine digits (digits is below 2^28: s is below 10 2^24) */
    int count = digit_count(digits);
    *point = sc->k + count; /* digits before the decimal point */
    return digits * SCALE_TO_NINE[count];
}


/* x < 10^8 as eight digits (values 0..9, not yet characters), the first in the lowest byte, so
   that one 8-byte store writes them in order: four digits to a 32-bit lane, then two to a
   16-bit one, then one to a byte, with one multiply per step (x * 10486 >> 20 is x / 100 below
   10^4, x * 103 >> 10 is x / 10 below 100). Built in a register: digits stored one by one and
   read back as a word would stall the store forwarding (~20% of the time, measured). */
static inline uint64_t eight_digits(uint32_t first4, uint32_t last4) {
    uint64_t v = (uint64_t)first4 | ((uint64_t)last4 << 32);
    uint64_t t = ((v * 10486) >> 20) & UINT64_C(0x0000007F0000007F);
    v = t | ((v - 100 * t) << 16);
    t = ((v * 103) >> 10) & UINT64_C(0x000F000F000F000F);
    return t | ((v - 10 * t) << 8);
}

#define MAX_NUMBER 17 /* "-0.00000123456789" */
#define OVERHANG 24   /* bytes a number's writing may store past its end (8-byte stores) */
#define ZEROS8 UINT64_C(0x3030303030303030)

static inline void store8(char *p, uint64_t word) { memcpy(p, &word, 8); }

#define SPECIAL 1000 /* a point that marks 0, NaN and the infinities */

/* decimal_of's rare cases: a power of two (its interval is narrower below it), and the values
   written as tokens. */
static __attribute__((noinline)) uint32_t rare_decimal_of(uint32_t bits, int *point) {
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude == 0 || magnitude >= 0x7F800000u) {
        *point = SPECIAL;
        return 0;
    }
    const scale *sc = &IRREGULAR[magnitude >> 23];
    return shortest(sc->hidden, sc, point);
}

/* The shortest decimal of a float32's magnitude, as shortest() gives it; *point SPECIAL for a
   zero, NaN or infinity. */
static inline uint32_t decimal_of(uint32_t bits, int *point) {
    uint32_t magnitude = bits & 0x7FFFFFFFu, fraction = bits & 0x7FFFFFu;
    if (__builtin_expect(fraction == 0 || magnitude >= 0x7F800000u, 0)) {
        return rare_decimal_of(bits, point);
    }
    const scale *sc = &REGULAR[magnitude >> 23];
    return shortest(fraction | sc->hidden, sc, point);
}

static inline char *write_special(char *p, uint32_t bits) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) { /* NaN, whatever its sign */
        memcpy(p, "NaN", 3);
        return p + 3;
    }
    *p = '-';
    p += bits >> 31;
    if (bits & 0x7F800000u) {
        memcpy(p, "Infinity", 8);
        return p + 8;
    }
    memcpy(p, "0.0", 3);
    return p + 3;
}

/* A decimal's digits as text: the first, and the next eight in a word (with the trailing
   zeros), n of them in all without those. */
typedef struct {
    uint64_t rest;
    uint32_t lead, n;
} digits_text;

static inline digits_text text_of(uint32_t nine) {
    uint32_t high = nine / 10000; /* the first five digits, split again alongside the last four */
    uint64_t rest = eight_digits(high % 10000, nine % 10000);
    /* n: 1 + the bytes of rest up to its last digit not 0, from the bit length of rest (each
       digit is below 16: 2 rest + 1 has one bit more, and is 1 when rest is 0) */
    int length = 63 - __builtin_clzll(2 * rest + 1);
    digits_text text = {rest + ZEROS8, '0' + high / 10000, (uint32_t)(length + 15) >> 3};
    return text;
}

/* Where write_decimal puts a text's parts, by the decimal point's place (-5 to 8) when the
   point falls among the digits or before them ("0.000ddd", "d.ddd", "dd.ddd"): the first digit,
   the point, the digits after it (again rest, shifted), and the text's length past its n
   digits. Looked up: computed with masks (no branch, the point falls before or after the
   first digit about as often), they were ~15 instructions a value. With this table and
   write_wide's one comparison: 170 -> 154 instructions a value (callgrind), 262,144 normal
   values ~3% faster (alternated in process). */
typedef struct {
    uint8_t start, dot, tail, shift, advance;
} placing;
#define PLACING_MIN (-5)
static placing PLACING[14];

static void fill_placings(void) {
    for (int point = PLACING_MIN; point <= 8; point++) {
        placing *at = &PLACING[point - PLACING_MIN];
        if (point <= 0) { /* "0." and -point zeros, then the digits */
            at->start = (uint8_t)(2 - point);
            at->dot = 1;
            at->tail = (uint8_t)(3 - point); /* rest again, where it is already */
            at->shift = 0;
            at->advance = (uint8_t)(2 - point);
        } else { /* point digits, ".", the others */
            at->start = 0;
            at->dot = (uint8_t)point;
            at->tail = (uint8_t)(point + 1);
            at->shift = (uint8_t)(8 * (point - 1));
            at->advance = 1;
        }
    }
}

/* write_decimal's text when the point falls outside -5..8: d.ddde+XX (a token when SPECIAL),
   ddd000.0 or ddddddddd.d. */
static inline char *write_wide(char *p, uint32_t bits, digits_text text, int point) {
    char lead = (char)text.lead;
    uint64_t rest = text.rest;
    int n = (int)text.n;
    if (point > 13 || point < -5) { /* d.ddde+XX, or a token */
        if (point == SPECIAL) return write_special(p, bits);
        *p = '-';
        p += bits >> 31;
        p[0] = lead;
        p[1] = '.';
        store8(p + 2, rest);
        p += n + (n > 1); /* no point after a lone digit */
        int e = point - 1;
        memcpy(p, e < 0 ? "e-" : "e+", 2);
        e = e < 0 ? -e : e;
        p[2] = (char)('0' + e / 10);
        p[3] = (char)('0' + e % 10);
        p[2] = e < 10 ? p[3] : p[2];
        return p + 3 + (e >= 10);
    }
    *p = '-';
    p += bits >> 31;
    p[0] = lead; /* ddd000.0, or ddddddddd.d: not worth avoiding the branches */
    store8(p + 1, rest);
    if (point >= n) {
        store8(p + 9, ZEROS8);
        memcpy(p + point, ".0", 2);
        return p + point + 2;
    }
    p[point] = '.';
    store8(p + point + 1, rest >> (8 * (point - 1)));
    return p + n + 1;
}

/* The text of a float32 (bits) at p, from its shortest decimal (room for MAX_NUMBER +
   OVERHANG bytes): past its text. */
static inline char *write_decimal(char *p, uint32_t bits, digits_text text, int point) {
    char lead = (char)text.lead;
    uint64_t rest = text.rest;
    int n = (int)text.n;
    /* the point outside -5..8: one comparison (three, ~3 instructions a value more) */
    if (__builtin_expect((unsigned)(point - PLACING_MIN) > (unsigned)(8 - PLACING_MIN), 0)) {
        return write_wide(p, bits, text, point);
    }
    *p = '-';
    p += bits >> 31;
    /* 0.000ddd, d.ddd or dd.ddd: the same stores, their places looked up (PLACING) rather than
       branched on, as the point falls before or after the first digit about as often on
       normal values (a mispredicted branch costs ~15 cycles) */
    if (point >= n) { /* ddd.0 */
        p[0] = lead;
        store8(p + 1, rest);
        memcpy(p + point, ".0", 2);
        return p + point + 2;
    }
    const placing *at = &PLACING[point - PLACING_MIN];
    store8(p, UINT64_C(0x0030303030302E30)); /* "0.00000" and a byte more */
    p[at->start] = lead;
    store8(p + at->start + 1, rest);
    p[at->dot] = '.';
    store8(p + at->tail, rest >> at->shift);
    return p + n + at->advance;
}

/* Values are written a block at a time, in two passes: every value's decimal, then its digits
   as text, put in place. The decimal is a long chain of dependent multiplies, and each text's
   place depends on the length of the one before it: done one value at a time, the processor
   could not overlap a value's chain with the next one's, and it took ~1.4x as long (2,000
   normal float32 values, in cache). The decimal and its text were one pass until that chain
   was seen to be the limit (~110 instructions a value, too many for the processor to run more
   than two or three values' chains at once): split, 262,144 values took ~14.9 -> ~13.6 ns a
   value. The text was a pass of its own after that, its digits kept in an array: made where
   they are put in place, 154 -> 143 instructions a value (callgrind), ~3% less time
   (alternated in process). */
#define BLOCK 64

/* Built twice (per_processor.h): the v3 build writes 262,144 normal float32 values in ~12.8 ns
   a value against ~13.6 (alternated, in process). */
#include "per_processor.h"

/* The values of a C-contiguous array of the given shape, as nested JSON lists, at p. */
BUILT_PER_PROCESSOR
static char *write_array(char *p, const char *values, const Py_ssize_t *shape, int ndim) {
    Py_ssize_t index[64] = {0}; /* per dimension: the position in the list being written */
    int depth = 0;
    *p++ = '[';
    for (;;) {
        if (index[depth] == shape[depth]) { /* this list is done */
            *p++ = ']';
            if (depth == 0) return p;
            index[depth] = 0;
            index[--depth]++;
            continue;
        }
        if (index[depth]) *p++ = ',';
        if (depth + 1 < ndim) {
            *p++ = '[';
            depth++;
            continue;
        }
        Py_ssize_t n = shape[depth];
        for (Py_ssize_t i = 0; i < n; i += BLOCK) { /* the innermost list, a block at a time */
            int m = n - i < BLOCK ? (int)(n - i) : BLOCK;
            uint32_t bits[BLOCK], nine[BLOCK];
            int point[BLOCK];
            memcpy(bits, values, 4 * (size_t)m);
            values += 4 * m;
            for (int j = 0; j < m; j++) nine[j] = decimal_of(bits[j], &point[j]);
            for (int j = 0; j < m; j++) {
                p = write_decimal(p, bits[j], text_of(nine[j]), point[j]);
                *p++ = ',';
            }
        }
        p -= n > 0; /* the last comma */
        index[depth] = n;
    }
}

/* Room for the text of an array of this shape: -1 (with an exception set) when it is beyond
   what a bytes object can hold. */
static Py_ssize_t room_for(const Py_buffer *view) {
    Py_ssize_t lists = 1, count = view->len / 4, room = OVERHANG;
    for (int d = 0; d < view->ndim; d++) {
        room += 3 * lists; /* their brackets, and a comma after each */
        if (view->shape[d] > 0 && lists > PY_SSIZE_T_MAX / 16 / view->shape[d]) {
            PyErr_NoMemory();
            return -1;
        }
        lists *= view->shape[d];
    }
    if (count > PY_SSIZE_T_MAX / 2 / (MAX_NUMBER + 1) - room) {
        PyErr_NoMemory();
        return -1;
    }
    return room + count * (MAX_NUMBER + 1);
}

/* write(array, prefix=b"", suffix=b""): prefix, the array's text and suffix, in one bytes
   object (no copy of the text to put it inside a document). */
static PyObject *json_floats_write(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "write() takes an array, and a prefix and a suffix");
        return NULL;
    }
    Py_buffer view, prefix = {0}, suffix = {0};
    if (PyObject_GetBuffer(args[0], &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    PyObject *text = NULL;
    /* "=f": numpy's format for a native float32 array that is not aligned (a binary tensor at
       an odd offset of a request body); the values are read with memcpy, so that is fine. */
    if (view.itemsize != 4 || view.format == NULL ||
        (strcmp(view.format, "f") != 0 && strcmp(view.format, "=f") != 0) || view.ndim < 1 ||
        view.ndim > 64) {
        PyErr_SetString(PyExc_TypeError, "write() takes a float32 array of 1 to 64 dimensions");
        goto done;
    }
    if ((nargs > 1 && PyObject_GetBuffer(args[1], &prefix, PyBUF_SIMPLE) < 0) ||
        (nargs > 2 && PyObject_GetBuffer(args[2], &suffix, PyBUF_SIMPLE) < 0)) {
        goto done;
    }
    Py_ssize_t room = room_for(&view);
    if (room < 0) goto done;
    if (prefix.len > PY_SSIZE_T_MAX / 4 - room || suffix.len > PY_SSIZE_T_MAX / 4 - room) {
        PyErr_NoMemory();
        goto done;
    }
    text = PyBytes_FromStringAndSize(NULL, prefix.len + room + suffix.len);
    if (text == NULL) goto done;
    char *begin = PyBytes_AS_STRING(text);
    if (prefix.len) memcpy(begin, prefix.buf, (size_t)prefix.len);
    char *end = write_array(begin + prefix.len, (const char *)view.buf, view.shape, view.ndim);
    if (suffix.len) memcpy(end, suffix.buf, (size_t)suffix.len);
    _PyBytes_Resize(&text, end + suffix.len - begin); /* on failure: text is NULL, an error set */
done:
    PyBuffer_Release(&view);
    if (prefix.obj) PyBuffer_Release(&prefix);
    if (suffix.obj) PyBuffer_Release(&suffix);
    return text;
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))json_floats_write, METH_FASTCALL,
     "write(array, prefix=b'', suffix=b'') -> bytes: a float32 array as JSON lists (each value "
     "its shortest decimal; NaN, Infinity, -Infinity as those tokens) between prefix and "
     "suffix."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "json_floats", "Float32 arrays written as JSON text.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_json_floats(void) {
    fill_scales();
    fill_digit_counts();
    fill_placings();
    return PyModule_Create(&module_def);
}
