"""spectrum_rft.training (see spectrum_rft/__init__.py for the layers)."""
