"""Parsing an SCXML document into elements that remember their line.

``parse_document`` uses expat directly (ElementTree drops line numbers) and checks every
element of the SCXML namespace against the elements and attributes this reader supports, so a
typo fails at load time with ``<source>:<line>: ...``. Inline ``<content>`` and ``<data>``
children are kept as they are (any XML).
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from .errors import ScxmlError

logger = logging.getLogger("statecharts.scxml")
SCXML_NS = "http://www.w3.org/2005/07/scxml"
STATECHARTS_NS = "urn:statecharts:scxml"
"""Namespace of ``<sc:action type="name">``: a named action of this engine (``to_scxml``)."""

_EXECUTABLE = frozenset(
    {"raise", "send", "cancel", "assign", "log", "if", "elseif", "else", "foreach", "script"}
)
ELEMENTS: dict[str, frozenset[str]] = {
    "scxml": frozenset({"initial", "name", "version", "datamodel", "binding", "exmode"}),
    "state": frozenset({"id", "initial"}),
    "parallel": frozenset({"id"}),
    "final": frozenset({"id"}),
    "history": frozenset({"id", "type"}),
    "initial": frozenset(),
    "transition": frozenset({"event", "cond", "target", "type"}),
    "onentry": frozenset(),
    "onexit": frozenset(),
    "datamodel": frozenset(),
    "data": frozenset({"id", "src", "expr"}),
    "donedata": frozenset(),
    "param": frozenset({"name", "expr", "location"}),
    "content": frozenset({"expr"}),
    "invoke": frozenset(
        {"type", "typeexpr", "src", "srcexpr", "id", "idlocation", "namelist", "autoforward"}
    ),
    "finalize": frozenset(),
    "raise": frozenset({"event"}),
    "send": frozenset(
        {
            "event",
            "eventexpr",
            "target",
            "targetexpr",
            "type",
            "typeexpr",
            "id",
            "idlocation",
            "delay",
            "delayexpr",
            "namelist",
        }
    ),
    "cancel": frozenset({"sendid", "sendidexpr"}),
    "assign": frozenset({"location", "expr"}),
    "log": frozenset({"label", "expr"}),
    "if": frozenset({"cond"}),
    "elseif": frozenset({"cond"}),
    "else": frozenset(),
    "foreach": frozenset({"array", "item", "index"}),
    "script": frozenset({"src"}),
}
"""Supported elements and their attributes."""

CHILDREN: dict[str, frozenset[str]] = {
    "scxml": frozenset({"state", "parallel", "final", "datamodel", "script"}),
    "state": frozenset(
        {
            "onentry",
            "onexit",
            "transition",
            "initial",
            "state",
            "parallel",
            "final",
            "history",
            "datamodel",
            "invoke",
        }
    ),
    "parallel": frozenset(
        {"onentry", "onexit", "transition", "state", "parallel", "history", "datamodel", "invoke"}
    ),
    "final": frozenset({"onentry", "onexit", "donedata"}),
    "history": frozenset({"transition"}),
    "initial": frozenset({"transition"}),
    "transition": _EXECUTABLE,
    "onentry": _EXECUTABLE,
    "onexit": _EXECUTABLE,
    "finalize": _EXECUTABLE,
    "if": _EXECUTABLE,
    "foreach": _EXECUTABLE,
    "datamodel": frozenset({"data"}),
    "donedata": frozenset({"content", "param"}),
    "invoke": frozenset({"content", "param", "finalize"}),
    "send": frozenset({"content", "param"}),
}
MAX_DEPTH = 100
"""Elements nested deeper than this are refused (a document this deep is hostile or broken;
refusing it keeps every recursive walk over the document and the machine bounded)."""
_ACTION_PARENTS = frozenset({"transition", "onentry", "onexit", "finalize", "if", "foreach"})
_FREE_CONTENT = frozenset({"content", "data", "assign"})  # their children are arbitrary XML


@dataclass
class Element:
    """One XML element: local ``tag``, attributes, children, text and source ``line``."""

    tag: str
    attrs: dict[str, str]
    line: int
    namespace: str = ""
    children: list[Element] = field(default_factory=list)
    text: str = ""
    chunks: list[str] = field(default_factory=list, repr=False, compare=False)

    def get(self, name: str, default: str | None = None) -> str | None:
        """Attribute ``name`` or ``default``."""
        return self.attrs.get(name, default)

    def child_elements(self, *tags: str) -> list[Element]:
        """The children with one of ``tags`` (all children without tags), in order."""
        return [c for c in self.children if not tags or c.tag in tags]

    def xml(self) -> str:
        """This element serialized back to XML text."""
        attrs = "".join(f' {k}="{_escape(v)}"' for k, v in self.attrs.items())
        inner = _escape(self.text) + "".join(c.xml() for c in self.children)
        return f"<{self.tag}{attrs}>{inner}</{self.tag}>"


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def read_source(path_or_text: str | Path) -> tuple[str, str]:
    """(text, source name): a path to a file, or the document text itself."""
    if isinstance(path_or_text, Path):
        return path_or_text.read_text(encoding="utf-8"), str(path_or_text)
    if path_or_text.lstrip().startswith("<"):
        return path_or_text, "<scxml>"
    path = Path(path_or_text)
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except OSError as exc:
        raise ScxmlError(f"{path_or_text}: cannot read the document ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:  # a NUL in the name, a file not UTF-8
        raise ScxmlError(f"{path_or_text!r}: cannot read the document ({exc})") from None


def parse_document(text: str, source: str) -> Element:
    """Parse and check ``text``; the root ``<scxml>`` element."""
    builder = _Builder(source)
    parser = expat.ParserCreate(namespace_separator=" ")
    builder.parser = parser
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    # no entity declarations at all: they are how "billion laughs" documents expand, SCXML
    # needs none, and external ones would read files or URLs
    parser.EntityDeclHandler = builder.entity
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        raise ScxmlError(
            f"{source}:{exc.lineno}: malformed XML: {expat.ErrorString(exc.code)}"
        ) from None
    root = builder.root
    assert root is not None
    if root.tag != "scxml":
        raise ScxmlError(f"{source}:{root.line}: the root element is <{root.tag}>, not <scxml>")
    check(root, source)
    return root


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source
        self.parser: expat.XMLParserType | None = None
        self.stack: list[Element] = []
        self.root: Element | None = None

    def start(self, name: str, attrs: dict[str, str]) -> None:
        namespace, _, tag = name.rpartition(" ")
        assert self.parser is not None
        line = self.parser.CurrentLineNumber
        if len(self.stack) >= MAX_DEPTH:
            path = "/".join(e.tag for e in self.stack[:3])
            raise ScxmlError(
                f"{self.source}:{line}: <{tag}> is nested {len(self.stack) + 1} "
                f"deep ({path}/...); documents nest at most {MAX_DEPTH} elements"
            )
        element = Element(tag, {k.rpartition(" ")[2]: v for k, v in attrs.items()}, line, namespace)
        if self.stack:
            self.stack[-1].children.append(element)
        else:
            self.root = element
        self.stack.append(element)

    def end(self, name: str) -> None:
        element = self.stack.pop()
        if element.chunks:  # joined once: appending to a str chunk by chunk is quadratic
            element.text = "".join(element.chunks)
            element.chunks.clear()

    def data(self, text: str) -> None:
        if self.stack:
            self.stack[-1].chunks.append(text)

    def entity(self, name: str, *args: object) -> None:
        assert self.parser is not None
        raise ScxmlError(
            f"{self.source}:{self.parser.CurrentLineNumber}: the document declares "
            f"the entity {name!r}; SCXML documents may not declare entities"
        )


def check(element: Element, source: str) -> None:
    """Every element known and allowed where it is, every attribute known (recursively)."""
    where = f"{source}:{element.line}"
    if element.namespace == STATECHARTS_NS and element.tag == "action":
        if set(element.attrs) - {"type"} or not element.get("type"):
            raise ScxmlError(f"{where}: <action> takes one attribute, 'type' (the action name)")
        for child in element.children:
            if child.tag != "param":
                raise ScxmlError(f"{source}:{child.line}: <action> takes only <param>")
            check(child, source)
        return
    if element.namespace not in ("", SCXML_NS):
        raise ScxmlError(
            f"{where}: element <{element.tag}> of namespace {element.namespace} is not supported"
        )
    known = ELEMENTS.get(element.tag)
    if known is None:
        raise ScxmlError(f"{where}: unknown element <{element.tag}>{_hint(element.tag, ELEMENTS)}")
    for attr in element.attrs:
        if attr not in known and not attr.startswith("xmlns"):
            # SCXML processors ignore unknown attributes; say so, with the line
            logger.warning(
                "%s: <%s> has no attribute '%s'%s (ignored)",
                where,
                element.tag,
                attr,
                _hint(attr, known),
            )
    if element.tag in _FREE_CONTENT:
        return
    allowed = CHILDREN.get(element.tag, frozenset())
    for child in element.children:
        if child.namespace == STATECHARTS_NS and element.tag not in _ACTION_PARENTS:
            raise ScxmlError(
                f"{source}:{child.line}: <action> is executable content; it "
                f"is not allowed inside <{element.tag}>"
            )
        if child.tag not in allowed and child.tag in ELEMENTS:
            raise ScxmlError(
                f"{source}:{child.line}: <{child.tag}> is not allowed inside <{element.tag}>"
            )
        check(child, source)


def _hint(word: str, options: object) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)  # type: ignore[call-overload]
    return f" (did you mean '{close[0]}'?)" if close else ""
