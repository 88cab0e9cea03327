"""Where the task's Jinja templates are (the design card's name). They live in the package,
``spectrum_rft/task/templates/``, beside the scan text format that renders and parses them."""

from spectrum_rft.task.environment import TEMPLATE_DIR

__all__ = ["TEMPLATE_DIR"]
