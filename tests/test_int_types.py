"""The integer types ONNX models carry beside SINGA's six (int8, uint8, int16, uint16, uint32,
uint64): Tensors hold them, arithmetic follows NumPy's (and ONNX's) rules, ``prepare(...).run``
returns every output in the type the graph declares, and checkpoints save and load them."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from singa_lite import layer, model, sonnx, tensor
from singa_lite.errors import DTypeError, StateMismatchError
from singa_lite.sonnx.import_ops.base import storage_dtype
from singa_lite.tensor import SINGA_DTYPES, SUPPORTED_DTYPES, Tensor

NEW_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64]


def test_the_supported_types_are_singas_six_and_the_onnx_integers():
    assert len(SINGA_DTYPES) == 6
    assert set(SUPPORTED_DTYPES) == {*SINGA_DTYPES, *(np.dtype(t) for t in NEW_TYPES)}
    with pytest.raises(DTypeError, match="not supported"):
        tensor.as_dtype(np.complex64)


@pytest.mark.parametrize("dtype", NEW_TYPES)
def test_tensors_hold_the_type_and_compute_as_numpy_does(dev, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 3, 7], dtype)
    b = np.array([2, 1, 5, 7], dtype)
    ta, tb = Tensor(data=a, device=dev), Tensor(data=b, device=dev)
    assert ta.dtype == dtype and tensor.from_numpy(a).dtype == dtype
    with np.errstate(over="ignore"):
        for got, want in [
            (ta + tb, a + b),  # wraps around
            (ta - tb, a - b),
            (ta * tb, a * b),
            (ta * 2, a * dtype(2)),
            (-ta, -a),
            (abs(ta), np.abs(a)),
        ]:
            assert got.dtype == want.dtype, (got.dtype, want.dtype)
            np.testing.assert_array_equal(got.numpy(), want)
    assert (ta < tb).dtype == np.bool_ and (ta == tb).numpy().tolist() == (a == b).tolist()
    mixed = ta + Tensor(data=b.astype(np.int64), device=dev)
    assert mixed.dtype == np.result_type(a, b.astype(np.int64))
    f = ta.as_type(tensor.float32)
    assert f.dtype == np.float32 and f.numpy().tolist() == a.astype(np.float32).tolist()
    assert ta.reshape((2, 2)).dtype == dtype and ta.T().dtype == dtype


def test_float16_stays_float16(dev):
    x = Tensor(data=np.array([1.5, 2.25], np.float16), device=dev)
    assert (x * x + 1).dtype == np.float16


# -- prepare(...).run over onnx's node test cases --------------------------------------------------
sys.path.insert(0, str(Path(__file__).parent / "sonnx"))
from node_test_excludes import EXCLUDES  # noqa: E402
from test_import_node import _array, node_cases, unsupported_type  # noqa: E402


def _declared(value_info) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type))


def _typed_cases() -> list[str]:
    """The runnable node cases whose graph inputs or outputs use a type outside float32/64,
    int32/64 and bool (the cases where a type could be lost)."""
    plain = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.bool_)}
    names = []
    for name, case in sorted(node_cases().items()):
        if name in EXCLUDES or unsupported_type(name):
            continue
        values = [*case.model.graph.input, *case.model.graph.output]
        if any(v.type.HasField("tensor_type") and _declared(v) not in plain for v in values):
            names.append(name)
    return names


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", _typed_cases())
def test_prepare_run_returns_the_declared_output_types(name):
    """``SingaRep.run`` (not only ``SingaBackend``) gives each output the declared type: itself
    for every type a Tensor holds; the held type (``storage_dtype``) for int4, bfloat16, float8."""
    case = node_cases()[name]
    rep = sonnx.prepare(case.model)
    inputs, _ = case.data_sets[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = rep.run([_array(v) for v in inputs])
    for v, out in zip(case.model.graph.output, outs):
        if not v.type.HasField("tensor_type"):
            continue
        declared = _declared(v)
        want = declared if declared in SUPPORTED_DTYPES else storage_dtype(declared)
        assert out.dtype == want, (v.name, out.dtype, declared)


def test_typed_cases_cover_every_new_type():
    seen = set()
    for name in _typed_cases():
        case = node_cases()[name]
        seen |= {_declared(v) for v in case.model.graph.output if v.type.HasField("tensor_type")}
    assert {np.dtype(t) for t in (*NEW_TYPES, np.float16)} <= seen


# -- checkpoints ----------------------------------------------------------------------------------
class _Coded(model.Model):
    """A model with integer states of every new type (codes, counters, masks)."""

    def __init__(self, fill: int) -> None:
        super().__init__()
        self.fc = layer.Linear(2)
        for t in NEW_TYPES:
            info = np.iinfo(t)
            values = np.array([info.min, info.max, fill], t) if fill else np.zeros(3, t)
            setattr(self, f"codes_{np.dtype(t).name}", Tensor(data=values, requires_grad=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


def test_checkpoints_save_and_load_every_integer_type(tmp_path):
    x = tensor.from_numpy(np.ones((1, 3), np.float32))
    src = _Coded(5)
    src.compile([x], is_train=False, use_graph=False)
    path = str(tmp_path / "coded.h5")
    aux = {f"aux_{np.dtype(t).name}": np.arange(4).astype(t) for t in NEW_TYPES}
    src.save_states(path, aux_states=aux)
    dst = _Coded(0)
    dst.compile([x], is_train=False, use_graph=False)
    back = dst.load_states(path)
    for t in NEW_TYPES:
        name = f"codes_{np.dtype(t).name}"
        got = dst.get_states()[name]
        assert got.dtype == t
        np.testing.assert_array_equal(got.numpy(), src.get_states()[name].numpy())
        got_aux = np.asarray(back[f"aux_{np.dtype(t).name}"])
        assert got_aux.dtype == t and got_aux.tolist() == [0, 1, 2, 3]


def test_checkpoint_values_that_would_not_survive_the_model_type_are_refused(tmp_path):
    """HDF5 would clip int16 300 into an int8 tensor as 127: refused, with the key named."""

    class One(model.Model):
        def __init__(self, dtype: type, values: list) -> None:
            super().__init__()
            self.fc = layer.Linear(2)
            self.codes = Tensor(data=np.array(values, dtype), requires_grad=False)

        def forward(self, x: Tensor) -> Tensor:
            return self.fc(x)

    x = tensor.from_numpy(np.ones((1, 3), np.float32))
    path = str(tmp_path / "c.h5")
    src = One(np.int16, [300, -5])
    src.compile([x], is_train=False, use_graph=False)
    src.save_states(path)
    for dtype in (np.int8, np.uint16, np.float32):
        dst = One(dtype, [0, 0])
        dst.compile([x], is_train=False, use_graph=False)
        if dtype is np.float32:  # int16 into float32 keeps every value
            dst.load_states(path)
            assert dst.get_states()["codes"].numpy().tolist() == [300.0, -5.0]
            continue
        with pytest.raises(StateMismatchError, match=r"codes \(checkpoint int16, model"):
            dst.load_states(path)
        report = dst.load_states(path, strict=False)["__report__"]
        assert report["mismatched"] and dst.get_states()["codes"].numpy().tolist() == [0, 0]
