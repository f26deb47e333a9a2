/* A flat JSON array of numbers read straight into machine numbers (json_bulk's first reader).

   read(text) -> (buffer, is_float) | None
   read_single(text) -> (buffer, code) | None: as read, floats as float32 (code "f", "d", "q")
   find(body, key, min_array) -> [(start, end), ...]: json_bulk.find_arrays's search (below)

   ``text`` (any bytes-like object) must be exactly one JSON array of numbers, with optional
   blanks: "[1, -2.5e3, 0]". The buffer holds one int64 per number when every number is an
   integer (no fraction, no exponent) within int64, else one float64 per number: the correctly
   rounded double, bit for bit what Python's float() reads from the number's text (an integer
   "-0" among floats is +0.0, as every JSON reader has it). A decimal of up to 19 significant
   digits is read by Clinger's exact fast path where it applies (up to 2^53 in its digits, a
   power of ten up to 10^22 either way: float32 values as clients write them, "-0.95217013"),
   else by the Eisel-Lemire method (its 128-bit powers of five are json_numbers_pow5.h, written
   by scripts/gen_pow5_table.py), which is exact for every such decimal: the 17 digits of a
   float64's shortest repr ("0.12345678901234568", float32 values widened by Python clients).
   Longer decimals are read from their first 19 digits when those decide the rounding, else by
   Python's own reader (PyOS_string_to_double, what float() calls): json_numbers_decimal.h.
   None means "not this reader's case": anything that is not such an array (nesting, strings,
   booleans, null, malformed JSON), an integer beyond int64 in an integer array, or a number
   beyond float64's range (1e400). read_single: an array with a float in it comes back as
   float32: each number's correctly rounded double rounded to float32 (round to nearest, even on
   a tie: what numpy's cast of the float64 array does, the same two roundings), unless a finite
   double becomes an infinity there (1e39): then as float64, for the caller's range error.
   json_bulk then gives the text to simdjson, and when that
   declines too, to the ordinary reader, which reports malformed input. Built by
   scripts/compile_native.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "json_numbers_pow5.h"

/* Powers of ten that double holds exactly: the range of the fast path. */
static const double EXACT_POW10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
#define MAX_EXACT_POW10 22
static const double SIGNS[2] = {1.0, -1.0}; /* exact factors: 0.0 * -1.0 is -0.0 */
#define MAX_EXACT_MANTISSA (UINT64_C(1) << 53)
#define MAX_SIGNIFICANT 19 /* decimal digits that always fit in uint64 */
#define MAX_SLOW_TEXT 1100 /* a number's characters read by Python's reader, at most */

/* NUMBER_WIDE: an integer beyond int64 (its array is read as floats if a float turns up) */
typedef enum { NUMBER_INT, NUMBER_FLOAT, NUMBER_WIDE, NUMBER_BAD } number_kind;

