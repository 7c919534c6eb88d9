"""Checkpoints: complete, checksummed, crash-safe model states in one HDF5 file (DESIGN §3).

>>> import numpy as np, tempfile, os
>>> from singa_lite import layer, model, opt, tensor, checkpoint
>>> class Net(model.Model):
...     def __init__(self):
...         super().__init__()
...         self.fc = layer.Linear(2)
...     def forward(self, x):
...         return self.fc(x)
>>> net = Net(); net.set_optimizer(opt.SGD(lr=0.1, momentum=0.9))
>>> net.compile([tensor.Tensor((4, 3))])
>>> path = os.path.join(tempfile.mkdtemp(), "net.h5")
>>> _ = net.save_states(path, {"epoch": 3})
>>> net.load_states(path)
{'epoch': 3}
>>> checkpoint.verify(path).ok
True

See ``docs/checkpoint.md`` for the file format and a how-to.
"""

from singa_lite.checkpoint.async_save import SaveHandle
from singa_lite.checkpoint.loader import load_model_states, open_verified, read_root
from singa_lite.checkpoint.manager import CheckpointManager, Restored
from singa_lite.checkpoint.saver import save_model_states
from singa_lite.checkpoint.singa_zip import read as read_singa_zip
from singa_lite.checkpoint.store import FORMAT, FORMAT_VERSION
from singa_lite.checkpoint.tools import VerifyReport, diff, inspect, verify

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointManager",
    "Restored",
    "SaveHandle",
    "VerifyReport",
    "diff",
    "inspect",
    "load_model_states",
    "open_verified",
    "read_root",
    "read_singa_zip",
    "save_model_states",
    "verify",
]
