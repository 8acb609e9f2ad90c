"""Evaluating the Python expressions of an SCXML document.

Untrusted documents (the default) go through ``RestrictedEvaluator``: the text is parsed with
``ast`` and the tree is walked and evaluated here, node by node, against an allow-list. Nothing
is ever handed to ``eval``/``exec``: there are no imports, no names or attributes starting with
``_`` other than the SCXML system variables, no functions beyond ``SAFE_FUNCTIONS`` and a few
methods of ``str``/``dict``/``list``, and results that would grow without bound (``'a' * 10**9``,
``2 ** 10**9``, ``range(10**12)``) are refused. ``TrustedEvaluator`` uses Python's ``eval`` and
``exec`` and is what ``<script>`` needs; a caller opts in with ``load_scxml(..., trusted=True)``.
"""

from __future__ import annotations

import ast
import builtins
import operator
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from xml.etree import ElementTree

from .errors import ExpressionError, ExpressionRefused

MAX_SIZE = 1_000_000
"""The most items an untrusted expression may build: the characters of a string, the items of a
range, or everything inside a list, tuple or dict counted deeply (``[[0] * 1000] * 1000`` holds
a million items even though its length is 1000). Every route that grows a value is checked:
``*``, ``+``, ``sum``, ``str``/``repr`` and f-strings."""
MAX_WORK = 5 * MAX_SIZE
"""The most items one block of executable content (an ``<onentry>``, a transition's body, a
``cond``) may walk or copy in all: size checks, values read into expressions and values stored.
Each expression is held to ``MAX_SIZE``, but a ``<foreach>`` repeats its body once per item, so
without a bound on the whole block a loop over large values takes hours."""
MAX_EXPONENT = 10_000
MAX_BITS = 1_000_000
MAX_FORMAT_WIDTH = 1000

SYSTEM_NAMES = frozenset({"_event", "_sessionid", "_name", "_ioprocessors", "_x"})


class Record(dict[str, Any]):
    """A dict whose keys also read as attributes (``_event.data.aParam``), in both modes."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


XML_KEY = "__xml__"
"""Inline XML data (``<data><books>...</books></data>``) is stored as ``{"__xml__": text}``
(context holds JSON only) and read by expressions as an ElementTree element."""


class Work:
    """The items one block of executable content has walked or copied so far (``MAX_WORK``)."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items = 0

    def charge(self, items: int) -> None:
        """Count ``items`` more; past ``MAX_WORK`` the block is refused."""
        self.items += items
        if self.items > MAX_WORK:
            raise ExpressionRefused(
                f"this block walked over {MAX_WORK} items of data, over the "
                "limit (a loop over large values?)"
            )


_work: ContextVar[Work | None] = ContextVar("scxml_work", default=None)


@contextmanager
def working(work: Work) -> Iterator[None]:
    """Charge what expressions, ``records`` and size checks walk to ``work`` meanwhile."""
    token = _work.set(work)
    try:
        yield
    finally:
        _work.reset(token)