static inline int is_blank(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static inline int is_digit(unsigned char c) { return (unsigned char)(c - '0') <= 9; }

static inline const unsigned char *skip_blanks(const unsigned char *p, const unsigned char *end) {
    while (p < end && is_blank(*p)) p++;
    return p;
}

static const uint64_t POW10_U64[] = {
    UINT64_C(1),          UINT64_C(10),          UINT64_C(100),          UINT64_C(1000),
    UINT64_C(10000),      UINT64_C(100000),      UINT64_C(1000000),      UINT64_C(10000000),
    UINT64_C(100000000),  UINT64_C(1000000000),  UINT64_C(10000000000),
    UINT64_C(100000000000), UINT64_C(1000000000000), UINT64_C(10000000000000),
    UINT64_C(100000000000000), UINT64_C(1000000000000000), UINT64_C(10000000000000000),
    UINT64_C(100000000000000000), UINT64_C(1000000000000000000),
    UINT64_C(10000000000000000000),
};

#define ONES UINT64_C(0x0101010101010101)

/* How many of the 8 bytes of word are digits before the first that is not (8: all of them),
   the first byte the lowest (little-endian). A byte is a digit when its high nibble is 3 and
   adding 6 keeps it so (0x30..0x39); no branch: the count is hard to predict. */
static inline int leading_digits(uint64_t word) {
    uint64_t other = ((word & (ONES * 0xF0)) ^ (ONES * 0x30)) |
                     (((word + ONES * 0x06) & (ONES * 0xF0)) ^ (ONES * 0x30));
    return (__builtin_ctzll(other | (UINT64_C(1) << 63)) + (other == 0)) / 8;
}

/* The first n (1 to 8) bytes of word, all digits, as one number (SWAR): the n digits moved up,
   zeros first (no branch on n: it varies from number to number), then pairs, fours and all
   eight, each step one multiply per pair of lanes. */
static inline uint64_t swar_value(uint64_t word, int n) {
    uint64_t digits = word - ONES * 0x30;
    int shift = 8 * (8 - n);
    digits = (digits & (~UINT64_C(0) >> shift)) << shift;
    digits = digits * 10 + (digits >> 8);
    digits = (((digits & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32))) +
              (((digits >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32)))) >>
             32;
    return (uint32_t)digits;
}

/* The digits at p, up to 8 of them, read as one number (eight bytes at a time, no branch per
   digit): how many there were (8: maybe more follow), their value in *value. */
static inline int digit_run(const unsigned char *p, const unsigned char *end, uint64_t *value) {
    if (end - p < 8) { /* near the end of the text: one byte at a time */
        int n = 0;
        uint64_t v = 0;
        for (; p < end && n < 8 && is_digit(*p); p++, n++) v = v * 10 + (uint64_t)(*p - '0');
        *value = v;
        return n;
    }
    uint64_t word;
    memcpy(&word, p, 8);
    int n = leading_digits(word);
    *value = n ? swar_value(word, n) : 0;
    return n;
}

/* Whether the 8 bytes at p are all digits, and their value (fast_float's SWAR; cheaper than
   digit_run where 8 digits are the rule: the middle of a 17-digit fraction). */
static inline int eight_digits(const unsigned char *p, uint64_t *value) {
    uint64_t word;
    memcpy(&word, p, 8);
    if (((word + ONES * 0x46) | (word - ONES * 0x30)) & (ONES * 0x80)) return 0;
    word = ((word & (ONES * 0x0F)) * 2561) >> 8;
    word = ((word & UINT64_C(0x00FF00FF00FF00FF)) * 6553601) >> 16;
    *value = (uint32_t)(((word & UINT64_C(0x0000FFFF0000FFFF)) * UINT64_C(42949672960001)) >> 32);
    return 1;
}

/* The digits at *pp appended to *mantissa (mod 2^64: exact while there are at most
   MAX_SIGNIFICANT in all); returns how many (*pp moves past them). */
static inline int64_t read_digits(const unsigned char **pp, const unsigned char *end,
                                  uint64_t *mantissa) {
    const unsigned char *p = *pp;
    int64_t total = 0;
    for (;;) {
        uint64_t chunk;
        int n = digit_run(p, end, &chunk);
        *mantissa = *mantissa * POW10_U64[n] + chunk;
        p += n;
        total += n;
        if (n < 8) break;
    }
    *pp = p;
    return total;
}

#include "json_numbers_decimal.h" /* eisel_lemire, read_long_decimal */

/* One JSON number starting at *pp. Integers (no fraction or exponent) within int64 come back in
   *as_int with NUMBER_INT; when want_float is set, every number comes back in *as_float with
   NUMBER_FLOAT; NUMBER_WIDE (only when it is not): an integer beyond int64. NUMBER_BAD: not a
   JSON number, or beyond float64. *pp moves past the number. */
