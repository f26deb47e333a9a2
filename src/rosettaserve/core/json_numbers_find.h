/* json_numbers.find: json_bulk.find_arrays's search in C (included by json_numbers.c, after
   skip_blanks and is_digit). */

/* find(body, key, min_array) -> [(start, end), ...]: json_bulk.find_arrays's search (see there:
   the same spans, its Python is the reference when this module is not built) with memmem and
   memchr. In Python it cost ~13.5k instructions on the batching case's body (one array of 128
   doubles, 2.7 KB), with this ~3.0k (callgrind, bench/batching_instructions.py). */
static int find_spans(const unsigned char *body, Py_ssize_t length, const char *key,
                      Py_ssize_t key_length, Py_ssize_t min_array, PyObject *spans) {
    const unsigned char *end = body + length;
    const unsigned char *at = body;
    for (;;) {
        const unsigned char *quote = memmem(at, (size_t)(end - at), key, (size_t)key_length);
        if (quote == NULL) return 0;
        at = quote + key_length;
        const unsigned char *colon = skip_blanks(at, end);
        if (colon >= end || *colon != ':') continue;
        const unsigned char *start = skip_blanks(colon + 1, end);
        if (start >= end || *start != '[') continue;
        const unsigned char *first = skip_blanks(start + 1, end);
        if (first >= end || (*first != '-' && !is_digit(*first))) continue;
        const unsigned char *close = memchr(start, ']', (size_t)(end - start));
        if (close == NULL || close - start < min_array) continue;
        PyObject *span = Py_BuildValue("(nn)", (Py_ssize_t)(start - body),
                                       (Py_ssize_t)(close + 1 - body));
        if (span == NULL) return -1;
        int failed = PyList_Append(spans, span);
        Py_DECREF(span);
        if (failed) return -1;
        at = close + 1; /* past the array */
    }
}

static PyObject *json_numbers_find(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "find(body, key, min_array) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t min_array = PyLong_AsSsize_t(args[2]);
    if (min_array == -1 && PyErr_Occurred()) return NULL;
    Py_buffer body, key;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &key, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&body);
        return NULL;
    }
    PyObject *spans = PyList_New(0);
    char quoted[256]; /* '"' key '"' */
    int ok = spans != NULL && key.len <= (Py_ssize_t)sizeof quoted - 2;
    if (ok) {
        quoted[0] = '"';
        memcpy(quoted + 1, key.buf, (size_t)key.len);
        quoted[key.len + 1] = '"';
        ok = find_spans((const unsigned char *)body.buf, body.len, quoted, key.len + 2, min_array,
                        spans) == 0;
    } else if (spans != NULL) {
        PyErr_SetString(PyExc_ValueError, "find: key too long");
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&body);
    if (!ok) {
        Py_XDECREF(spans);
        return NULL;
    }
    return spans;
}
