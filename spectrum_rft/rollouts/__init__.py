"""spectrum_rft.rollouts (see spectrum_rft/__init__.py for the layers)."""
