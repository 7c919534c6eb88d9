"""Importing singa_lite leaves glibc's allocator alone; tuning it is an explicit opt-in.

Each check runs in a fresh interpreter, since the tuning is process-wide and cannot be undone.
Whether the tuning ran is read from behaviour as well as from the flag: with glibc's defaults
a freed 64 MiB array (over the 32 MiB ceiling of the dynamic mmap threshold) is unmapped at
once; with the tuned thresholds it stays resident for reuse.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc tuning applies to glibc Linux only",
)

# Every child script starts with this helper: the resident set size in bytes.
_RSS = """
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
"""

# Prints whether the flag is set and how much of a freed 64 MiB block stayed resident.
_FREED_BLOCK = """
import json, sys
import numpy as np
{setup}
from singa_lite.backend import numpy as nb
before = rss()
a = np.ones(64 << 20, dtype=np.uint8)
del a
print(json.dumps({{"tuned": nb.MALLOC_TUNED, "kept": rss() - before}}))
"""


def _run(code: str, **env: str) -> dict:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k != "SINGA_LITE_TUNE_MALLOC" and not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))
    }
    out = subprocess.run(
        [sys.executable, "-c", _RSS + textwrap.dedent(code)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_leaves_malloc_untouched():
    r = _run(_FREED_BLOCK.format(setup="import singa_lite"))
    assert r["tuned"] is False
    assert r["kept"] < 16 << 20, f"{r['kept'] / 2**20:.0f} MiB of a freed 64 MiB block stayed resident"


@pytest.mark.parametrize(
    "setup, env",
    [
        ("import singa_lite", {"SINGA_LITE_TUNE_MALLOC": "1"}),
        ("import singa_lite.backend; assert singa_lite.backend.tune_malloc()", {}),
    ],
    ids=["env", "function"],
)
def test_opt_in_tunes_malloc(setup, env):
    r = _run(_FREED_BLOCK.format(setup=setup), **env)
    assert r["tuned"] is True
    assert r["kept"] > 48 << 20, f"only {r['kept'] / 2**20:.0f} MiB of a freed 64 MiB block stayed resident"


# An MLP of six 4096 x 4096 float32 Linear layers (403 MB of params), built by compile().
_BUILD_MODEL = """
import json
import numpy as np
from singa_lite import layer, model, tensor

class Wide(model.Model):
    def __init__(self):
        super().__init__()
        self.fc0, self.fc1, self.fc2 = layer.Linear(4096), layer.Linear(4096), layer.Linear(4096)
        self.fc3, self.fc4, self.fc5 = layer.Linear(4096), layer.Linear(4096), layer.Linear(4096)

    def forward(self, x):
        for fc in (self.fc0, self.fc1, self.fc2, self.fc3, self.fc4, self.fc5):
            x = fc(x)
        return x

x = tensor.from_numpy(np.ones((2, 4096), np.float32))
m = Wide()
before = rss()
m.compile([x], is_train=False, use_graph=False)
params = sum(p.data.nbytes for p in m.get_params().values())
print(json.dumps({"params": params, "grown": rss() - before}))
"""


@pytest.mark.slow
def test_building_a_400mb_model_keeps_little_beyond_its_params():
    r = _run(_BUILD_MODEL)
    assert r["params"] > 400e6
    ratio = r["grown"] / r["params"]
    assert ratio <= 1.15, f"building {r['params'] / 1e6:.0f} MB of params left {ratio:.2f}x resident"
