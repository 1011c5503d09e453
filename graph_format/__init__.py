"""The serialized graph format shared by both runtimes and the harness (docs/design.md §2).

This is the one thing the three independent implementations share: a versioned JSON + .npz
description of values and ops, the error classes a runtime raises, and the records a runtime
reports after each execute. It imports nothing but the standard library and numpy.
"""

from graph_format.errors import (
    BackendUnavailable,
    DeviceError,
    FeatureUnavailable,
    GraphBuildError,
    GraphFormatError,
    InputError,
    KernelBuildError,
    KernelValuesError,
    OpError,
    ParityError,
    PropagationError,
    ResizeError,
)
from graph_format.graph import (
    DTYPES,
    FLOAT_DTYPES,
    FORMAT_NAME,
    FORMAT_VERSION,
    Arg,
    Graph,
    OpNode,
    ScalarValue,
    SymIntValue,
    TensorValue,
    Value,
)
from graph_format.runtime import (
    ADAPTER_VARIABLE,
    Dims,
    DispatchRecord,
    Grid,
    LoadedGraph,
    Runtime,
    StepResult,
    pick_adapter,
)
from graph_format.signatures import (
    F16_SUFFIX,
    SIGNATURES,
    SLOTS,
    ArgSlot,
    OpSignature,
    SlotInterface,
    dtype_slot,
)

__all__ = [
    "ADAPTER_VARIABLE",
    "DTYPES",
    "F16_SUFFIX",
    "FLOAT_DTYPES",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "SIGNATURES",
    "SLOTS",
    "Arg",
    "ArgSlot",
    "BackendUnavailable",
    "DeviceError",
    "Dims",
    "DispatchRecord",
    "FeatureUnavailable",
    "Graph",
    "GraphBuildError",
    "GraphFormatError",
    "Grid",
    "InputError",
    "KernelBuildError",
    "KernelValuesError",
    "LoadedGraph",
    "OpError",
    "OpNode",
    "OpSignature",
    "ParityError",
    "PropagationError",
    "ResizeError",
    "Runtime",
    "ScalarValue",
    "SlotInterface",
    "StepResult",
    "SymIntValue",
    "TensorValue",
    "Value",
    "dtype_slot",
    "pick_adapter",
]
