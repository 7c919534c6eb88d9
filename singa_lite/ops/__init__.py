"""Differentiable operators, one module per family.

Each module defines small ``Operator`` classes (forward and backward side by side) and a
lowercase function per op under SINGA's name. Everything in a family's ``__all__`` is
re-exported here and from ``singa_lite.autograd``.
"""

from singa_lite.ops import (
    activation,
    conv,
    elementwise,
    linalg,
    loss,
    normalization,
    pool,
    reduce,
    resize,
    rnn,
    shape,
)

_FAMILIES = (elementwise, activation, reduce, shape, linalg, conv, pool, normalization, resize, rnn, loss)

__all__: list[str] = []
for _family in _FAMILIES:
    for _name in _family.__all__:
        if _name in __all__:  # two families exporting one name would silently shadow an op
            raise ImportError(f"ops: {_name!r} is exported by more than one op family")
        globals()[_name] = getattr(_family, _name)
        __all__.append(_name)
del _family, _name
