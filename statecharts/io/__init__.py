"""Readers and writers of other chart formats (each in its own subpackage)."""
