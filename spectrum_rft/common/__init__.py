"""spectrum_rft.common (see spectrum_rft/__init__.py for the layers)."""
