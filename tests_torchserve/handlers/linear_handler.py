"""A BaseHandler subclass over a TorchScript Linear(4, 2): each request's body is a JSON list of
rows (or one row); the answer is the rows' outputs rounded to 5 places, so both servers agree
to the digit."""

import torch
from ts.torch_handler.base_handler import BaseHandler


class LinearHandler(BaseHandler):
    def preprocess(self, data):
        self.counts = []
        rows = []
        for item in data:
            value = item.get("data") or item.get("body")
            batch = value if isinstance(value[0], list) else [value]
            self.counts.append(len(batch))
            rows.extend(batch)
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, data):
        out, start = [], 0
        for count in self.counts:
            rows = data[start : start + count].tolist()
            out.append([[round(x, 5) for x in row] for row in rows])
            start += count
        return out
