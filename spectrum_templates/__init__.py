"""Jinja templates of the spectrum task (a package only so that installs ship them)."""
