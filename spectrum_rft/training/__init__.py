"""spectrum_rft.training (see spectrum_rft/__init__.py for the layers).

This folder holds the TRL plumbing both trainers share (run configuration and GRPOConfig arguments, LoRA,
the tokenizer, the model directory, the run record, the score-centring GRPOTrainer and its losses); the two
products sit one folder down, side by side: ``spectrum/`` (the spectrum task) and ``card/`` (the GSM8K
card). Neither imports the other (tests/test_layers.py)."""
