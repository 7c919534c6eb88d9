"""Reading an ONNX model and its external data as untrusted input.

``read_model`` takes a ``ModelProto``, serialized bytes or a file path and returns the checked
model with the arrays of its externally stored initializers. What it refuses, with an
``OnnxError`` naming the file or the tensor, before reading anything it was not pointed at:

- subgraphs nested deeper than ``Limits.max_graph_depth``;
- a path that is not a regular file (a FIFO would block forever), or a file or byte string over
  ``Limits.max_model_bytes``, before a byte of it is read;
- external data without a directory to resolve it against: a path's own directory, or an
  explicit ``base_dir`` for a ``ModelProto`` or bytes (never the working directory);
- a ``location`` that is absolute, or whose real path (symlinks resolved) leaves that directory;
  the file actually opened is checked again (``/proc/self/fd``), so a symlink swapped in after
  the check is caught;
- ``offset``/``length`` that are not integers, point past the file's end, or give a byte count
  that disagrees with the tensor's data type and dims; a tensor over ``Limits.max_tensor_bytes``.

``onnx.checker`` then runs on the model (with the external tensors stubbed: it would look for
their files relative to the working directory).
"""

from __future__ import annotations

import os
import stat
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from singa_lite.errors import OnnxError
from singa_lite.sonnx import limits as _limits

