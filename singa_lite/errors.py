"""The one error hierarchy of singa_lite (DESIGN §4).

Every error a user can provoke with bad input derives from :class:`SingaLiteError`, so
``except singa_lite.SingaLiteError`` catches them all. Errors about bad arguments also derive
from the matching builtin (``ValueError``/``TypeError``) so generic handlers keep working.
"""

from __future__ import annotations


class SingaLiteError(Exception):
    """Base class of every error singa_lite raises on purpose."""


class ArgumentError(SingaLiteError, ValueError, TypeError):
    """A bad argument to a public function or constructor: a value out of range or an object
    of the wrong kind. Both a ``ValueError`` and a ``TypeError``, so either builtin handler
    catches it whichever of the two the argument's fault is closer to."""


class ShapeError(SingaLiteError, ValueError):
    """Operands whose shapes do not fit the operator; the message names op and shapes."""


class DTypeError(SingaLiteError, TypeError):
    """An unsupported or mismatched dtype; the message names op and dtypes."""


class OptimizerError(ArgumentError):
    """A bad optimizer or schedule argument, or a parameter the optimizer cannot track. An
    ``ArgumentError``: optimizers and schedules are checked like every other entry point."""


class OptimizerNotSetError(OptimizerError, AttributeError):
    """``Model.optimizer`` read before ``set_optimizer``. Also an ``AttributeError``, so
    ``getattr(model, "optimizer", None)`` and ``hasattr`` still read it as "no optimizer"."""


class AutogradError(SingaLiteError, RuntimeError):
    """Backward asked of a graph that was never recorded or was already freed."""


class DeviceError(SingaLiteError, RuntimeError):
    """A device is missing, or tensors on different devices were mixed."""


class CheckpointError(SingaLiteError):
    """Base of checkpoint errors; the message names the file and, where known, the key."""


class CorruptCheckpointError(CheckpointError):
    """The file is damaged: checksum mismatch, truncated, not HDF5, or malformed."""


class IncompatibleCheckpointError(CheckpointError):
    """The file is intact but of a format or version this library cannot read."""


class StateMismatchError(CheckpointError):
    """The checkpoint's keys or shapes do not match the model (missing/unexpected/mis-shaped)."""


class OnnxError(SingaLiteError):
    """A malformed ONNX model, or one this library cannot run or write."""


class UnsupportedOperatorError(OnnxError):
    """An ONNX operator (at a given opset) that has no handler."""


class DistributedError(SingaLiteError):
    """A failure of the communicator or a mismatch between ranks."""


class UnsupportedApiError(SingaLiteError, AttributeError):
    """A part of SINGA's API that singa_lite deliberately does not provide (its C++ tensor
    bindings, say); the message says what to use instead. An ``AttributeError`` too, so
    ``hasattr`` and ``getattr(..., default)`` read it as "absent"."""
