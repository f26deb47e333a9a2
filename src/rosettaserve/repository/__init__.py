"""The on-disk model repository."""
