from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import wrappers_pb2 as _wrappers_pb2
from rosettaserve.protocols.tfserving.pb import tensorflow_pb2 as _tensorflow_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelSpec(_message.Message):
    __slots__ = ("name", "version", "version_label", "signature_name")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_LABEL_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: _wrappers_pb2.Int64Value
    version_label: str
    signature_name: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[_Union[_wrappers_pb2.Int64Value, _Mapping]] = ..., version_label: _Optional[str] = ..., signature_name: _Optional[str] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("model_spec", "inputs", "output_filter")
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _tensorflow_pb2.TensorProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_tensorflow_pb2.TensorProto, _Mapping]] = ...) -> None: ...
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILTER_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    inputs: _containers.MessageMap[str, _tensorflow_pb2.TensorProto]
    output_filter: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., inputs: _Optional[_Mapping[str, _tensorflow_pb2.TensorProto]] = ..., output_filter: _Optional[_Iterable[str]] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("model_spec", "outputs")
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _tensorflow_pb2.TensorProto
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_tensorflow_pb2.TensorProto, _Mapping]] = ...) -> None: ...
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    outputs: _containers.MessageMap[str, _tensorflow_pb2.TensorProto]
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., outputs: _Optional[_Mapping[str, _tensorflow_pb2.TensorProto]] = ...) -> None: ...

class ExampleList(_message.Message):
    __slots__ = ("examples",)
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    examples: _containers.RepeatedCompositeFieldContainer[_tensorflow_pb2.Example]
    def __init__(self, examples: _Optional[_Iterable[_Union[_tensorflow_pb2.Example, _Mapping]]] = ...) -> None: ...

class ExampleListWithContext(_message.Message):
    __slots__ = ("examples", "context")
    EXAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    examples: _containers.RepeatedCompositeFieldContainer[_tensorflow_pb2.Example]
    context: _tensorflow_pb2.Example
    def __init__(self, examples: _Optional[_Iterable[_Union[_tensorflow_pb2.Example, _Mapping]]] = ..., context: _Optional[_Union[_tensorflow_pb2.Example, _Mapping]] = ...) -> None: ...

class Input(_message.Message):
    __slots__ = ("example_list", "example_list_with_context")
    EXAMPLE_LIST_FIELD_NUMBER: _ClassVar[int]
    EXAMPLE_LIST_WITH_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    example_list: ExampleList
    example_list_with_context: ExampleListWithContext
    def __init__(self, example_list: _Optional[_Union[ExampleList, _Mapping]] = ..., example_list_with_context: _Optional[_Union[ExampleListWithContext, _Mapping]] = ...) -> None: ...

class Class(_message.Message):
    __slots__ = ("label", "score")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    label: str
    score: float
    def __init__(self, label: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class Classifications(_message.Message):
    __slots__ = ("classes",)
    CLASSES_FIELD_NUMBER: _ClassVar[int]
    classes: _containers.RepeatedCompositeFieldContainer[Class]
    def __init__(self, classes: _Optional[_Iterable[_Union[Class, _Mapping]]] = ...) -> None: ...

class ClassificationResult(_message.Message):
    __slots__ = ("classifications",)
    CLASSIFICATIONS_FIELD_NUMBER: _ClassVar[int]
    classifications: _containers.RepeatedCompositeFieldContainer[Classifications]
    def __init__(self, classifications: _Optional[_Iterable[_Union[Classifications, _Mapping]]] = ...) -> None: ...

class ClassificationRequest(_message.Message):
    __slots__ = ("model_spec", "input")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    input: Input
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., input: _Optional[_Union[Input, _Mapping]] = ...) -> None: ...

class ClassificationResponse(_message.Message):
    __slots__ = ("model_spec", "result")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    result: ClassificationResult
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., result: _Optional[_Union[ClassificationResult, _Mapping]] = ...) -> None: ...

class Regression(_message.Message):
    __slots__ = ("value",)
    VALUE_FIELD_NUMBER: _ClassVar[int]
    value: float
    def __init__(self, value: _Optional[float] = ...) -> None: ...

class RegressionResult(_message.Message):
    __slots__ = ("regressions",)
    REGRESSIONS_FIELD_NUMBER: _ClassVar[int]
    regressions: _containers.RepeatedCompositeFieldContainer[Regression]
    def __init__(self, regressions: _Optional[_Iterable[_Union[Regression, _Mapping]]] = ...) -> None: ...

