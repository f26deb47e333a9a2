"""TorchServe's inference API (``rest``) over models that serve ``wire.TsRequest``."""
