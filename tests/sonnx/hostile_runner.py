"""Run the hostile models of ``hostile_models`` in child processes, each under an address-space
limit and a timeout per model, and classify what happens to each.

Used by ``test_hostile_fuzz.py``; also a script that runs every case through singa_lite and,
for comparison, onnxruntime::

    python tests/sonnx/hostile_runner.py [--ort] [--mutations N] [--bitflips N]

Each case is a directory holding ``model.onnx`` (and the files and symlinks it refers to) under
``<root>/models/``; the child runs with its working directory ``<root>/cwd``, which holds a
canary file, and ``<root>/outside`` holds another: an audit hook reports every open of either.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_models import CANARY, LIMITS, Case, all_cases

OVER_LIMIT = 4 * LIMITS["max_total_bytes"]  # tracemalloc peak of a case that counts as a leak of a bomb
CASE_TIMEOUT = 20.0  # seconds per case before it counts as a hang
AS_HEADROOM = 2 << 30  # address space a child may add after its imports
_MARK = "@@case "  # the child's report lines (a library may print to stdout too)


# -- the workspace and the child runner --------------------------------------------------------
def write_cases(root: str, cases: list[Case]) -> None:
    """``<root>/models/<i>/model.onnx`` (+ files, links, inputs.npz), ``<root>/cwd/canary.bin``,
    ``<root>/outside/secret.bin``."""
    for d in ("cwd", "outside", "models"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for d, name in (("cwd", "canary.bin"), ("outside", "secret.bin")):
        with open(os.path.join(root, d, name), "wb") as f:
            f.write(CANARY)
    subst = {"{cwd}": os.path.join(root, "cwd"), "{outside}": os.path.join(root, "outside")}
    for i, c in enumerate(cases):
        d = os.path.join(root, "models", str(i))
        os.makedirs(d, exist_ok=True)
        data = c.model
        if b"{cwd}" in data:  # an absolute location: made here, where the directory is known
            m = onnx.load_model_from_string(data)
            for t in m.graph.initializer:
                for e in t.external_data:
                    e.value = e.value.replace("{cwd}", subst["{cwd}"])
            data = m.SerializeToString()
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(data)
        for name, data in c.files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        for name, target in c.links.items():
            for k, v in subst.items():
                target = target.replace(k, v)
            if not os.path.lexists(os.path.join(d, name)):
                os.symlink(target, os.path.join(d, name))
        np.savez(os.path.join(d, "inputs.npz"), *c.inputs)


def _child(root: str, start: int, stop: int, engine: str) -> None:
    """Run cases ``start``..``stop - 1``; one JSON line per case on stdout."""
    import tracemalloc

    os.chdir(os.path.join(root, "cwd"))
    escaped: list[str] = []

    def audit(event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            p = os.fsdecode(args[0])
            if os.path.basename(p) in ("canary.bin", "secret.bin", "environ"):
                escaped.append(p)

    if engine == "singa_lite":
        from singa_lite import SingaLiteError
        from singa_lite.sonnx import SONNXModel, prepare
        from singa_lite.sonnx.limits import Limits

        limits = Limits(**LIMITS)
    else:
        import onnxruntime as ort

        ort.set_default_logger_severity(4)
    with open("/proc/self/statm") as f:
        vm = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + AS_HEADROOM, resource.RLIM_INFINITY))
    sys.addaudithook(audit)
    tracemalloc.start()
    for i in range(start, stop):
        d = os.path.join(root, "models", str(i))
        print(_MARK + json.dumps({"case": i, "start": True}), flush=True)
        with np.load(os.path.join(d, "inputs.npz")) as z:
            feeds = [z[f"arr_{k}"] for k in range(len(z.files))]
        escaped.clear()
        tracemalloc.clear_traces()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        path = os.path.join(d, "model.onnx")
        outcome, error = "ok", ""
        try:
            if engine == "singa_lite":
                try:
                    rep = prepare(path, limits=limits)
                    rep.run(feeds[: len(rep.inputs)])
                finally:
                    m = SONNXModel(path, limits=limits)
                    m.eval()
                    m.forward(*feeds[: len(m.input_names)])
            else:
                sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                sess.run(None, {v.name: a for v, a in zip(sess.get_inputs(), feeds)})
        except BaseException as e:
            error = f"{type(e).__name__}: {str(e)[:200]}"
            chain, memory = e, False
            while chain is not None:
                memory |= isinstance(chain, MemoryError)
                chain = chain.__cause__ or chain.__context__
            if memory:
                outcome = "over-limit"
            elif engine == "singa_lite":
                outcome = "refused" if isinstance(e, SingaLiteError) else "untyped"
            else:
                outcome = "refused" if type(e).__module__.startswith("onnxruntime") else "untyped"
                if "alloc" in str(e).lower() or "bad_alloc" in str(e):
                    outcome = "over-limit"
        peak = tracemalloc.get_traced_memory()[1] - base
        if engine == "singa_lite" and peak > OVER_LIMIT:
            outcome = "over-limit"
        if escaped:
            outcome = "escaped"
        print(
            _MARK
            + json.dumps(
                {"case": i, "outcome": outcome, "error": error, "peak": peak, "escaped": escaped[:3]}
            ),
            flush=True,
        )


def run_cases(root: str, n: int, engine: str = "singa_lite", workers: int = 2) -> list[dict]:
    """Run cases ``0..n-1``, split between ``workers`` child processes at a time (see
    :func:`_run_range`), sorted by case."""
    from concurrent.futures import ThreadPoolExecutor

    bounds = [n * k // workers for k in range(workers + 1)]
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda k: _run_range(root, bounds[k], bounds[k + 1], engine), range(workers)))
    return sorted((r for part in parts for r in part), key=lambda r: r["case"])


def _run_range(root: str, first: int, n: int, engine: str) -> list[dict]:
    """Run cases ``first..n-1`` in one child; a case that crashes its child or passes
    ``CASE_TIMEOUT`` is recorded as such, and a new child goes on after it."""
    results: list[dict] = []
    i = first
    batch = n - first
    while i < n:
        stop = min(n, i + batch)
        cmd = [sys.executable, os.path.abspath(__file__), "_child", root, str(i), str(stop), engine]
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert proc.stdout is not None
        current, buf, deadline = None, b"", time.monotonic() + 60  # imports
        while True:
            ready = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                proc.kill()
                proc.wait()
                results.append(
                    {"case": current if current is not None else i, "outcome": "hang", "error": ""}
                )
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                proc.wait()
                if current is not None:
                    results.append(
                        {"case": current, "outcome": "crash", "error": f"exit status {proc.returncode}"}
                    )
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(_MARK.encode()):
                    continue  # a library writing to stdout
                msg = json.loads(line[len(_MARK) :])
                if msg.get("start"):
                    current, deadline = msg["case"], time.monotonic() + CASE_TIMEOUT
                else:
                    results.append(msg)
                    current = None
        proc.stdout.close()
        done = max((r["case"] for r in results), default=i - 1)
        i = max(i + 1, done + 1) if done >= i else i + 1
    return results


def summary(cases: list[Case], results: list[dict]) -> dict[str, Any]:
    by_case = {r["case"]: r for r in results}
    counts = Counter(r["outcome"] for r in results)
    wrongly_ran = [cases[k].name for k, r in by_case.items() if r["outcome"] == "ok" and cases[k].must_refuse]
    bad = {
        k: v
        for k, v in by_case.items()
        if v["outcome"] in ("untyped", "crash", "hang", "over-limit", "escaped")
    }
    return {
        "counts": dict(counts),
        "wrongly_ran": wrongly_ran,
        "bad": {
            cases[k].name: f"{v['outcome']}: {v.get('error', '')} {v.get('escaped', '')}"
            for k, v in bad.items()
        },
    }


def main(argv: list[str]) -> None:
    if argv and argv[0] == "_child":
        _child(argv[1], int(argv[2]), int(argv[3]), argv[4])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ort", action="store_true", help="also run every case through onnxruntime")
    p.add_argument("--mutations", type=int, default=400)
    p.add_argument("--bitflips", type=int, default=100)
    args = p.parse_args(argv)
    cases = all_cases(args.mutations, args.bitflips)
    with tempfile.TemporaryDirectory() as root:
        write_cases(root, cases)
        for engine in ["singa_lite"] + (["onnxruntime"] if args.ort else []):
            t0 = time.monotonic()
            results = run_cases(root, len(cases), engine)
            s = summary(cases, results)
            kinds = Counter((cases[r["case"]].kind, r["outcome"]) for r in results)
            print(f"\n{engine}: {len(cases)} cases in {time.monotonic() - t0:.1f} s: {s['counts']}")
            for (kind, outcome), k in sorted(kinds.items()):
                print(f"  {kind:9} {outcome:11} {k}")
            print(f"  must refuse, ran: {s['wrongly_ran']}")
            for name, why in sorted(s["bad"].items()):
                print(f"  {name}: {why}")


if __name__ == "__main__":
    main(sys.argv[1:])
