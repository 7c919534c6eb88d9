"""``python -m singa_lite.checkpoint inspect|verify|diff FILE...``.

inspect FILE...   the tree with dtypes, shapes and sizes, the optimizer, RNG, input specs,
                  aux values and the checksum status
verify FILE...    whole-file and per-dataset checksums; exit status 1 if any file is damaged
diff A B          which tensors differ and by how much; exit status 1 if they differ
"""

from __future__ import annotations

import argparse
import json
import sys

from singa_lite.checkpoint import tools
from singa_lite.errors import CheckpointError


def _print_inspect(info: dict) -> None:
    print(f"{info['path']}  (checksum {info['checksum']})")
    for key, value in info.get("root", {}).items():
        print(f"  @{key} = {json.dumps(value)}")
    total = 0
    for key, d in info["datasets"].items():
        total += d["bytes"]
        print(f"  {key:<48} {d['dtype']:<8} {tuple(d['shape'])!s:<20} {d['bytes']:>12,} B")
    print(f"  {len(info['datasets'])} datasets, {total:,} bytes")
    for key in ("optimizer", "rng", "inputs", "aux"):
        if key in info:
            print(f"  {key}: {json.dumps(info[key])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m singa_lite.checkpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("inspect").add_argument("files", nargs="+")
    sub.add_parser("verify").add_argument("files", nargs="+")
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    sub.add_parser("_scan").add_argument("file")  # internal: used by verify in a child process
    args = parser.parse_args(argv)

    if args.cmd == "_scan":
        print(json.dumps(tools.scan_unverified(args.file)))
        return 0
    status = 0
    try:
        if args.cmd == "inspect":
            for f in args.files:
                try:
                    _print_inspect(tools.inspect(f))
                except CheckpointError as e:
                    print(f"{f}: ERROR {e}")
                    status = 1
        elif args.cmd == "verify":
            for f in args.files:
                r = tools.verify(f)
                print(f"{f}: OK ({r.datasets} datasets)" if r.ok else f"{f}: DAMAGED {r.error}")
                for key in r.damaged:
                    print(f"  damaged: {key}")
                status |= not r.ok
        else:
            lines = tools.diff(args.a, args.b)
            print("\n".join(lines) if lines else "no differences")
            status = 1 if lines else 0
    except CheckpointError as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
