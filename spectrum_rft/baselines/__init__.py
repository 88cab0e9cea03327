"""spectrum_rft.baselines (see spectrum_rft/__init__.py for the layers)."""