static number_kind read_number(const unsigned char **pp, const unsigned char *end, int want_float,
                               int64_t *as_int, double *as_float) {
    const unsigned char *p = *pp;
    int negative = p < end && *p == '-';
    p += negative;
    const unsigned char *digits_begin = p;
    uint64_t mantissa = 0; /* the digits, exact while there are at most MAX_SIGNIFICANT */
    int64_t digits;
    if (p < end && *p == '0') {
        p++;
        digits = 1;
        if (p < end && is_digit(*p)) return NUMBER_BAD; /* JSON has no leading zeros */
    } else {
        digits = read_digits(&p, end, &mantissa);
        if (digits == 0) return NUMBER_BAD;
    }
    int integral = 1;
    int64_t exponent = 0;
    if (p < end && *p == '.') {
        integral = 0;
        p++;
        int64_t fraction = read_digits(&p, end, &mantissa);
        if (fraction == 0) return NUMBER_BAD;
        digits += fraction;
        exponent = -fraction;
    }
    const unsigned char *digits_end = p;
    int64_t written = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        int exponent_negative = 0;
        if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
        if (p >= end || !is_digit(*p)) return NUMBER_BAD;
        for (; p < end && is_digit(*p); p++) {
            if (written < 100000) written = written * 10 + (*p - '0'); /* far beyond any double */
        }
        /* held at 100000: with few digits that is 0.0 or infinity, with many not known */
        if (written >= 100000 && digits > MAX_SIGNIFICANT) return NUMBER_BAD;
        if (exponent_negative) written = -written;
    }
    *pp = p;
    if (integral && !want_float) {
        uint64_t limit = negative ? UINT64_C(9223372036854775808) : UINT64_C(9223372036854775807);
        if (digits > MAX_SIGNIFICANT || mantissa > limit) return NUMBER_WIDE;
        *as_int = negative ? (int64_t)(0 - mantissa) : (int64_t)mantissa;
        return NUMBER_INT;
    }
    if (!want_float) return NUMBER_FLOAT; /* the caller starts again, reading floats */
    exponent += written;
    double value;
    if (digits <= MAX_SIGNIFICANT && mantissa <= MAX_EXACT_MANTISSA &&
        exponent >= -MAX_EXACT_POW10 && exponent <= MAX_EXACT_POW10) {
        /* both operands exact: IEEE multiplication and division round correctly */
        value = exponent >= 0 ? (double)mantissa * EXACT_POW10[exponent]
                              : (double)mantissa / EXACT_POW10[-exponent];
    } else {
        uint64_t bits;
        int read = digits <= MAX_SIGNIFICANT
                       ? eisel_lemire(mantissa, exponent, &bits)
                       : read_long_decimal(digits_begin, digits_end, p, written, &bits);
        if (!read) return NUMBER_BAD; /* beyond float64 */
        memcpy(&value, &bits, 8);
    }
    *as_float = negative && !(integral && mantissa == 0 && digits == 1) ? -value : value;
    return NUMBER_FLOAT; /* "-0" is +0.0 */
}

/* Number i of a float array into out: a double, or with single a float32 (the cast rounds to
   nearest, as numpy's does). *largest: the largest magnitude so far (an infinity: a finite
   double became one), kept in a float register (andps, maxss). Reading a 1 MiB FP32 request's
   262,144 float32 texts this way, instead of as doubles then numpy's cast: 14.3-14.8 -> 12.8-13.0
   ns a number (alternated in process, medians of 40), although ~5.5 more instructions a number
   (callgrind; the cast took ~2.5): half the bytes written, no second pass. */
static inline __attribute__((always_inline)) void put_float(char *out, Py_ssize_t i, double value,
                                                            int single, float *largest) {
    if (single) {
        float narrow = (float)value;
        float magnitude = fabsf(narrow);
        *largest = magnitude > *largest ? magnitude : *largest;
        memcpy(out + i * 4, &narrow, 4);
    } else {
        memcpy(out + i * 8, &value, 8);
    }
}

