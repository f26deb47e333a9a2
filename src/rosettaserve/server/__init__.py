"""The process: settings -> repository -> planes -> transports; the worker supervisor and its
workers, the isolated model processes, the security set-up, signals, the exit backstop and the
GC/malloc tuning."""
