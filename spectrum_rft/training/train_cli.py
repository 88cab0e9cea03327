"""``spectrum-rft train``: the spectrum task on TRL (:mod:`.spectrum.trl_run`), or with ``--task gsm8k`` the GSM8K
score-centring card on TRL (:mod:`.card.card`). ``--preset card`` (the card's own settings) is accepted for
``--task gsm8k`` too, as earlier versions named it; ``--preset`` otherwise names the env's band preset."""

from __future__ import annotations

import sys


def _value(argv: list[str], flag: str) -> str | None:
    got = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag), None)
    return next((a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")), got)


def _without(argv: list[str], flag: str) -> list[str]:
    return [a for i, a in enumerate(argv) if a != flag and not a.startswith(flag + "=")
            and not (i > 0 and argv[i - 1] == flag)]


def train_command(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    task = _value(argv, "--task")
    if task not in (None, "spectrum", "gsm8k"):
        print(f"spectrum-rft train: unknown --task {task!r}; choose spectrum or gsm8k", file=sys.stderr)
        return 2
    rest = _without(argv, "--task")
    if task == "gsm8k" or _value(argv, "--preset") == "card":
        from spectrum_rft.training.gsm8k import card  # noqa: PLC0415

        return card.main(rest)
    from spectrum_rft.training.spectrum import trl_run  # noqa: PLC0415

    return trl_run.train_main(rest)