/* The common number, read without read_number's bookkeeping: -?digits(.digits)? with at most 7
   integer digits, and a fraction of 1-8 digits (a float32 as clients write it, Clinger's exact
   fast path) or, with doubles set, of 8 or more, up to MAX_SIGNIFICANT digits in all (a float32
   widened to a double by a Python client: 16-17 digits, Eisel-Lemire). 1 when read (*pp moves
   past it); 0 when read_number must read it (nothing has been consumed then). doubles is a
   constant in each of read_array's two copies: reading both kinds in one, the branch on the
   fraction's length (7 or 8 digits as often as not in float32 texts) cost the 1 MiB FP32 case
   ~1.5 ns a number. */
static inline __attribute__((always_inline)) int read_short_number(const unsigned char **pp,
                                                                   const unsigned char *end,
                                                                   int want_float, int doubles,
                                                                   int single, char *out,
                                                                   Py_ssize_t i, float *over) {
    const unsigned char *p = *pp;
    int negative = *p == '-';
    p += negative;
    if (want_float && !doubles && end - p >= 16 && is_digit(p[0]) && p[1] == '.') {
        /* d.ddddddd, as most float32 values are written (95% of the 1 MiB body's texts): one
           integer digit, 16 bytes of text left, so no check of the end at each step. The sign
           is a factor: OR-ed into the double's bits, as below, the value went to the integer
           registers and back, and this path took 18.7 ns a number against 12.2 for the general
           one; as a branch, 12.2 against 12.7; as a factor, 11.1 against 12.3 (1 MiB of
           float32 texts read 40 times, alternated in process; bench/RESULTS.md). */
        uint64_t word;
        memcpy(&word, p + 2, 8);
        int n = leading_digits(word);
        /* none, more than 8 (p + 10 is in the text), or an exponent: read_number reads it */
        if ((n == 0) | ((n == 8) & is_digit(p[10])) | ((p[2 + n] | 0x20) == 'e')) return 0;
        double value = (double)((uint64_t)(p[0] - '0') * POW10_U64[n] + swar_value(word, n)) /
                       EXACT_POW10[n]; /* exact operands, under 2^53: rounds correctly */
        put_float(out, i, value * SIGNS[negative], single, over); /* "-0.0" is -0.0 */
        *pp = p + 2 + n;
        return 1;
    }
    uint64_t whole, fraction = 0;
    int n_whole;
    if (end - p >= 2 && is_digit(p[0]) && !is_digit(p[1])) { /* one digit: the usual case */
        whole = (uint64_t)(p[0] - '0');
        n_whole = 1;
    } else {
        n_whole = digit_run(p, end, &whole);
    }
    if (n_whole == 0 || n_whole == 8 || (n_whole > 1 && *p == '0')) return 0;
    p += n_whole;
    int n_fraction = 0;
    if (p < end && *p == '.') {
        if (!want_float) return 0; /* read_number tells the caller to start again */
        p++;
        if (doubles) {
            /* a double's 16-17 digits: eight at a time, the rest one by one */
            if (end - p < 16 || !eight_digits(p, &fraction)) return 0;
            n_fraction = 8;
            p += 8;
            uint64_t chunk;
            if (n_whole <= MAX_SIGNIFICANT - 16 && eight_digits(p, &chunk)) {
                fraction = fraction * 100000000 + chunk;
                n_fraction = 16;
                p += 8;
            }
            for (; p < end && is_digit(*p); p++, n_fraction++) {
                if (n_whole + n_fraction >= MAX_SIGNIFICANT) return 0;
                fraction = fraction * 10 + (uint64_t)(*p - '0');
            }
        } else {
            /* a float32's 7-8 digits, without a branch on how many (7 or 8 as often as not) */
            n_fraction = digit_run(p, end, &fraction);
            int room = end - p > 8;
            int more = (n_fraction == 8) & room & is_digit(p[8 * room]);
            if ((n_fraction == 0) | more) return 0;
            p += n_fraction;
        }
    }
    if (p < end && (*p | 0x20) == 'e') return 0; /* 'e' or 'E' */
    if (want_float) {
        uint64_t bits;
        if (n_fraction <= 8) {
            /* under 10^15 < 2^53 and an exact power of ten: the division rounds correctly */
            double value =
                (double)(whole * POW10_U64[n_fraction] + fraction) / EXACT_POW10[n_fraction];
            memcpy(&bits, &value, 8);
        } else if (!eisel_lemire(whole * POW10_U64[n_fraction] + fraction, -n_fraction, &bits)) {
            return 0;
        }
        /* the sign, without a branch on it; "-0" is the integer 0, which widens to +0.0 (as
           every other reader has it), "-0.0" is -0.0 */
        bits |= (uint64_t)(negative & (((uint64_t)n_fraction | whole) != 0)) << 63;
        double value;
        memcpy(&value, &bits, 8);
        put_float(out, i, value, single, over);
    } else {
        uint64_t bits = (whole ^ (0 - (uint64_t)negative)) + (uint64_t)negative; /* -whole */
        memcpy(out + i * 8, &bits, 8);
    }
    *pp = p;
    return 1;
}

