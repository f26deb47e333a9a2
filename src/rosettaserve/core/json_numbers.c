/* A flat JSON array of numbers read straight into machine numbers (json_bulk's first reader).

   read(text) -> (buffer, is_float) | None

   ``text`` (any bytes-like object) must be exactly one JSON array of numbers, with optional
   blanks: "[1, -2.5e3, 0]". The buffer holds one int64 per number when every number is an
   integer (no fraction, no exponent) within int64, else one float64 per number, exact: each is
   read only where Clinger's fast path gives the correctly rounded double (at most 2^53 in its
   digits, a power of ten up to 10^22 either way), which covers float32 values as clients write
   them ("-0.95217013"). None means "not this reader's case": anything that is not such an array
   (nesting, strings, booleans, null, malformed JSON), an integer beyond int64 in an integer
   array, or a number beyond the fast path (17 significant digits, as a float64's shortest repr
   often has). json_bulk then gives the text to simdjson, and when that declines too, to the
   ordinary reader, which reports malformed input. Built by scripts/compile_native.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Powers of ten that double holds exactly: the range of the fast path. */
static const double EXACT_POW10[] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
#define MAX_EXACT_POW10 22
#define MAX_EXACT_MANTISSA (UINT64_C(1) << 53)
#define MAX_SIGNIFICANT 19   /* decimal digits that always fit in uint64 */

typedef enum { NUMBER_INT, NUMBER_FLOAT, NUMBER_BAD } number_kind;

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
    UINT64_C(100000000),
};

#define ONES UINT64_C(0x0101010101010101)

/* The digits at p, up to 8 of them, read as one number (SWAR: eight bytes at a time, no branch
   per digit): how many there were (8: maybe more follow), their value in *value. */
static inline int digit_run(const unsigned char *p, const unsigned char *end, uint64_t *value) {
    if (end - p < 8) { /* near the end of the text: one byte at a time */
        int n = 0;
        uint64_t v = 0;
        for (; p < end && n < 8 && is_digit(*p); p++, n++) v = v * 10 + (uint64_t)(*p - '0');
        *value = v;
        return n;
    }
    uint64_t word;
    memcpy(&word, p, 8); /* the first character in the lowest byte (little-endian) */
    /* a byte is a digit when its high nibble is 3 and adding 6 keeps it so (0x30..0x39) */
    uint64_t other = ((word & (ONES * 0xF0)) ^ (ONES * 0x30)) |
                     (((word + ONES * 0x06) & (ONES * 0xF0)) ^ (ONES * 0x30));
    /* the first non-digit's byte; 8 when there is none (no branch: it is hard to predict) */
    int n = (__builtin_ctzll(other | (UINT64_C(1) << 63)) + (other == 0)) / 8;
    if (n == 0) {
        *value = 0;
        return 0;
    }
    uint64_t digits = word - ONES * 0x30;
    /* the n digits moved up, zeros first (no branch on n: it varies from number to number) */
    int shift = 8 * (8 - n);
    digits = (digits & (~UINT64_C(0) >> shift)) << shift;
    /* pairs, then fours, then all eight, each step one multiply per pair of lanes */
    digits = digits * 10 + (digits >> 8);
    digits = (((digits & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32))) +
              (((digits >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32)))) >>
             32;
    *value = (uint32_t)digits;
    return n;
}

/* The digits at *pp appended to *mantissa; returns how many (*pp moves past them). Beyond
   MAX_SIGNIFICANT digits in all, *mantissa stops changing and *inexact is set. */
static inline int64_t read_digits(const unsigned char **pp, const unsigned char *end,
                                  uint64_t *mantissa, int *significant, int *inexact) {
    const unsigned char *p = *pp;
    int64_t total = 0;
    for (;;) {
        uint64_t chunk;
        int n = digit_run(p, end, &chunk);
        if (!*inexact && *significant + n <= MAX_SIGNIFICANT) {
            *mantissa = *mantissa * POW10_U64[n] + chunk;
            *significant += n;
        } else if (n) {
            *inexact = 1;
        }
        p += n;
        total += n;
        if (n < 8) break;
    }
    *pp = p;
    return total;
}

/* One JSON number starting at *pp. Integers (no fraction or exponent) within int64 come back in
   *as_int with NUMBER_INT; when want_float is set, every number comes back in *as_float with
   NUMBER_FLOAT. NUMBER_BAD: not a JSON number, or out of range. *pp moves past the number. */
