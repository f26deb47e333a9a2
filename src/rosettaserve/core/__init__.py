"""Core: the internal representation and the data plane. Imports no protocol or transport."""
