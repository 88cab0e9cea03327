"""``python -m spectrum_rft <command>``: the same as the ``spectrum-rft`` command."""

from spectrum_rft.tools.cli import main

if __name__ == "__main__":  # not when a worker process (vLLM's engine, spawned) imports this module again
    raise SystemExit(main())
