"""TensorFlow Serving REST API v1 (``/v1/models/...``)."""
