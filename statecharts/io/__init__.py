"""Readers and writers of other chart and workflow formats, each in its own subpackage
(``scxml``, ``n8n``)."""