def _charge(items: int) -> None:
    work = _work.get()
    if work is not None:
        work.charge(items)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def records(value: Any) -> Any:
    """``value`` with every mapping turned into a ``Record`` (attribute-readable) and stored
    XML turned into an ElementTree element."""
    if type(value) in _PLAIN:
        return value
    if isinstance(value, Mapping):
        _charge(len(value))
        if len(value) == 1 and isinstance(value.get(XML_KEY), str):
            return ElementTree.fromstring(value[XML_KEY])
        return Record({str(k): records(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        _charge(len(value))
        return [v if type(v) in _PLAIN else records(v) for v in value]
    return value


def _bounded_range(*args: int) -> range:
    result = range(*args)
    if len(result) > MAX_SIZE:
        raise ExpressionRefused(f"range of {len(result)} items is over the limit of {MAX_SIZE}")
    return result


def deep_size(value: Any, limit: int = MAX_SIZE, printed: bool = False) -> int:
    """Characters plus items of ``value``, counted through nested lists, tuples, sets and
    dicts as if every shared part were copied out (``[[0] * 1000] * 1000`` is a million). Each
    distinct container is walked once (its size remembered), so this costs the size of the
    value as it sits in memory, not as it would print; sizes are capped just past ``limit``.

    ``printed``: instead, a lower bound on the characters ``str``/``repr`` would write (each
    item at least one character, two for brackets and for each separator), so a value whose
    text is over the limit is refused before the text is built."""
    if not isinstance(value, _CONTAINERS):
        return _scalar_size(value)
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        item, ready = stack.pop()
        key = id(item)
        if key in sizes:
            continue
        parts = _parts(item)
        if not ready:
            _charge(len(parts))
            visiting.add(key)
            stack.append((item, True))
            for part in parts:
                if isinstance(part, _CONTAINERS) and id(part) not in sizes:
                    if id(part) in visiting:
                        return limit + 1  # a cycle: endless when printed
                    stack.append((part, False))
            continue
        total = 2 + 2 * max(len(parts) - 1, 0) if printed else 1
        for part in parts:
            total += sizes[id(part)] if isinstance(part, _CONTAINERS) else _scalar_size(part)
        sizes[key] = min(total, limit + 1)
        visiting.discard(key)
    return sizes[id(value)]


_CONTAINERS = (list, tuple, set, frozenset, Mapping)


def _parts(item: Any) -> list[Any]:
    if isinstance(item, Mapping):
        return [*item.keys(), *item.values()]
    return list(item)


def _scalar_size(item: Any) -> int:
    return len(item) if isinstance(item, str | bytes) else 1


def _refuse_large(value: Any, what: str) -> None:
    """Refuse to print a value whose text would be over the limit, before printing it."""
    if deep_size(value, printed=True) > MAX_SIZE:
        raise ExpressionRefused(
            f"{what} of this value would give over {MAX_SIZE} characters, over the limit"
        )


def _bounded_str(*args: Any, **kwargs: Any) -> str:
    if args:
        _refuse_large(args[0], "str()")
    return _bounded_text(str(*args, **kwargs), "str()")


def _bounded_repr(value: Any) -> str:
    _refuse_large(value, "repr()")
    return _bounded_text(repr(value), "repr()")


def _bounded_text(text: str, what: str) -> str:
    """The text of a value within the limit (a value of under a million items may still print
    as several million characters)."""
    if len(text) > MAX_SIZE:
        raise ExpressionRefused(
            f"{what} gives {len(text)} characters, over the limit of {MAX_SIZE}"
        )
    return text


def _bounded_sum(items: Any, start: Any = 0) -> Any:
    """``sum``, with lists joined in linear time and the result held to the size limit."""
    if not isinstance(start, list | tuple):
        total = start
        for item in items:
            _check_size(ast.Add(), total, item)
            total = total + item
        return total
    parts = list(items)
    size = deep_size(start)
    known: dict[int, int] = {}  # the same list summed again is not walked again
    for item in parts:
        if type(item) is not type(start):
            raise ExpressionError(
                f"sum: cannot add {type(item).__name__} to {type(start).__name__}"
            )
        if id(item) not in known:
            known[id(item)] = deep_size(item)
        size += known[id(item)]
        if size > MAX_SIZE:  # refused before anything is joined
            raise ExpressionRefused(f"a result of size {size} is over the limit of {MAX_SIZE}")
    joined = list(start)
    for item in parts:
        joined.extend(item)
    return joined if isinstance(start, list) else tuple(joined)


def _safe_hasattr(obj: Any, name: str) -> bool:
    try:
        _attribute(obj, name)
    except (ExpressionError, AttributeError, KeyError):
        return False
    return True


SAFE_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "len": len,
    "str": _bounded_str,
    "int": int,
    "float": float,
    "bool": bool,
    "abs": abs,
    "min": min,
    "max": max,
    "sum": _bounded_sum,
    "round": round,
    "sorted": sorted,
    "list": list,
    "tuple": tuple,
    "dict": dict,
    "set": set,
    "any": any,
    "all": all,
    "range": _bounded_range,
    "enumerate": enumerate,
    "zip": zip,
    "reversed": reversed,
    "repr": _bounded_repr,
    "hasattr": _safe_hasattr,
}
"""The only functions an untrusted expression may call (besides ``In`` and the methods in
``SAFE_METHODS``)."""

SAFE_CONSTANTS: Mapping[str, Any] = {"true": True, "false": False, "null": None}

SAFE_METHODS: Mapping[type, frozenset[str]] = {
    str: frozenset(
        {
            "startswith",
            "endswith",
            "upper",
            "lower",
            "strip",
            "lstrip",
            "rstrip",
            "split",
            "find",
            "rfind",
            "count",
            "index",
            "isdigit",
            "isalpha",
            "isalnum",
            "isspace",
            "title",
            "capitalize",
        }
    ),
    dict: frozenset({"get", "keys", "values", "items"}),
    list: frozenset({"count", "index"}),
    tuple: frozenset({"count", "index"}),
    ElementTree.Element: frozenset(
        {"find", "findall", "findtext", "get", "keys", "items", "tag", "text", "tail", "attrib"}
    ),
}
"""Attributes an untrusted expression may read: these methods only (never ``format``, whose
format strings can walk attributes, nor ``join``/``replace``, whose results can grow far beyond
their inputs)."""

_BINARY: Mapping[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY: Mapping[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.Not: operator.not_,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}
_COMPARE: Mapping[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_ALLOWED_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Call,
    ast.keyword,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.And,
    ast.Or,
    *_BINARY,
    *_UNARY,
    *_COMPARE,
)


class Provided:
    """A function the caller of ``load_scxml`` provided (a named guard): callable from
    untrusted expressions, because the caller chose it."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def check_expression(text: str, functions: frozenset[str] = frozenset()) -> None:
    """Raise ``ExpressionRefused`` if ``text`` uses anything the restricted evaluator refuses
    (``functions``: names of provided functions it may call).

    Syntax errors pass: SCXML reports them as ``error.execution`` when the expression runs.
    """
    try:
        tree = _parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        _check_node(node, functions)


def _parse(text: str) -> ast.Expression:
    """Parse an expression; anything the parser cannot take (too deeply nested, NUL bytes) is
    a ``SyntaxError`` like any other bad expression."""
    with warnings.catch_warnings():  # e.g. "invalid decimal literal": reported as an error
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            return ast.parse(text.strip(), mode="eval")
        except (RecursionError, MemoryError, ValueError) as exc:
            raise SyntaxError(f"cannot parse: {type(exc).__name__}") from None


def _check_node(node: ast.AST, functions: frozenset[str] = frozenset()) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise ExpressionRefused(f"{type(node).__name__} is not allowed in an untrusted expression")
    if isinstance(node, ast.Name) and node.id.startswith("_") and node.id not in SYSTEM_NAMES:
        raise ExpressionRefused(f"the name {node.id!r} is not allowed")
    if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
        raise ExpressionRefused(f"the attribute {node.attr!r} is not allowed")
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id not in SAFE_FUNCTIONS
        and node.func.id != "In"
        and node.func.id not in functions
    ):
        raise ExpressionRefused(
            f"calling {node.func.id!r} is not allowed (allowed: "
            f"{', '.join(sorted([*SAFE_FUNCTIONS, 'In']))})"
        )


class RestrictedEvaluator:
    """Evaluates an allow-listed subset of Python expressions by walking their syntax tree."""

    trusted = False

    def __init__(self, functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.functions: Mapping[str, Callable[..., Any]] = dict(functions or {})
        self._parsed: dict[str, ast.Expression] = {}

    def evaluate(self, text: str, env: Mapping[str, Any]) -> Any:
        """The value of expression ``text`` with the names in ``env``."""
        tree = self._parsed.get(text)
        if tree is None:
            try:
                tree = _parse(text)
            except SyntaxError as exc:
                raise ExpressionError(f"syntax error in {text!r}: {exc.msg}") from None
            for node in ast.walk(tree):
                _check_node(node, frozenset(self.functions))
            self._parsed[text] = tree
        try:
            return _Walker(env).eval(tree.body)
        except ExpressionError:
            raise
        except Exception as exc:  # any failure of the expression itself
            raise ExpressionError(f"{text!r}: {type(exc).__name__}: {exc}") from None

    def execute(self, code: str, env: dict[str, Any]) -> None:
        """Scripts need a trusted document."""
        raise ExpressionRefused("<script> needs a trusted document (load_scxml(..., trusted=True))")


class _Walker:
    def __init__(self, env: Mapping[str, Any]) -> None:
        self.env = env

    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ExpressionRefused(f"{type(node).__name__} is not allowed")
        return method(node)

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _Name(self, node: ast.Name) -> Any:
        name = node.id
        if name in self.env:
            return self.env[name]
        if name in SAFE_FUNCTIONS:
            return SAFE_FUNCTIONS[name]
        if name in SAFE_CONSTANTS:
            return SAFE_CONSTANTS[name]
        raise ExpressionError(f"name {name!r} is not defined")

    def _Attribute(self, node: ast.Attribute) -> Any:
        return _attribute(self.eval(node.value), node.attr)

    def _Subscript(self, node: ast.Subscript) -> Any:
        return self.eval(node.value)[self.eval(node.slice)]

    def _Slice(self, node: ast.Slice) -> slice:
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else self.eval(p) for p in parts))

    def _Call(self, node: ast.Call) -> Any:
        fn = self.eval(node.func)
        if not _callable_allowed(fn, self.env):
            raise ExpressionRefused(f"calling {getattr(fn, '__name__', fn)!r} is not allowed")
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise ExpressionRefused("**kwargs is not allowed")
        return fn(*args, **kwargs)

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.eval(node.left), self.eval(node.right)
        _check_size(node.op, left, right)
        return _BINARY[type(node.op)](left, right)

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        return _UNARY[type(node.op)](self.eval(node.operand))

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        value: Any = None
        for item in node.values:
            value = self.eval(item)
            if isinstance(node.op, ast.And) and not value:
                return value
            if isinstance(node.op, ast.Or) and value:
                return value
        return value

    def _Compare(self, node: ast.Compare) -> bool:
        left = self.eval(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.eval(comparator)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> Any:
        return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)

    def _List(self, node: ast.List) -> list[Any]:
        return [self.eval(e) for e in node.elts]

    def _Tuple(self, node: ast.Tuple) -> tuple[Any, ...]:
        return tuple(self.eval(e) for e in node.elts)

    def _Set(self, node: ast.Set) -> set[Any]:
        return {self.eval(e) for e in node.elts}

    def _Dict(self, node: ast.Dict) -> dict[Any, Any]:
        if any(k is None for k in node.keys):
            raise ExpressionRefused("**mapping is not allowed")
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values) if k is not None}

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        text = "".join(str(self.eval(v)) for v in node.values)
        _refuse_large(text, "an f-string")
        return text

    def _FormattedValue(self, node: ast.FormattedValue) -> str:
        value = self.eval(node.value)
        _refuse_large(value, "formatting")
        if node.conversion == ord("r"):
            value = repr(value)
        elif node.conversion == ord("s"):
            value = str(value)
        spec = self.eval(node.format_spec) if node.format_spec is not None else ""
        _check_format_spec(spec)
        return _bounded_text(format(value, spec), "formatting")


def _attribute(obj: Any, name: str) -> Any:
    if name.startswith("_"):
        raise ExpressionRefused(f"the attribute {name!r} is not allowed")
    if isinstance(obj, Mapping) and name in obj:
        return obj[name]
    for kind, names in SAFE_METHODS.items():
        if isinstance(obj, kind) and name in names:
            return getattr(obj, name)
    if isinstance(obj, Mapping):
        raise ExpressionError(f"no key or attribute {name!r}")
    raise ExpressionRefused(f"the attribute {name!r} of {type(obj).__name__} is not allowed")


def _callable_allowed(fn: Any, env: Mapping[str, Any]) -> bool:
    if (
        any(fn is f for f in SAFE_FUNCTIONS.values())
        or fn is env.get("In")
        or isinstance(fn, Provided)
    ):
        return True
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    return any(isinstance(owner, kind) and name in names for kind, names in SAFE_METHODS.items())


def _check_size(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse operations whose result would exhaust memory or time before building it."""
    if isinstance(op, ast.Pow) and _is_int(left) and _is_int(right) and abs(left) > 1:
        if abs(right) > MAX_EXPONENT or left.bit_length() * abs(right) > MAX_BITS:
            raise ExpressionRefused(f"** {right} is over the size limit")
    elif isinstance(op, ast.LShift) and _is_int(left) and _is_int(right):
        if left.bit_length() + right > MAX_BITS:
            raise ExpressionRefused(f"<< {right} is over the size limit")
    elif isinstance(op, ast.Mult):
        size = _repeat_size(left, right)
        if size > MAX_SIZE:
            raise ExpressionRefused(f"a result of size {size} is over the limit of {MAX_SIZE}")
    elif (
        isinstance(op, ast.Add)
        and isinstance(left, str | bytes | list | tuple)
        and isinstance(right, str | bytes | list | tuple)
    ):
        size = deep_size(left) + deep_size(right)
        if size > MAX_SIZE:
            raise ExpressionRefused(f"a result of size {size} is over the limit of {MAX_SIZE}")
    elif isinstance(op, ast.Mod) and isinstance(left, str | bytes):
        raise ExpressionRefused("printf-style '%' formatting is not allowed (use an f-string)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_format_spec(spec: str) -> None:
    for width in re.findall(r"\d+", spec):
        if int(width) > MAX_FORMAT_WIDTH:
            raise ExpressionRefused(f"format width {width} is over the limit of {MAX_FORMAT_WIDTH}")


def _repeat_size(left: Any, right: Any) -> int:
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple | bytes) and isinstance(count, int):
            return deep_size(seq) * count if count > 0 else 0
    return 0


class TrustedEvaluator:
    """Python's own ``eval``/``exec``, for documents the caller trusts."""

    trusted = True

    def __init__(self, functions: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.functions: Mapping[str, Callable[..., Any]] = dict(functions or {})
        self._code: dict[tuple[str, str], Any] = {}

    def _compiled(self, text: str, mode: str) -> Any:
        key = (text, mode)
        code = self._code.get(key)
        if code is None:
            source = text.strip() if mode == "eval" else _dedent(text)
            try:
                code = self._code[key] = compile(source, "<scxml>", mode)
            except SyntaxError as exc:
                raise ExpressionError(f"syntax error in {text!r}: {exc.msg}") from None
        return code

    def evaluate(self, text: str, env: Mapping[str, Any]) -> Any:
        """The value of ``text`` (trusted: full Python)."""
        code = self._compiled(text, "eval")
        try:
            return eval(code, {"__builtins__": builtins, **SAFE_CONSTANTS}, dict(env))
        except Exception as exc:
            raise ExpressionError(f"{text!r}: {type(exc).__name__}: {exc}") from None

    def execute(self, code: str, env: dict[str, Any]) -> None:
        """Run a ``<script>``; it changes ``env`` in place."""
        compiled = self._compiled(code, "exec")
        namespace: dict[str, Any] = {"__builtins__": builtins, **env}
        try:
            exec(compiled, namespace)
        except Exception as exc:
            raise ExpressionError(f"script: {type(exc).__name__}: {exc}") from None
        env.update({k: v for k, v in namespace.items() if k != "__builtins__"})


def _dedent(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    return "\n".join(line[indent:] for line in lines)


Evaluator = RestrictedEvaluator | TrustedEvaluator