/* Read the array into out (room for capacity numbers): how many numbers, -1 when it is not a
   flat array of numbers, -2 when a float turned up while reading integers, -3 when a value
   overflowed float32 (single). doubles: the short path takes long fractions (see
   read_short_number); single: floats written as float32 (see put_float). */
static inline __attribute__((always_inline)) Py_ssize_t read_array(const unsigned char *p,
                                                                   const unsigned char *end,
                                                                   int want_float, int doubles,
                                                                   int single, char *out,
                                                                   Py_ssize_t capacity) {
    p = skip_blanks(p, end);
    if (p >= end || *p != '[') return -1;
    p = skip_blanks(p + 1, end);
    Py_ssize_t count = 0;
    int wide = 0; /* an integer beyond int64 seen: no integer array */
    float over = 0.0f; /* the largest float32 magnitude (single) */
    for (;;) {
        if (count >= capacity || p >= end) return -1;
        if (!read_short_number(&p, end, want_float, doubles, single, out, count, &over)) {
            int64_t as_int = 0;
            double as_float = 0.0;
            number_kind kind = read_number(&p, end, want_float, &as_int, &as_float);
            if (kind == NUMBER_BAD) return -1;
            if (kind == NUMBER_FLOAT && !want_float) return -2;
            wide |= kind == NUMBER_WIDE;
            if (want_float)
                put_float(out, count, as_float, single, &over);
            else
                memcpy(out + count * 8, &as_int, 8);
        }
        count++;
        if (p < end && *p == ',') { /* the common case: no blanks */
            p++;
            if (p < end && is_blank(*p)) p = skip_blanks(p, end);
            continue;
        }
        p = skip_blanks(p, end);
        if (p >= end) return -1;
        if (*p == ']') break;
        if (*p != ',') return -1;
        p = skip_blanks(p + 1, end);
    }
    if (skip_blanks(p + 1, end) != end || wide) return -1;
    return isinf(over) ? -3 : count;
}

/* Whether the array's first number has more than 8 fraction digits (a double's repr, as Python
   clients write float32 values widened): which of read_array's copies reads the array. */
static int long_fraction_first(const unsigned char *p, const unsigned char *end) {
    p = skip_blanks(p, end);
    if (p < end && *p == '[') p = skip_blanks(p + 1, end);
    if (p < end && *p == '-') p++;
    while (p < end && is_digit(*p)) p++;
    if (p >= end || *p != '.') return 0;
    const unsigned char *fraction = ++p;
    while (p < end && is_digit(*p) && p - fraction <= 8) p++;
    return p - fraction > 8;
}

