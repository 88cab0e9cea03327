"""Write spectrum datasets (the design card's entry point; the code is :mod:`spectrum_rft.rollouts.dataset`).

    python make_spectrum_dataset.py --help
"""

from spectrum_rft.rollouts.dataset import dataset_adapter, main, make_rows, write_jsonl

__all__ = ["dataset_adapter", "main", "make_rows", "write_jsonl"]

if __name__ == "__main__":
    raise SystemExit(main(prog="make_spectrum_dataset.py"))
