"""The ``torchserve`` runtime: ``.mar`` archives (``mar``) run with their own handlers through
TorchServe's Python package (``service``), batched as TorchServe batches (``model``)."""