/* read_into (and the copies of read_array in it) built twice, as json_floats.c's writer is: for
   x86-64-v3 processors (BMI2's shifts by any register, for digit_run; no FMA is generated, and
   none could change a result: the reader's only floating-point steps are one multiplication or
   division and a cast) and for any x86-64, picked at load by glibc's ifunc. 1 MiB FP32 text
   read as float32: best 12.1-12.4 -> 11.8-11.9 ns a number, medians ~0.2 ns lower in 4 of 6
   (alternated in process, 40 of each, either one first); 17-digit texts 16.4 -> 16.0. */
#include "per_processor.h"

/* The array of text in values (room for capacity numbers of 8 bytes): how many numbers, or as
   read_array; *kind: 0 int64, 1 float64, 2 float32 (single, see read_array). */
BUILT_PER_PROCESSOR static Py_ssize_t read_into(const unsigned char *begin,
                                                const unsigned char *end, int single,
                                                char *values, Py_ssize_t capacity, int *kind) {
    *kind = 0;
    Py_ssize_t count = read_array(begin, end, 0, 0, 0, values, capacity);
    if (count != -2) return count;
    int doubles = long_fraction_first(begin, end);
    if (single) {
        *kind = 2;
        count = doubles ? read_array(begin, end, 1, 1, 1, values, capacity)
                        : read_array(begin, end, 1, 0, 1, values, capacity);
        if (count != -3) return count; /* else a float32 infinity: floats as they are */
    }
    *kind = 1;
    return doubles ? read_array(begin, end, 1, 1, 0, values, capacity)
                   : read_array(begin, end, 1, 0, 0, values, capacity);
}

static PyObject *read_text(PyObject *arg, int single, int as_code) {
    Py_buffer text;
    if (PyObject_GetBuffer(arg, &text, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *begin = (const unsigned char *)text.buf;
    const unsigned char *end = begin + text.len;
    Py_ssize_t capacity = (text.len + 1) / 2; /* a number takes a byte, and one more for a comma */
    PyObject *values = PyByteArray_FromStringAndSize(NULL, capacity * 8); /* not zeroed */
    if (values == NULL) {
        PyBuffer_Release(&text);
        return NULL;
    }
    int kind;
    Py_ssize_t count =
        read_into(begin, end, single, PyByteArray_AS_STRING(values), capacity, &kind);
    PyBuffer_Release(&text);
    if (count < 0) {
        Py_DECREF(values);
        Py_RETURN_NONE;
    }
    Py_ssize_t size = count * (kind == 2 ? 4 : 8);
    if (PyByteArray_Resize(values, size) < 0) { /* shrinking: the allocator keeps it in place */
        Py_DECREF(values);
        return NULL;
    }
    if (as_code) return Py_BuildValue("(Ns)", values, kind == 2 ? "f" : kind ? "d" : "q");
    return Py_BuildValue("(NO)", values, kind ? Py_True : Py_False);
}

static PyObject *json_numbers_read(PyObject *module, PyObject *arg) {
    (void)module;
    return read_text(arg, 0, 0);
}

static PyObject *json_numbers_read_single(PyObject *module, PyObject *arg) {
    (void)module;
    return read_text(arg, 1, 1);
}

#include "json_numbers_find.h" /* json_numbers_find */

static PyMethodDef methods[] = {
    {"read", json_numbers_read, METH_O,
     "read(text) -> (buffer, is_float) | None: a flat JSON array of numbers as int64 or float64 "
     "values, or None when the text is not one this reader takes."},
    {"read_single", json_numbers_read_single, METH_O,
     "read_single(text) -> (buffer, code) | None: as read, floats as float32 (code 'f'; 'd' "
     "when a finite value is beyond float32, 'q' for integers): numpy's cast of read's floats."},
    {"find", (PyCFunction)(void (*)(void))json_numbers_find, METH_FASTCALL,
     "find(body, key, min_array) -> [(start, end), ...]: json_bulk.find_arrays's spans."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "json_numbers", "Flat JSON arrays of numbers read in bulk.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_json_numbers(void) { return PyModule_Create(&module_def); }