class RegressionRequest(_message.Message):
    __slots__ = ("model_spec", "input")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    input: Input
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., input: _Optional[_Union[Input, _Mapping]] = ...) -> None: ...

class RegressionResponse(_message.Message):
    __slots__ = ("model_spec", "result")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    result: RegressionResult
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., result: _Optional[_Union[RegressionResult, _Mapping]] = ...) -> None: ...

class InferenceTask(_message.Message):
    __slots__ = ("model_spec", "method_name")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    method_name: str
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., method_name: _Optional[str] = ...) -> None: ...

class InferenceResult(_message.Message):
    __slots__ = ("model_spec", "classification_result", "regression_result")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    CLASSIFICATION_RESULT_FIELD_NUMBER: _ClassVar[int]
    REGRESSION_RESULT_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    classification_result: ClassificationResult
    regression_result: RegressionResult
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., classification_result: _Optional[_Union[ClassificationResult, _Mapping]] = ..., regression_result: _Optional[_Union[RegressionResult, _Mapping]] = ...) -> None: ...

class MultiInferenceRequest(_message.Message):
    __slots__ = ("tasks", "input")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[InferenceTask]
    input: Input
    def __init__(self, tasks: _Optional[_Iterable[_Union[InferenceTask, _Mapping]]] = ..., input: _Optional[_Union[Input, _Mapping]] = ...) -> None: ...

class MultiInferenceResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[InferenceResult]
    def __init__(self, results: _Optional[_Iterable[_Union[InferenceResult, _Mapping]]] = ...) -> None: ...

class SignatureDefMap(_message.Message):
    __slots__ = ("signature_def",)
    class SignatureDefEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _tensorflow_pb2.SignatureDef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_tensorflow_pb2.SignatureDef, _Mapping]] = ...) -> None: ...
    SIGNATURE_DEF_FIELD_NUMBER: _ClassVar[int]
    signature_def: _containers.MessageMap[str, _tensorflow_pb2.SignatureDef]
    def __init__(self, signature_def: _Optional[_Mapping[str, _tensorflow_pb2.SignatureDef]] = ...) -> None: ...

class GetModelMetadataRequest(_message.Message):
    __slots__ = ("model_spec", "metadata_field")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    metadata_field: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., metadata_field: _Optional[_Iterable[str]] = ...) -> None: ...

class GetModelMetadataResponse(_message.Message):
    __slots__ = ("model_spec", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _any_pb2.Any
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    metadata: _containers.MessageMap[str, _any_pb2.Any]
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ..., metadata: _Optional[_Mapping[str, _any_pb2.Any]] = ...) -> None: ...

class GetModelStatusRequest(_message.Message):
    __slots__ = ("model_spec",)
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    model_spec: ModelSpec
    def __init__(self, model_spec: _Optional[_Union[ModelSpec, _Mapping]] = ...) -> None: ...

class StatusProto(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ModelVersionStatus(_message.Message):
    __slots__ = ("version", "state", "status")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[ModelVersionStatus.State]
        START: _ClassVar[ModelVersionStatus.State]
        LOADING: _ClassVar[ModelVersionStatus.State]
        AVAILABLE: _ClassVar[ModelVersionStatus.State]
        UNLOADING: _ClassVar[ModelVersionStatus.State]
        END: _ClassVar[ModelVersionStatus.State]
    UNKNOWN: ModelVersionStatus.State
    START: ModelVersionStatus.State
    LOADING: ModelVersionStatus.State
    AVAILABLE: ModelVersionStatus.State
    UNLOADING: ModelVersionStatus.State
    END: ModelVersionStatus.State
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    version: int
    state: ModelVersionStatus.State
    status: StatusProto
    def __init__(self, version: _Optional[int] = ..., state: _Optional[_Union[ModelVersionStatus.State, str]] = ..., status: _Optional[_Union[StatusProto, _Mapping]] = ...) -> None: ...

class GetModelStatusResponse(_message.Message):
    __slots__ = ("model_version_status",)
    MODEL_VERSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    model_version_status: _containers.RepeatedCompositeFieldContainer[ModelVersionStatus]
    def __init__(self, model_version_status: _Optional[_Iterable[_Union[ModelVersionStatus, _Mapping]]] = ...) -> None: ...
