"""Import n8n workflow exports as statecharts, making n8n's silent behaviour visible.

``from_n8n(data)`` returns an ``N8nImport``: the statechart config (and an error-workflow
machine where the workflow has an Error Trigger next to its other triggers), the hidden states
with the node each came from and why, and the named guards, actions, actors and delays to
implement. See docs/n8n.md.
"""

from .importer import N8nImport, from_n8n
from .mapping import HIDDEN_KINDS, HiddenState, Implementation, MachineImport, NodeMapping
from .workflow import N8nFormatError

__all__ = [
    "HIDDEN_KINDS",
    "HiddenState",
    "Implementation",
    "MachineImport",
    "N8nFormatError",
    "N8nImport",
    "NodeMapping",
    "from_n8n",
]
