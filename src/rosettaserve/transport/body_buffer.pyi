# The C module body_buffer.c (built by scripts/compile_native.py).
def unfilled(size: int, /) -> bytearray:
    """``size`` bytes, not zeroed: every one of them is to be written before it is read."""
