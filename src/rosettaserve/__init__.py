"""rosettaserve: one model server for every serving protocol."""

from rosettaserve.core.model import Model

__version__ = "0.1.0"
__all__ = ["Model", "__version__"]
