# The C module json_numbers.c (built by scripts/compile_native.py).
from typing import Literal

def read(text: bytes | bytearray | memoryview, /) -> tuple[bytearray, bool] | None: ...
def read_single(
    text: bytes | bytearray | memoryview, /
) -> tuple[bytearray, Literal["f", "d", "q"]] | None: ...
def find(
    body: bytes | bytearray | memoryview, key: bytes, min_array: int, /
) -> list[tuple[int, int]]: ...
