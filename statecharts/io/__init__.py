"""Importers and exporters between statecharts and other workflow tools (n8n, ...)."""
