"""Diagrams for the pages: the renderer's SVG of a workflow, with a run's active states
highlighted (run page) or with the number of runs in each state as a heat map (workflow page).

The SVG comes from `statecharts.render.to_svg` (Graphviz). Before it is put inline into a page
it is parsed and cleaned (no scripts, event handlers or javascript: links can survive), and each
state's box is linked to the runs list filtered by that state. Graphviz runs as a subprocess, so
results are cached by what they depend on.
"""

from __future__ import annotations

import re
import threading
import xml.etree.ElementTree as ET
from collections import OrderedDict
from collections.abc import Callable, Mapping
from urllib.parse import urlencode

import orjson

from statecharts import Machine, Snapshot
from statecharts.render import GraphvizNotFound, to_svg

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", XLINK_NS)
_SHAPES = (f"{{{SVG_NS}}}path", f"{{{SVG_NS}}}polygon", f"{{{SVG_NS}}}ellipse")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
HEAT_FILLS = ("#fff4e6", "#ffe0c2", "#ffc999", "#ffad6b", "#f7893b")
"""Heat-map fills from few runs to most runs (light to dark orange)."""


class DiagramUnavailable(Exception):
    """No diagram can be drawn (Graphviz missing, or the definition is not loaded here)."""


class SvgCache:
    """A small thread-safe LRU of rendered SVG text."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...], make: Callable[[], str]) -> str:
        """The cached value for `key`, made (outside the lock) on a miss."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


def _svg(machine: Machine, snapshot: Snapshot | None) -> str:
    try:
        return to_svg(machine, snapshot)
    except GraphvizNotFound as exc:
        raise DiagramUnavailable(str(exc)) from exc


def run_svg(
    cache: SvgCache,
    machine: Machine,
    snapshot: Snapshot,
    state_link: Callable[[str], str],
    children: Mapping[str, tuple[str, str]] | None = None,
) -> str:
    """The diagram with the run's active states highlighted (by the renderer), cleaned; each
    state in `children` (path -> (text, link)) shows its child run's state inside its box,
    linked to the child's page."""
    persisted = machine.persist(snapshot)
    key = (
        "run",
        machine.fingerprint,
        orjson.dumps(
            [
                persisted.get("value"),
                persisted.get("status"),
                persisted.get("retries"),
                children or {},
            ],
            option=orjson.OPT_SORT_KEYS,
        ).decode(),
    )
    return cache.get(
        key, lambda: _finish(_svg(machine, snapshot), machine, state_link, {}, children or {})
    )


def heat_svg(
    cache: SvgCache, machine: Machine, counts: Mapping[str, int], state_link: Callable[[str], str]
) -> str:
    """The diagram with each state's box filled by how many runs are in it (`counts` by leaf
    path relative to the root) and labelled with the number."""
    key = (
        "heat",
        machine.fingerprint,
        orjson.dumps(dict(counts), option=orjson.OPT_SORT_KEYS).decode(),
    )
    base = cache.get(("plain", machine.fingerprint), lambda: _svg(machine, None))
    return cache.get(key, lambda: _finish(base, machine, state_link, counts))


