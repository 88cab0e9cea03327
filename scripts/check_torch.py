"""Say which torch build the install brought, and refuse the wrong one (scripts/install.sh --torch).

    python scripts/check_torch.py [cpu|cuda|any]

Prints one line (``install: torch 2.13.0, CPU build``). With ``cpu`` or ``cuda``, a build of the other kind is
an error (exit 2) with the command that fixes it: pip resolves ``torch==2.13.0`` to whatever its index
serves, a CUDA build (gigabytes) on most indexes, a CPU one only where the CPU wheel is found first.
"""

from __future__ import annotations

import sys

KINDS = ("cpu", "cuda", "any")


def main(argv: list[str]) -> int:
    want = argv[0] if argv else "any"
    if want not in KINDS:
        print(f"install: --torch must be one of {', '.join(KINDS)}, got {want!r}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("install: torch is not installed (the train extra brings it)", file=sys.stderr)
        return 2
    cuda = getattr(torch.version, "cuda", None)
    got = "cuda" if cuda else "cpu"
    print(f"install: torch {torch.__version__}, {'CUDA ' + cuda if cuda else 'CPU'} build")
    if want in ("any", got):
        return 0
    version = torch.__version__.split("+")[0]
    if want == "cpu":
        print(f"install: --torch cpu, but pip installed a CUDA build of torch {version}. Replace it with the CPU "
              f"build: pip install --force-reinstall torch=={version} --index-url <a CPU wheel index of "
              f"PyTorch>, then run this install again", file=sys.stderr)
    else:
        print(f"install: --torch cuda, but pip installed a CPU build of torch {version}. Install the CUDA build "
              f"for your driver first (pip install --force-reinstall torch=={version} --index-url <PyTorch's "
              f"index for your CUDA version>), then run this install again", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
