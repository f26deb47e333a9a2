/* A large request body's buffer, not zeroed first (transport/h1.py).

   unfilled(size) -> bytearray   (size bytes, whatever the memory held)

   Python makes a bytearray of a given size only zeroed (bytearray(size)); the socket then
   writes every byte of it again. For bench/compare's 1 MiB FP32 JSON request the zeroing was
   2.86M of the server's 90.1M instructions (callgrind, compiled; 87.4M without it). The caller
   hands the buffer on only once every byte of it was written (h1.py: the body's size reached;
   else the buffer is dropped with the request: tests/unit/transport/test_h1.py). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *body_buffer_unfilled(PyObject *module, PyObject *arg) {
    (void)module;
    Py_ssize_t size = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "unfilled() takes a size of 0 or more");
        return NULL;
    }
    return PyByteArray_FromStringAndSize(NULL, size);
}

static PyMethodDef methods[] = {
    {"unfilled", body_buffer_unfilled, METH_O,
     "unfilled(size) -> bytearray: size bytes, not zeroed (every one of them is to be written "
     "before it is read)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "body_buffer", "A large request body's buffer, not zeroed first.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_body_buffer(void) { return PyModule_Create(&module_def); }
