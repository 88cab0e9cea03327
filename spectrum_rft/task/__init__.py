"""spectrum_rft.task (see spectrum_rft/__init__.py for the layers)."""
