"""The TF Serving and TensorFlow messages this protocol reads and writes, by one short name
each: the generated modules (``pb``, TF Serving's and TensorFlow's own definitions) are many and
deep, so the servicers, converters, tests and benchmarks import them from here."""

from __future__ import annotations

from rosettaserve.protocols.tfserving.pb.tensorflow.core.example import example_pb2
from rosettaserve.protocols.tfserving.pb.tensorflow.core.framework import (
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)
from rosettaserve.protocols.tfserving.pb.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    input_pb2,
    predict_pb2,
    regression_pb2,
)

# tensorflow (TensorFlow's core)
TensorProto = tensor_pb2.TensorProto
TensorShapeProto = tensor_shape_pb2.TensorShapeProto
Example = example_pb2.Example
DataType = types_pb2.DataType
DT_INVALID = types_pb2.DT_INVALID
DT_FLOAT = types_pb2.DT_FLOAT
DT_DOUBLE = types_pb2.DT_DOUBLE
DT_INT32 = types_pb2.DT_INT32
DT_UINT8 = types_pb2.DT_UINT8
DT_INT16 = types_pb2.DT_INT16
DT_INT8 = types_pb2.DT_INT8
DT_STRING = types_pb2.DT_STRING
DT_INT64 = types_pb2.DT_INT64
DT_BOOL = types_pb2.DT_BOOL
DT_BFLOAT16 = types_pb2.DT_BFLOAT16
DT_UINT16 = types_pb2.DT_UINT16
DT_HALF = types_pb2.DT_HALF
DT_RESOURCE = types_pb2.DT_RESOURCE
DT_UINT32 = types_pb2.DT_UINT32
DT_UINT64 = types_pb2.DT_UINT64

# tensorflow.serving (TF Serving's API)
PredictRequest = predict_pb2.PredictRequest
PredictResponse = predict_pb2.PredictResponse
Input = input_pb2.Input
ExampleList = input_pb2.ExampleList
ClassificationRequest = classification_pb2.ClassificationRequest
ClassificationResponse = classification_pb2.ClassificationResponse
ClassificationResult = classification_pb2.ClassificationResult
RegressionRequest = regression_pb2.RegressionRequest
RegressionResponse = regression_pb2.RegressionResponse
RegressionResult = regression_pb2.RegressionResult
MultiInferenceRequest = inference_pb2.MultiInferenceRequest
MultiInferenceResponse = inference_pb2.MultiInferenceResponse
GetModelMetadataRequest = get_model_metadata_pb2.GetModelMetadataRequest
GetModelMetadataResponse = get_model_metadata_pb2.GetModelMetadataResponse
SignatureDefMap = get_model_metadata_pb2.SignatureDefMap
GetModelStatusRequest = get_model_status_pb2.GetModelStatusRequest
GetModelStatusResponse = get_model_status_pb2.GetModelStatusResponse
ModelVersionStatus = get_model_status_pb2.ModelVersionStatus
