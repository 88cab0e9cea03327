"""spectrum_rft.tools (see spectrum_rft/__init__.py for the layers)."""