def heat_fill(count: int, most: int) -> str:
    """The fill for a state holding `count` of at most `most` runs in one state."""
    if count <= 0 or most <= 0:
        return "#ffffff"
    step = min(len(HEAT_FILLS) - 1, (count * len(HEAT_FILLS) - 1) // most)
    return HEAT_FILLS[step]


def _finish(
    svg_text: str,
    machine: Machine,
    state_link: Callable[[str], str],
    counts: Mapping[str, int],
    children: Mapping[str, tuple[str, str]] | None = None,
) -> str:
    """Clean the SVG, link state boxes, paint the heat map; return it without the XML
    prolog, ready to go inline."""
    root = ET.fromstring(svg_text.encode())
    _clean(root)
    prefix = machine.id + "."
    most = max(counts.values(), default=0)
    for group in root.iter(f"{{{SVG_NS}}}g"):
        if group.get("class") != "node":
            continue
        title = group.find(f"{{{SVG_NS}}}title")
        state_id = title.text if title is not None and title.text else ""
        if not state_id.startswith(prefix) or "::" in state_id:
            continue
        path = state_id[len(prefix) :]
        group.set("data-state", path)
        _link(group, state_link(path))
        if counts:
            _paint(group, counts.get(path, 0), most)
        if children and path in children:
            _child_note(group, *children[path])
    root.set("role", "img")
    root.set("class", "diagram")
    return ET.tostring(root, encoding="unicode")


def _clean(root: ET.Element) -> None:
    """Drop anything executable: script/foreignObject elements, on* attributes, links that
    are not plain page links. Graphviz does not write these; this keeps it so whatever a
    definition's labels contain."""
    for parent in list(root.iter()):
        for child in list(parent):
            tag = child.tag.rsplit("}", 1)[-1].lower()
            if tag in ("script", "foreignobject", "iframe", "object", "embed"):
                parent.remove(child)
        for name in list(parent.attrib):
            local = name.rsplit("}", 1)[-1].lower()
            value = parent.attrib[name].strip().lower()
            if local.startswith("on") or (local == "href" and not value.startswith(("/", "#"))):
                del parent.attrib[name]


def _link(group: ET.Element, href: str) -> None:
    """Make the state's box a link (Graphviz wraps tooltipped nodes in an <a>)."""
    anchor = next(group.iter(f"{{{SVG_NS}}}a"), None)
    if anchor is not None:
        anchor.set(f"{{{XLINK_NS}}}href", href)
        anchor.set("href", href)


def _paint(group: ET.Element, count: int, most: int) -> None:
    shape = next(
        (el for el in group.iter() if el.tag in _SHAPES and el.get("fill") not in (None, "none")),
        None,
    )
    if shape is None:
        return
    shape.set("fill", heat_fill(count, most))
    group.set("data-runs", str(count))
    if count <= 0:
        return
    _pill(group, group, shape, f"{count} run{'s' if count != 1 else ''}", "#7a2e00", "heat-count")


def _child_note(group: ET.Element, text: str, href: str) -> None:
    """The state's child run (its workflow and state) as a pill on the box, linked to it."""
    shape = next((el for el in group.iter() if el.tag in _SHAPES), None)
    if shape is None:
        return
    link = ET.SubElement(
        group, f"{{{SVG_NS}}}a", {"href": href, f"{{{XLINK_NS}}}href": href, "class": "child-run"}
    )
    ET.SubElement(link, f"{{{SVG_NS}}}title").text = f"child run {text}"
    _pill(group, link, shape, text, "#1f4e79", "child-run-state")


def _pill(
    group: ET.Element, parent: ET.Element, shape: ET.Element, text: str, fill: str, css: str
) -> None:
    """A dark pill with `text` on `shape`'s top-right corner (readable over borders and
    arrows alike), added to `parent`; `css` names its text (and `<css>-bg` its background)."""
    box = _bounds(shape)
    if box is None:
        return
    _, top, right, _ = box
    group.set(f"data-{css}", text)
    width = 7.0 * len(text) + 10
    ET.SubElement(
        parent,
        f"{{{SVG_NS}}}rect",
        {
            "x": f"{right - width + 6:.1f}",
            "y": f"{top - 9:.1f}",
            "width": f"{width:.1f}",
            "height": "16",
            "rx": "8",
            "fill": fill,
            "class": f"{css}-bg",
        },
    )
    badge = ET.SubElement(
        parent,
        f"{{{SVG_NS}}}text",
        {
            "x": f"{right + 6 - width / 2:.1f}",
            "y": f"{top + 3:.1f}",
            "text-anchor": "middle",
            "font-family": "Helvetica,Arial,sans-serif",
            "font-size": "11",
            "font-weight": "bold",
            "fill": "#ffffff",
            "class": css,
        },
    )
    badge.text = text


def _bounds(shape: ET.Element) -> tuple[float, float, float, float] | None:
    """(left, top, right, bottom) of a Graphviz path/polygon/ellipse."""
    if shape.tag.endswith("ellipse"):
        cx, cy = float(shape.get("cx", 0)), float(shape.get("cy", 0))
        rx, ry = float(shape.get("rx", 0)), float(shape.get("ry", 0))
        return cx - rx, cy - ry, cx + rx, cy + ry
    numbers = [float(n) for n in _NUMBER.findall(shape.get("d") or shape.get("points") or "")]
    xs, ys = numbers[0::2], numbers[1::2]
    if not xs or not ys:
        return None
    return min(xs), min(ys), max(xs), max(ys)


def runs_link(workflow: str) -> Callable[[str], str]:
    """The runs-list URL for a state of `workflow` (used to link the diagram's boxes)."""
    return lambda path: "/?" + urlencode({"workflow": workflow, "state": path})
