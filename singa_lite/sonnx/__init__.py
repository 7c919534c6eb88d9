"""ONNX for singa_lite: import (``prepare``, ``SONNXModel``) and export (``to_onnx``).

Import is :mod:`~singa_lite.sonnx.importer` with its handler table in
:mod:`~singa_lite.sonnx.import_ops` and its inference rewrites in :mod:`~singa_lite.sonnx.fusion`;
export is :mod:`~singa_lite.sonnx.exporter` with its converter table in
:mod:`~singa_lite.sonnx.export_ops`.

>>> from singa_lite import sonnx
>>> sorted(n for n in ("prepare", "SingaRep", "SONNXModel") if hasattr(sonnx, n))
['SONNXModel', 'SingaRep', 'prepare']
"""

from __future__ import annotations

from typing import Any

from singa_lite.sonnx.importer import SingaBackend, SingaRep, prepare, run_model, supports_device
from singa_lite.sonnx.model import SONNXModel

__all__ = ["SONNXModel", "SingaBackend", "SingaRep", "prepare", "run_model", "supports_device", "to_onnx"]


def __getattr__(name: str) -> Any:
    # Export lives in its own module; importing it lazily keeps `import sonnx` cheap for import.
    if name in ("to_onnx", "export_model", "export_function"):
        from singa_lite.sonnx import exporter

        return getattr(exporter, name)
    raise AttributeError(f"module 'singa_lite.sonnx' has no attribute {name!r}")