static number_kind read_number(const unsigned char **pp, const unsigned char *end, int want_float,
                               int64_t *as_int, double *as_float) {
    const unsigned char *p = *pp;
    int negative = p < end && *p == '-';
    p += negative;
    uint64_t mantissa = 0;
    int significant = 0; /* digits held in mantissa (leading zeros of a fraction included) */
    int inexact = 0;     /* digits beyond MAX_SIGNIFICANT: not this reader's case */
    int64_t exponent = 0;
    if (p < end && *p == '0') {
        p++;
        if (p < end && is_digit(*p)) return NUMBER_BAD; /* JSON has no leading zeros */
    } else {
        if (read_digits(&p, end, &mantissa, &significant, &inexact) == 0) return NUMBER_BAD;
    }
    int integral = 1;
    if (p < end && *p == '.') {
        integral = 0;
        p++;
        int before = significant;
        int64_t digits = read_digits(&p, end, &mantissa, &significant, &inexact);
        if (digits == 0) return NUMBER_BAD;
        exponent -= significant - before;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integral = 0;
        p++;
        int exponent_negative = 0;
        if (p < end && (*p == '+' || *p == '-')) exponent_negative = *p++ == '-';
        if (p >= end || !is_digit(*p)) return NUMBER_BAD;
        int64_t written = 0;
        for (; p < end && is_digit(*p); p++) {
            if (written < 100000) written = written * 10 + (*p - '0'); /* far beyond any double */
        }
        exponent += exponent_negative ? -written : written;
    }
    *pp = p;
    if (integral && !want_float) {
        uint64_t limit = negative ? UINT64_C(9223372036854775808) : UINT64_C(9223372036854775807);
        if (inexact || mantissa > limit) return NUMBER_BAD;
        *as_int = negative ? (int64_t)(0 - mantissa) : (int64_t)mantissa;
        return NUMBER_INT;
    }
    if (!want_float) return NUMBER_FLOAT; /* the caller starts again, reading floats */
    if (inexact || mantissa > MAX_EXACT_MANTISSA || exponent < -MAX_EXACT_POW10 ||
        exponent > MAX_EXACT_POW10) {
        return NUMBER_BAD; /* beyond the exact fast path: simdjson reads the array */
    }
    /* both operands exact: IEEE multiplication and division round correctly */
    double value = exponent >= 0 ? (double)mantissa * EXACT_POW10[exponent]
                                 : (double)mantissa / EXACT_POW10[-exponent];
    *as_float = negative && !(integral && mantissa == 0) ? -value : value; /* "-0" is +0.0 */
    return NUMBER_FLOAT;
}

/* The common number, read without read_number's bookkeeping: -?digits(.digits)? with at most 7
   integer and 8 fraction digits (a float32 as clients write it). 1 when read (*pp moves past
   it); 0 when read_number must read it (nothing has been consumed then). */
static inline int read_short_number(const unsigned char **pp, const unsigned char *end,
                                    int want_float, char *out) {
    const unsigned char *p = *pp;
    int negative = *p == '-';
    p += negative;
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
        n_fraction = digit_run(p + 1, end, &fraction);
        /* a ninth digit? tested without a branch on n_fraction (7 or 8 as often as not) */
        int room = p + 9 < end;
        int more = (n_fraction == 8) & room & is_digit(p[9 * room]);
        if ((n_fraction == 0) | more) return 0;
        p += 1 + n_fraction;
    }
    if (p < end && (*p == 'e' || *p == 'E')) return 0;
    if (want_float) {
        /* under 10^15 < 2^53 and an exact power of ten: the division rounds correctly */
        double value = (double)(whole * POW10_U64[n_fraction] + fraction) / EXACT_POW10[n_fraction];
        uint64_t bits;
        memcpy(&bits, &value, 8);
        /* the sign, without a branch on it; "-0" is the integer 0, which widens to +0.0 (as
           every other reader has it), "-0.0" is -0.0 */
        bits |= (uint64_t)(negative & ((n_fraction != 0) | (whole != 0))) << 63;
        memcpy(out, &bits, 8);
    } else {
        uint64_t bits = (whole ^ (0 - (uint64_t)negative)) + (uint64_t)negative; /* -whole */
        memcpy(out, &bits, 8);
    }
    *pp = p;
    return 1;
}

/* Read the array into out (room for capacity numbers): how many numbers, -1 when it is not a
   flat array of numbers, -2 when a float turned up while reading integers. */
static Py_ssize_t read_array(const unsigned char *p, const unsigned char *end, int want_float,
                             char *out, Py_ssize_t capacity) {
    p = skip_blanks(p, end);
    if (p >= end || *p != '[') return -1;
    p = skip_blanks(p + 1, end);
    Py_ssize_t count = 0;
    for (;;) {
        if (count >= capacity || p >= end) return -1;
        if (!read_short_number(&p, end, want_float, out + count * 8)) {
            int64_t as_int = 0;
            double as_float = 0.0;
            number_kind kind = read_number(&p, end, want_float, &as_int, &as_float);
            if (kind == NUMBER_BAD) return -1;
            if (kind == NUMBER_FLOAT && !want_float) return -2;
            if (want_float)
                memcpy(out + count * 8, &as_float, 8);
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
    return skip_blanks(p + 1, end) == end ? count : -1;
}

static PyObject *json_numbers_read(PyObject *module, PyObject *arg) {
    (void)module;
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
    int want_float = 0;
    Py_ssize_t count = read_array(begin, end, 0, PyByteArray_AS_STRING(values), capacity);
    if (count == -2) {
        want_float = 1;
        count = read_array(begin, end, 1, PyByteArray_AS_STRING(values), capacity);
    }
    PyBuffer_Release(&text);
    if (count < 0) {
        Py_DECREF(values);
        Py_RETURN_NONE;
    }
    if (PyByteArray_Resize(values, count * 8) < 0) { /* shrinking: the allocator keeps it in place */
        Py_DECREF(values);
        return NULL;
    }
    return Py_BuildValue("(NO)", values, want_float ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"read", json_numbers_read, METH_O,
     "read(text) -> (buffer, is_float) | None: a flat JSON array of numbers as int64 or float64 "
     "values, or None when the text is not one this reader takes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "json_numbers", "Flat JSON arrays of numbers read in bulk.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_json_numbers(void) { return PyModule_Create(&module_def); }
