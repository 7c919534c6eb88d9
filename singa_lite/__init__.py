"""singa_lite: Apache SINGA's Python API on NumPy and CuPy, with safe, complete checkpoints.

>>> from singa_lite import tensor, autograd
>>> import numpy as np
>>> x = tensor.from_numpy(np.ones((2, 3), dtype=np.float32))
>>> autograd.relu(x - 2).shape
(2, 3)
"""

__version__ = "0.1.0"

from singa_lite import autograd, backend, device, errors, ops, tensor
from singa_lite.errors import (
    ArgumentError,
    AutogradError,
    CheckpointError,
    CorruptCheckpointError,
    DeviceError,
    DistributedError,
    DTypeError,
    IncompatibleCheckpointError,
    OnnxError,
    OptimizerError,
    OptimizerNotSetError,
    ShapeError,
    SingaLiteError,
    StateMismatchError,
    UnsupportedOperatorError,
)
from singa_lite.saving import load, save

__all__ = [
    "ArgumentError",
    "AutogradError",
    "CheckpointError",
    "CorruptCheckpointError",
    "DTypeError",
    "DeviceError",
    "DistributedError",
    "IncompatibleCheckpointError",
    "OnnxError",
    "OptimizerError",
    "OptimizerNotSetError",
    "ShapeError",
    "SingaLiteError",
    "StateMismatchError",
    "UnsupportedOperatorError",
    "autograd",
    "backend",
    "device",
    "errors",
    "load",
    "ops",
    "save",
    "tensor",
]