_SUB_BYTE_BITS = {
    getattr(TensorProto, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(TensorProto, name)
}


def read_model(
    model: Any, base_dir: Any = None, limits: _limits.Limits | None = None
) -> tuple[ModelProto, dict[str, np.ndarray]]:
    """``(checked ModelProto, {initializer name: array})`` for ``model`` (a ``ModelProto``,
    bytes, or a path); the dict holds the initializers stored in external files."""
    lim = _limits.resolve(limits)
    own = True  # a proto parsed here may be changed in place; the caller's is copied first
    if isinstance(model, ModelProto):
        proto, own = model, False
    else:
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            raw = _read_file(path, lim)
            if base_dir is None:
                base_dir = os.path.dirname(os.path.abspath(path))
        elif isinstance(model, (bytes, bytearray, memoryview)):
            raw = bytes(model)
            if len(raw) > lim.max_model_bytes:
                raise OnnxError(
                    f"the ONNX model has {len(raw)} bytes, "
                    f"over Limits.max_model_bytes = {lim.max_model_bytes}"
                )
        else:
            raise TypeError(f"prepare: expected a ModelProto, bytes or a path, got {type(model).__name__}")
        try:
            proto = onnx.load_model_from_string(raw)
        except Exception as e:  # protobuf raises DecodeError, and others on odd bytes
            raise OnnxError(f"not a valid ONNX model (damaged or truncated?): {e}") from e
    _check_depth(proto.graph, lim)
    external = [t for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    in_attrs = [t for t in _attribute_tensors(proto.graph) if t.data_location == TensorProto.EXTERNAL]
    if (external or in_attrs) and not own:
        proto = _copy(proto)
        external = [t for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
        in_attrs = [t for t in _attribute_tensors(proto.graph) if t.data_location == TensorProto.EXTERNAL]
    if external or in_attrs:
        if base_dir is None:
            name = (external or in_attrs)[0].name
            raise OnnxError(
                f"tensor {name!r} keeps its data in an external file; a model given as a ModelProto "
                "or bytes has no directory to find it in: pass base_dir= (the model's directory), "
                "or give the model's path"
            )
        base = os.path.realpath(os.fspath(base_dir))
        if not os.path.isdir(base):
            raise OnnxError(f"base_dir {os.fspath(base_dir)!r} is not a directory")
        refs = [_resolve(t, base, lim) for t in [*external, *in_attrs]]
    else:
        base, refs = "", []
    _check(proto, [*external, *in_attrs])
    arrays: dict[str, np.ndarray] = {}
    for t, ref in zip(external, refs):
        arrays[t.name] = _read_array(t, ref, base)
    for t, ref in zip(in_attrs, refs[len(external) :]):
        _inline(t, _read_array(t, ref, base))
    return proto, arrays


def _copy(proto: ModelProto) -> ModelProto:
    out = ModelProto()
    out.CopyFrom(proto)
    return out


def _read_file(path: str, lim: _limits.Limits) -> bytes:
    """The bytes of a regular file of at most ``max_model_bytes``, checked before reading."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise OnnxError(f"cannot read ONNX model {path!r}: {e.strerror or e}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OnnxError(f"ONNX model {path!r} is not a regular file")
        over = OnnxError(
            f"ONNX model {path!r} has more than Limits.max_model_bytes = {lim.max_model_bytes} bytes "
            f"({st.st_size}; a model over 2 GiB keeps its weights in external data)"
        )
        if st.st_size > lim.max_model_bytes:
            raise over
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(lim.max_model_bytes + 1)  # one buffer; bounded even if the file grows
        if len(data) > lim.max_model_bytes:
            raise over
        return data
    except OSError as e:
        raise OnnxError(f"cannot read ONNX model {path!r}: {e.strerror or e}") from e
    finally:
        os.close(fd)


def _pread_all(fd: int, size: int, offset: int, what: str) -> bytes:
    chunks, got = [], 0
    while got < size:
        chunk = os.pread(fd, min(size - got, 1 << 30), offset + got)
        if not chunk:
            raise OnnxError(f"{what}: the file ended after {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _check_depth(graph: Any, lim: _limits.Limits) -> None:
    """Refuse subgraphs nested deeper than ``max_graph_depth`` before anything recurses into
    them (onnx.checker, the readers here, the importer)."""
    stack = [(graph, 0)]
    while stack:
        g, depth = stack.pop()
        for node in g.node:
            for a in node.attribute:
                subs = [a.g] if a.HasField("g") else []
                subs.extend(a.graphs)
                if subs and depth + 1 > lim.max_graph_depth:
                    raise OnnxError(
                        f"node {node.name or node.op_type!r}: subgraphs nest deeper than "
                        f"Limits.max_graph_depth = {lim.max_graph_depth}"
                    )
                stack.extend((sub, depth + 1) for sub in subs)


def _attribute_tensors(graph: Any) -> list[TensorProto]:
    """The tensors held in node attributes of ``graph`` and of its subgraphs."""
    out: list[TensorProto] = []
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                out.append(a.t)
            out.extend(a.tensors)
            if a.HasField("g"):
                out.extend(_attribute_tensors(a.g))
            for g in a.graphs:
                out.extend(_attribute_tensors(g))
    return out


def raw_size(t: TensorProto, where: str, lim: _limits.Limits) -> int:
    """The bytes of ``t``'s data in ONNX's raw (little-endian, packed sub-byte) layout, after
    checking its data type is a numeric one and its size fits ``max_tensor_bytes``."""
    count = _limits.element_count(where, list(t.dims), "tensor")
    bits = _SUB_BYTE_BITS.get(t.data_type)
    if bits is not None:
        size = (count * bits + 7) // 8
    else:
        dtype = _numeric_dtype(t, where)
        size = count * dtype.itemsize
    _limits.check_bytes(where, size, lim, "tensor")
    return size


def _numeric_dtype(t: TensorProto, where: str) -> np.dtype:
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    except Exception:
        dtype = np.dtype(object)
    if dtype.hasobject or t.data_type == TensorProto.UNDEFINED:
        raise OnnxError(f"{where}: data type {t.data_type} cannot be stored as external data")
    return dtype


def _resolve(t: TensorProto, base: str, lim: _limits.Limits) -> tuple[str, int, int]:
    """``(real path, offset, byte count)`` of an external tensor, checked against ``base``."""
    where = f"external tensor {t.name!r}"
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if not location or "\0" in location:
        raise OnnxError(f"{where}: no valid location")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or os.path.splitdrive(location)[0]:
        raise OnnxError(f"{where}: location {location!r} is absolute; it must be relative to the model")
    real = os.path.realpath(os.path.join(base, location))
    if not _inside(real, base):
        raise OnnxError(
            f"{where}: location {location!r} resolves to {real!r}, outside the model's directory {base!r}"
        )
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise OnnxError(f"{where}: offset and length must be integers, got {info}") from None
    if offset < 0 or (length is not None and length < 0):
        raise OnnxError(f"{where}: negative offset or length in {info}")
    size = raw_size(t, where, lim)
    try:
        st = os.stat(real)
    except OSError as e:
        raise OnnxError(f"{where}: cannot read {location!r}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OnnxError(f"{where}: {location!r} is not a regular file")
    given = st.st_size - offset if length is None else length
    if given != size:
        raise OnnxError(
            f"{where}: its {list(t.dims)} elements of data type {t.data_type} take {size} bytes, but "
            f"the external data gives {given} (location {location!r}, offset {offset}, length {length})"
        )
    if offset + size > st.st_size:
        raise OnnxError(f"{where}: bytes {offset}..{offset + size} lie past the end of {location!r}")
    return real, offset, size


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def _read_array(t: TensorProto, ref: tuple[str, int, int], base: str) -> np.ndarray:
    """The external tensor's values, read from the very file checked by ``_resolve``."""
    real, offset, size = ref
    where = f"external tensor {t.name!r}"
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as e:
        raise OnnxError(f"{where}: cannot open {real!r}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        proc = f"/proc/self/fd/{fd}"
        opened = os.path.realpath(proc) if os.path.exists(proc) else real
        if not stat.S_ISREG(st.st_mode) or not _inside(opened, base) or offset + size > st.st_size:
            raise OnnxError(f"{where}: {real!r} changed while the model was read")
        if t.data_type in _SUB_BYTE_BITS:
            packed = TensorProto()
            packed.CopyFrom(t)
            del packed.external_data[:]
            packed.data_location = TensorProto.DEFAULT
            packed.raw_data = _pread_all(fd, size, offset, where)
            return onnx.numpy_helper.to_array(packed)
        dtype = _numeric_dtype(t, where).newbyteorder("<")
        out = np.empty(tuple(t.dims), dtype=dtype)
        view = out.reshape(-1).view(np.uint8).data
        got = 0
        while got < size:
            n = os.preadv(fd, [view[got:]], offset + got)
            if n <= 0:
                raise OnnxError(f"{where}: {real!r} ended early")
            got += n
        return out if dtype.isnative else out.astype(dtype.newbyteorder("="))
    except OSError as e:
        raise OnnxError(f"{where}: cannot read {real!r}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _inline(t: TensorProto, arr: np.ndarray) -> None:
    """Keep an attribute tensor's external values in the proto itself (they are few)."""
    filled = onnx.numpy_helper.from_array(arr, t.name)
    del t.external_data[:]
    t.data_location = TensorProto.DEFAULT
    t.ClearField("raw_data")
    t.raw_data = filled.raw_data


def _check(proto: ModelProto, external: list[TensorProto]) -> None:
    """``onnx.checker`` on ``proto``, each external tensor stubbed by one inline element while it
    runs (the checker would look for the files relative to the working directory)."""
    saved = []
    for t in external:
        saved.append((list(t.dims), [(e.key, e.value) for e in t.external_data]))
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT
        rank = len(t.dims)
        del t.dims[:]
        t.dims.extend([1] * rank)
        bits = _SUB_BYTE_BITS.get(t.data_type)
        t.raw_data = b"\0" * (1 if bits else _numeric_dtype(t, f"external tensor {t.name!r}").itemsize)
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # ValidationError, or protobuf errors on half-parsed messages
        raise OnnxError(f"the ONNX model fails onnx.checker: {str(e).splitlines()[0]}") from e
    finally:
        for t, (dims, entries) in zip(external, saved):
            t.ClearField("raw_data")
            del t.dims[:]
            t.dims.extend(dims)
            t.data_location = TensorProto.EXTERNAL
            for key, value in entries:
                entry = t.external_data.add()
                entry.key, entry.value = key, value
