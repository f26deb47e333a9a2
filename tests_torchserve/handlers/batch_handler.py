"""Answers each request with the size of the batch it came in and its place in it."""

import json


def handle(data, context):
    if data is None:
        return None
    return [json.dumps({"batch": len(data), "value": item.get("body")}) for item in data]
