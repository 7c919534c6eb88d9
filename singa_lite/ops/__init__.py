"""Differentiable operators, one module per family.

Each module defines small ``Operator`` classes (forward and backward side by side) and a
lowercase function per op under SINGA's name. Everything in a family's ``__all__`` is
re-exported here and from ``singa_lite.autograd``.

Module names never equal an exported function's name (``ops.rnn`` is the function; its
module is ``ops.recurrent``; ``ops.resize`` lives in ``ops.interpolate``).
"""

from singa_lite.ops import (
    activation,
    activation_extra,
    attention,
    conv,
    conv_general,
    deform,
    detection,
    elementwise,
    embeddings,
    fused,
    gather_scatter,
    interpolate,
    linalg,
    loss,
    loss_nd,
    norm_extra,
    normalization,
    pool,
    quantize,
    recurrent,
    reduce,
    sampling,
    shape,
    signal,
    stateful,
)
from singa_lite.ops.activation import *  # noqa: F403
from singa_lite.ops.activation_extra import *  # noqa: F403
from singa_lite.ops.attention import *  # noqa: F403
from singa_lite.ops.conv import *  # noqa: F403
from singa_lite.ops.conv_general import *  # noqa: F403
from singa_lite.ops.deform import *  # noqa: F403
from singa_lite.ops.detection import *  # noqa: F403
from singa_lite.ops.elementwise import *  # noqa: F403
from singa_lite.ops.embeddings import *  # noqa: F403
from singa_lite.ops.fused import *  # noqa: F403
from singa_lite.ops.gather_scatter import *  # noqa: F403
from singa_lite.ops.interpolate import *  # noqa: F403
from singa_lite.ops.linalg import *  # noqa: F403
from singa_lite.ops.loss import *  # noqa: F403
from singa_lite.ops.loss_nd import *  # noqa: F403
from singa_lite.ops.norm_extra import *  # noqa: F403
from singa_lite.ops.normalization import *  # noqa: F403
from singa_lite.ops.pool import *  # noqa: F403
from singa_lite.ops.quantize import *  # noqa: F403
from singa_lite.ops.recurrent import *  # noqa: F403
from singa_lite.ops.reduce import *  # noqa: F403
from singa_lite.ops.sampling import *  # noqa: F403
from singa_lite.ops.shape import *  # noqa: F403
from singa_lite.ops.signal import *  # noqa: F403
from singa_lite.ops.stateful import *  # noqa: F403

_FAMILIES = (
    elementwise,
    activation,
    reduce,
    shape,
    linalg,
    conv,
    conv_general,
    pool,
    normalization,
    interpolate,
    recurrent,
    loss,
    attention,
    embeddings,
    fused,
    activation_extra,
    norm_extra,
    loss_nd,
    signal,
    stateful,
    deform,
    quantize,
    gather_scatter,
    sampling,
    detection,
)

__all__: list[str] = [name for family in _FAMILIES for name in family.__all__]


def _check_unique() -> None:
    """Two families exporting one name would silently shadow an op."""
    seen: dict[str, str] = {}
    for family in _FAMILIES:
        for name in family.__all__:
            if name in seen:
                raise ImportError(f"ops: {name!r} is exported by both {seen[name]} and {family.__name__}")
            seen[name] = family.__name__


_check_unique()
