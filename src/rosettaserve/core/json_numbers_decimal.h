/* Decimal to double, exactly: json_numbers.c's reader for the numbers Clinger's fast path does
   not take. Included by json_numbers.c only (it uses MAX_SIGNIFICANT, MAX_SLOW_TEXT and the
   table of json_numbers_pow5.h, written by scripts/gen_pow5_table.py). */

/* w * 10^q (w up to MAX_SIGNIFICANT digits) as the correctly rounded double's bits, by the
   Eisel-Lemire method as fast_float has it (Lemire, "Number Parsing at a Gigabyte per Second",
   2021): w normalized times 5^q to 128 bits gives the mantissa and a rounding that is always
   right for such w (Mushtak and Lemire, "Fast Number Parsing Without Fallback", 2023). 0 when
   the value is beyond float64 (infinity): not this reader's case. */
static inline __attribute__((always_inline)) int eisel_lemire(uint64_t w, int64_t q,
                                                               uint64_t *bits) {
    if (w == 0 || q < SMALLEST_POWER_OF_FIVE) { /* below half the smallest subnormal */
        *bits = 0;
        return 1;
    }
    if (q > LARGEST_POWER_OF_FIVE) return 0;
    int lz = __builtin_clzll(w);
    w <<= lz;
    const uint64_t *power = &POWER_OF_FIVE_128[2 * (q - SMALLEST_POWER_OF_FIVE)];
    unsigned __int128 product = (unsigned __int128)w * power[0];
    uint64_t high = (uint64_t)(product >> 64), low = (uint64_t)product;
    if ((high & 0x1FF) == 0x1FF) { /* the 55 bits kept may change: the low word of 5^q too */
        uint64_t carry = (uint64_t)(((unsigned __int128)w * power[1]) >> 64);
        low += carry;
        high += carry > low;
    }
    int upper = (int)(high >> 63);
    int shift = upper + 64 - 52 - 3;
    uint64_t mantissa = high >> shift;
    /* floor(q * log2(10)) + 63, plus the double's exponent bias */
    int64_t power2 = ((217706 * q) >> 16) + 63 + upper - lz + 1023;
    if (power2 <= 0) { /* a subnormal (no exact halfway case can reach here) */
        if (-power2 + 1 >= 64) {
            *bits = 0;
            return 1;
        }
        mantissa >>= -power2 + 1;
        mantissa += mantissa & 1;
        mantissa >>= 1;
        /* rounding up to 2^52 makes it the smallest normal: the OR below keeps that right */
        power2 = mantissa < (UINT64_C(1) << 52) ? 0 : 1;
        *bits = mantissa | ((uint64_t)power2 << 52);
        return 1;
    }
    /* exactly halfway (only where 5^q fits in 64 bits): round to even, not up */
    if (low <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == high) {
        mantissa &= ~UINT64_C(1);
    }
    mantissa += mantissa & 1;
    mantissa >>= 1;
    if (mantissa >= (UINT64_C(2) << 52)) {
        mantissa = UINT64_C(1) << 52;
        power2++;
    }
    mantissa &= ~(UINT64_C(1) << 52);
    if (power2 >= 0x7FF) return 0; /* infinity */
    *bits = mantissa | ((uint64_t)power2 << 52);
    return 1;
}

/* The number text (digits, point, exponent; no sign) of more than MAX_SIGNIFICANT digits, whose
   digits run from begin to digits_end: its first MAX_SIGNIFICANT significant digits decide
   the double when w and w + 1 round alike, else Python's own reader reads the text. 0 when
   neither can (infinity, or a text beyond MAX_SLOW_TEXT). */
static int read_long_decimal(const unsigned char *begin, const unsigned char *digits_end,
                             const unsigned char *text_end, int64_t exponent, uint64_t *bits) {
    const unsigned char *point = memchr(begin, '.', (size_t)(digits_end - begin));
    const unsigned char *p = begin;
    while (p < digits_end && (*p == '0' || *p == '.')) p++; /* leading zeros */
    uint64_t w = 0;
    for (int taken = 0; p < digits_end && taken < MAX_SIGNIFICANT; p++) {
        if (*p == '.') continue;
        w = w * 10 + (uint64_t)(*p - '0');
        taken++;
    }
    /* w's last digit is at p - 1: integer digits left after it each add a power of ten,
       fraction digits up to it each take one away */
    int64_t whole_left = 0, fraction_taken = 0;
    if (point != NULL && p > point)
        fraction_taken = p - point - 1;
    else
        whole_left = (point != NULL ? point : digits_end) - p;
    int rest_nonzero = 0;
    for (const unsigned char *d = p; d < digits_end; d++) rest_nonzero |= *d != '0' && *d != '.';
    /* exponent is the written one; the digits taken stand for w * 10^q */
    int64_t q = exponent + whole_left - fraction_taken;
    uint64_t below, above;
    if (!eisel_lemire(w, q, &below)) return 0;
    if (!rest_nonzero) {
        *bits = below;
        return 1;
    }
    if (eisel_lemire(w + 1, q, &above) && above == below) { /* the value lies between them */
        *bits = below;
        return 1;
    }
    /* the rounding depends on digits beyond the first 19: Python's reader decides (rare) */
    size_t length = (size_t)(text_end - begin);
    if (length >= MAX_SLOW_TEXT) return 0;
    char text[MAX_SLOW_TEXT];
    memcpy(text, begin, length);
    text[length] = '\0';
    char *parsed_end = NULL;
    double value = PyOS_string_to_double(text, &parsed_end, NULL);
    if (value == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (parsed_end != text + length || isinf(value)) return 0;
    memcpy(bits, &value, 8);
    return 1;
}
