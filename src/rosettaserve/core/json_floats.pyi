# The C module json_floats.c (built by scripts/compile_native.py).
from typing import Any

def write(array: Any, prefix: bytes = ..., suffix: bytes = ..., /) -> bytes: ...
