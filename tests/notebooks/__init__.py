"""Executing the notebooks (a package, so its conftest has a unique module name)."""
