"""spectrum-rft: train memory use into language models with RL (an eval-protocol evaluator for Fireworks RFT).

Layers, lowest first; a module imports only from its own layer or lower ones (tests/test_layers.py):

* ``common``    stdlib helpers (processes, ports)
* ``task``      the task itself: episode types, presets (incl. bench90), seeding, the environment, its tool
                schemas, the scan text format, the reward, the context window
* ``rollouts``  transports around the environment: the in-process processor, the MCP server and client,
                the dataset rows, the row result both evaluation entries return
* ``baselines`` scripted policies, the reward audit, the policies served as litellm models
* ``tools`` / ``training``  the commands (eval, launch, report, bench90, local model; the trainer)
* ``api``       the public names in one module (:mod:`spectrum_rft.api`), each imported from its room on first use

The project root keeps the design card's entry points (``spectrum_adapter.py``, ``spectrum_mcp.py``,
``spectrum_server.py``, ``test_spectrum_*.py``...) as thin public modules; package code never imports them.
"""
