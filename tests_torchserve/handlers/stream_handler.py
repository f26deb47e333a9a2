"""Streams three parts with send_intermediate_predict_response, then a last one."""

from ts.handler_utils.utils import send_intermediate_predict_response


def handle(data, context):
    if data is None:
        return None
    for part in range(3):
        answers = [f"part {part} of request {i};" for i in range(len(data))]
        send_intermediate_predict_response(
            answers, context.request_ids, "Intermediate", 200, context
        )
    return ["end" for _ in data]
