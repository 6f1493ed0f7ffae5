"""The parser: DistIR text to a ``Module``, with positions kept for every error.

The grammar lives in ``distir.lark`` (LALR). An inline transformer runs with the parser and
builds IR objects directly (no parse tree), resolving names as it goes. A use of a name that
is defined later in the function, or never, is reported at the use; a second definition at
the definition. Checks that need no names (schemas, calls, recursion) are the verifier's.
"""

from __future__ import annotations

import json
import re
import threading
from functools import lru_cache, partial
from importlib import resources
from typing import Any

import numpy as np

from distir._util import no_gc
from distir.errors import Loc, ParseError
from distir.ir.core import CALL, Function, Module, Op, Value
from distir.ir.types import DenseAttr, DType, ScalarType, TensorType, TupleType, Type

__all__ = ["parse_module"]

_DTYPES = {d.value: d for d in DType}
_LOCK = threading.Lock()


def _unquote(tok: Any, file: str) -> str:
    body = tok[1:]
    if body.startswith('"'):
        return _json_string(body, tok, file)
    return body


def _json_string(text: str, tok: Any, file: str) -> str:
    """The value of a quoted string (JSON escapes); a bad escape is a ``ParseError``."""
    try:
        return json.loads(text, strict=False)  # strict=False: a raw tab is fine
    except ValueError as e:
        msg = getattr(e, "msg", str(e))
        raise ParseError(f"bad escape in {tok}: {msg} (strings use JSON escapes: \\\" \\\\ "
                         "\\n \\t \\uXXXX)", Loc(file, tok.line, tok.column)) from None


def _bad_leaf(data: Any, is_float: bool) -> str | None:
    """What is wrong with the leaves of a dense literal: ``"float"`` (a fraction in an
    integer literal), ``"other"`` (a string, dtype or tensor), or ``None``."""
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, float):
            if not is_float:
                return "float"
        elif not isinstance(x, int):  # bools are ints
            return "other"
    return None


class _Item:
    """An argument or attribute of an op application, before the op is built; ``loc`` is
    its token (made a ``Loc`` only for an error)."""

    __slots__ = ("is_attr", "payload", "loc")

    def __init__(self, is_attr: bool, payload: Any, loc: Loc) -> None:
        self.is_attr = is_attr
        self.payload = payload
        self.loc = loc


class _Return:
    __slots__ = ("values", "loc")

    def __init__(self, values: list[Value], loc: Loc) -> None:
        self.values = values
        self.loc = loc


class _Builder:
    """Callbacks for the LALR parser; they fire bottom-up, left to right."""

    def __init__(self, filename: str = "<string>") -> None:
        self.reset(filename)

    def reset(self, filename: str) -> None:
        self.file = filename
        self.functions: list[Function] = []
        self.fn_locs: dict[str, Loc] = {}
        self.pending_calls: list[tuple[Op, str, Loc]] = []
        self.scope: dict[str, Value] = {}
        self.unresolved: list[tuple[str, Loc]] = []

    def loc(self, tok: Any) -> Loc:
        return Loc(self.file, tok.line, tok.column)

    def err(self, msg: str, tok: Any) -> ParseError:
        return ParseError(msg, tok if isinstance(tok, Loc) else self.loc(tok))

    # -- types -------------------------------------------------------------------------
    def _device(self, tok: Any) -> int:
        d = int(tok)
        if d < 0:
            raise self.err(f"device {d} is out of range: devices are integers from 0", tok)
        return d

    def tensor_type(self, c: list) -> Type:
        _, dt, shape, dev = c
        return TensorType(_DTYPES[dt], shape, self._device(dev))

    def scalar_type(self, c: list) -> Type:
        dt, dev = c
        return ScalarType(_DTYPES[dt], self._device(dev))

    def tuple_type(self, c: list) -> Type:
        return TupleType(tuple(c[1:]))

    def shape(self, c: list) -> tuple[int, ...]:
        for tok in c:
            if tok[0] == "-":
                raise self.err(f"dimension {tok} is negative: dimensions are integers from 0",
                               tok)
        return tuple(int(tok) for tok in c)

    # -- attributes ----------------------------------------------------------------------
    def int_attr(self, c: list) -> int:
        return int(c[0])

    def float_attr(self, c: list) -> float:
        return float(c[0])

    def true_attr(self, c: list) -> bool:
        return True

    def false_attr(self, c: list) -> bool:
        return False

    def string_attr(self, c: list) -> str:
        return _json_string(c[0], c[0], self.file)

    def dtype_attr(self, c: list) -> DType:
        return _DTYPES[c[0]]

    def attr_list(self, c: list) -> tuple:
        return tuple(c[1:])

    def dense(self, c: list) -> DenseAttr:
        tok, dt_tok = c[0], c[1]
        shape = c[2] if len(c) == 4 else None
        data = c[-1]
        dt = _DTYPES[dt_tok]
        bad = _bad_leaf(data, dt.is_float)
        if bad == "float":
            raise self.err(f"dense<{dt.value}> literal holds a number with a fraction or "
                           "exponent: write integers, or use a float dtype", tok)
        try:
            if bad is not None:
                raise ValueError(bad)
            arr = np.array(data, dtype=dt.np) if data != () else np.zeros((0,), dt.np)
        except (ValueError, TypeError, OverflowError):
            raise self.err(f"dense<{dt.value}> literal is not a rectangular list of numbers "
                           "that fit the dtype", tok) from None
        if shape is not None:
            n = 1
            for s in shape:
                n *= s
            if arr.size != n:
                raise self.err(f"dense literal has {arr.size} values but shape {shape} "
                               f"needs {n}", tok)
            arr = arr.reshape(shape)
        return DenseAttr.from_array(arr)

    def attr(self, c: list) -> _Item:
        return _Item(True, (str(c[0]), c[1]), c[0])

    # -- statements ----------------------------------------------------------------------
    def use(self, tok: Any) -> Value:
        name = _unquote(tok, self.file)
        v = self.scope.get(name)
        if v is None:
            loc = self.loc(tok)
            self.unresolved.append((name, loc))
            return Value(name, None, loc)
        return v

    def arg(self, c: list) -> _Item:
        tok = c[0]
        if tok.type == "DISCARD":
            return _Item(False, None, tok)
        return _Item(False, self.use(tok), tok)

    def value_name(self, tok: Any) -> str:
        """The name a definition gives; ``""`` and ``"_"`` cannot name a value."""
        name = _unquote(tok, self.file)
        if name == "" or name == "_":
            raise self.err(f"{tok} cannot name a value: a name is not empty, and `_` "
                           "(unquoted, without %) discards a result", tok)
        return name

    def param(self, c: list) -> Value:
        return Value(self.value_name(c[0]), c[1] if len(c) > 1 else None, self.loc(c[0]))

    def params(self, c: list) -> tuple[str, list]:
        return ("params", c)

    def rettypes(self, c: list) -> tuple[str, list]:
        return ("rets", c[1:])

    def result(self, c: list) -> Value:
        tok = c[0]
        ty = c[1] if len(c) > 1 else None
        if tok.type == "DISCARD":
            return Value("_", ty, self.loc(tok))
        return Value(self.value_name(tok), ty, self.loc(tok))

    def define(self, v: Value) -> None:
        name = v.name
        if name == "_":
            return
        prev = self.scope.get(name)  # type: ignore[arg-type]
        if prev is not None:
            where = f" (first defined at {prev.loc.line}:{prev.loc.col})" if prev.loc else ""
            raise ParseError(f"%{name} is already defined{where}: every value is defined "
                             "exactly once; give this one a new name", v.loc)
        self.scope[name] = v  # type: ignore[index]

    def opapp(self, c: list) -> Op:
        name_tok = c[0]
        name = str(name_tok)
        if not name[0].isupper():
            raise self.err(f"'{name}' is not an op name: op names start with a capital "
                           "letter (call a function with `call @name(...)`)", name_tok)
        inputs: list[Value | None] = []
        attrs: dict[str, Any] = {}
        for m in c[1:]:
            if not m.is_attr:
                if attrs:
                    raise self.err("arguments come before attributes: move this value "
                                   "before the first `key=value`", m.loc)
                inputs.append(m.payload)
            else:
                k, v = m.payload
                if k in attrs:
                    raise self.err(f"attribute '{k}' is given twice", m.loc)
                attrs[k] = v
        return Op(name, inputs, attrs or None, loc=self.loc(name_tok))

    def callapp(self, c: list) -> Op:
        call_tok, g = c[0], c[1]
        op = Op(CALL, [m.payload for m in c[2:]], None, loc=self.loc(call_tok))
        self.pending_calls.append((op, _unquote(g, self.file), self.loc(g)))
        return op

    def assign(self, c: list) -> Op:
        op = c[-1]
        results = c[:-1]
        op.outputs = tuple(results)
        for v in results:
            self.define(v)
        return op

    def noresults(self, c: list) -> Op:
        # `() = Op(...)`: an op that gives no results (a projected program's Send on its
        # source device); the verifier rejects it in a user's program.
        op: Op = c[-1]
        op.outputs = ()
        return op

    def ret(self, c: list) -> _Return:
        return _Return([self.use(t) for t in c[1:]], self.loc(c[0]))

    # -- functions -----------------------------------------------------------------------
    def func_head(self, c: list) -> tuple:
        g = c[1]
        params: list[Value] = []
        ret_types = None
        for part in c[2:]:
            if part[0] == "params":
                params = part[1]
            else:
                ret_types = part[1]
        self.scope = {}
        self.unresolved = []
        for p in params:
            self.define(p)
        name = _unquote(g, self.file)
        if name in self.fn_locs:
            prev = self.fn_locs[name]
            raise self.err(f"function @{name} is already defined (at {prev.line}:{prev.col}); "
                           "give this one another name", g)
        self.fn_locs[name] = self.loc(g)
        return name, params, ret_types, self.loc(g)

    def func(self, c: list) -> Function:
        name, params, ret_types, loc = c[0]
        rbrace = c[-1]
        if self.unresolved:
            uname, uloc = self.unresolved[0]
            if uname in self.scope:
                raise ParseError(f"%{uname} is used before it is defined: move its definition "
                                 "above this use", uloc)
            raise ParseError(f"%{uname} is not defined: define it above, or make it a "
                             "parameter of the function", uloc)
        ops: list[Op] = []
        returns: list[Value] | None = None
        for s in c[1:-1]:
            if returns is not None:
                where = s.loc if isinstance(s, _Return) or not s.outputs else (
                    s.outputs[0].loc or s.loc)
                raise ParseError(f"statement after return: `return` must be the last "
                                 f"statement of @{name}", where)
            if isinstance(s, _Return):
                returns = s.values
            else:
                ops.append(s)
        if returns is None:
            raise self.err(f"@{name} has no return: end the function with `return ...`",
                           rbrace)
        fn = Function(name, params, ops, returns, ret_types, loc=loc,
                      end_loc=self.loc(rbrace))
        self.functions.append(fn)
        return fn


class _Tok(str):
    """A token: its text, plus ``type``, ``line`` and ``column`` (from 1)."""

    type: str
    line: int
    column: int


class _BadChar(Exception):
    def __init__(self, char: str, loc: Loc) -> None:
        self.char = char
        self.loc = loc


class _Tables:
    """Lark's LALR tables in a form the driver loop reads fast.

    ``actions[state][terminal]`` is ``(True, next_state)`` for a shift or
    ``(False, (size, callback, origin))`` for a reduce.
    """

    def __init__(self, lark: Any) -> None:
        from lark.parsers.lalr_analysis import Shift

        inner = lark.parser.parser.parser
        table = inner.parse_table
        callbacks = _flat_callbacks(inner.callbacks)
        self.start = table.start_states["start"]
        self.end = table.end_states["start"]
        self.actions: dict[int, dict[str, tuple]] = {}
        for state, acts in table.states.items():
            row: dict[str, tuple] = {}
            for sym, (action, arg) in acts.items():
                if action is Shift:
                    row[str(sym)] = (True, arg)
                else:
                    row[str(sym)] = (False, (len(arg.expansion), callbacks[arg],
                                            str(arg.origin.name)))
            self.actions[state] = row


def _flat_callbacks(callbacks: dict) -> dict:
    """Lark's rule callbacks, with its generated list rules (``__x_star_N``) returning plain
    lists instead of ``Tree`` nodes that the parent unpacks again (about 7% of parse time).

    Falls back to Lark's own callbacks if one has a shape this does not know.
    """
    from lark.parse_tree_builder import ChildFilterLALR_NoPlaceholders

    def flat(include: tuple, build: Any) -> Any:
        def cb(children: list) -> Any:
            out: list = []
            for i, expand in include:
                if expand:
                    if out:
                        out += children[i]
                    else:  # a left-recursive list: grow it in place, as Lark does
                        out = children[i]
                else:
                    out.append(children[i])
            return out if build is None else build(out)

        return cb

    out = {}
    for rule, cb in callbacks.items():
        helper = rule.origin.name.startswith("__")
        if type(cb) is ChildFilterLALR_NoPlaceholders:
            out[rule] = flat(tuple(cb.to_include), None if helper else cb.node_builder)
        elif helper:
            if not (isinstance(cb, partial) and cb.func.__name__ == "default_callback"):
                return callbacks
            out[rule] = _children
        else:
            out[rule] = cb
    return out


def _children(children: list) -> list:
    return children


class _FastLexer:
    """A one-regex lexer over the grammar's own terminals (about 1.4x Lark's own).

    Its patterns come from the terminal definitions in ``distir.lark``; keywords (string
    terminals that an identifier would match, and the dtype names) are found by looking the
    identifier up, so ``func_x`` stays an identifier.
    """

    def __init__(self, conf: Any) -> None:
        self.file = "<string>"
        terms = {t.name: t for t in conf.terminals}
        ident = re.compile(terms["IDENT"].pattern.to_regexp())
        self.keywords: dict[str, str] = {}
        punct = []
        for t in conf.terminals:
            if t.pattern.type == "str":
                if ident.fullmatch(t.pattern.value):
                    self.keywords[t.pattern.value] = t.name
                else:
                    punct.append(t)
        for d in DType:
            self.keywords[d.value] = "DTYPE"
        self.keywords["inf"] = self.keywords["nan"] = "FLOAT"
        order = ["WS", "COMMENT", "LOCAL", "GLOBAL", "FLOAT", "INT", "STRING", "IDENT"]
        parts = [f"(?P<{n}>{terms[n].pattern.to_regexp()})" for n in order]
        punct.sort(key=lambda t: -len(t.pattern.value))
        parts += [f"(?P<{t.name}>{re.escape(t.pattern.value)})" for t in punct]
        # Spaces before a token are part of its match: a line's tokens cost one match each.
        self.regex = re.compile("[ \t]*(?:" + "|".join(parts) + ")")

    def lex(self, text: str) -> Any:
        match = self.regex.match
        kw = self.keywords
        pos, line, line_start, n = 0, 1, 0, len(text)
        while pos < n:
            m = match(text, pos)
            if m is None:
                while pos < n - 1 and text[pos] in " \t":
                    pos += 1
                raise _BadChar(text[pos], Loc(self.file, line, pos - line_start + 1))
            kind = m.lastgroup
            end = m.end()
            if kind == "WS" or kind == "COMMENT":
                nl = text.count("\n", pos, end)
                if nl:
                    line += nl
                    line_start = text.rindex("\n", pos, end) + 1
            else:
                assert kind is not None  # every alternative of the regex is a named group
                val = m.group(kind)
                t = _Tok(val)
                t.column = m.start(kind) - line_start + 1
                if kind == "IDENT":
                    kind = kw.get(val, "IDENT")
                t.type = kind
                t.line = line
                yield t
            pos = end
        t = _Tok("")
        t.type = "$END"
        t.line = line
        t.column = pos - line_start + 1
        yield t


@lru_cache(maxsize=1)
def _lark() -> tuple[_FastLexer, _Tables, _Builder]:
    """Build the grammar once: Lark computes the LALR tables and rule callbacks; our lexer
    and driver loop run them (about twice as fast as Lark's generic loop)."""
    from lark import Lark, Transformer

    grammar = resources.files("distir.ir").joinpath("distir.lark").read_text()
    builder = type("_BuilderT", (_Builder, Transformer), {})()
    lark = Lark(grammar, parser="lalr", lexer="basic", maybe_placeholders=False,
                transformer=builder)
    return _FastLexer(lark.lexer_conf), _Tables(lark), builder


def _drive(tables: _Tables, tokens: Any) -> Any:
    """The LALR loop: shift tokens, reduce with the rule callbacks, return the start value."""
    actions = tables.actions
    end = tables.end
    state = tables.start  # always states[-1]
    states = [state]
    values: list[Any] = []
    for tok in tokens:
        ttype = tok.type
        while True:
            act = actions[state].get(ttype)
            if act is None:
                raise _Unexpected(tok, _expected(actions, states, end))
            if act[0]:
                state = act[1]
                states.append(state)
                values.append(tok)
                break
            size, callback, origin = act[1]
            if size:
                children = values[-size:]
                del states[-size:]
                del values[-size:]
            else:
                children = []
            values.append(callback(children))
            state = actions[states[-1]][origin][1]
            states.append(state)
            if state == end and ttype == "$END":
                return values[-1]
    raise AssertionError("the token stream ended without $END")


def _expected(actions: dict, states: list[int], end: int) -> set[str]:
    """The terminals that the parser would shift next from ``states``.

    LALR merges states, so a state that only reduces lists lookaheads that belong to other
    contexts (a shape inside ``Tensor[...]`` would list ``'>'``, which only ``dense<...>``
    allows); each candidate is checked by running the reductions it triggers.
    """

    def shifts(term: str) -> bool:
        st = list(states)
        while True:
            act = actions[st[-1]].get(term)
            if act is None:
                return False
            if act[0]:
                return True
            size, _, origin = act[1]
            if size:
                del st[-size:]
            nxt = actions[st[-1]].get(origin)
            if nxt is None:
                return False
            st.append(nxt[1])
            if st[-1] == end:
                return term == "$END"

    cands = {s for s in actions[states[-1]] if s.isupper()}
    return {s for s in cands if shifts(s)} or cands


class _Unexpected(Exception):
    def __init__(self, tok: Any, expected: set[str]) -> None:
        self.token = tok
        self.expected = expected


_TERMINAL_WORDS = {
    "LOCAL": "a value like %x",
    "GLOBAL": "a function name like @f",
    "IDENT": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "DTYPE": "a dtype (Float32, Int64, ...)",
    "FUNC": "'func'",
    "RETURN": "'return'",
    "CALL": "'call'",
    "DISCARD": "'_'",
    "TENSOR": "'Tensor'",
    "TUPLE": "'Tuple'",
    "ARROW": "'->'",
    "RBRACE": "'}'",
    "LBRACE": "'{'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "LESSTHAN": "'<'",
    "MORETHAN": "'>'",
    "DENSE": "'dense'",
    "TRUE": "'true'",
    "FALSE": "'false'",
    "$END": "the end of the file",
}


def _words(names: set[str]) -> str:
    ws = sorted({_TERMINAL_WORDS.get(n, n) for n in names})
    if len(ws) == 1:
        return ws[0]
    if len(ws) > 6:
        ws = ws[:6] + ["..."]
    return ", ".join(ws[:-1]) + " or " + ws[-1]


def _syntax_error(e: _Unexpected, filename: str) -> ParseError:
    tok = e.token
    loc = Loc(filename, tok.line, tok.column)
    expected = e.expected
    found = "the end of the file" if tok.type == "$END" else f"'{tok}'"
    if tok.type == "LPAR" and "EQUAL" in expected:
        return ParseError("nested expressions are not allowed: give the inner op its own "
                          "statement (`%t = Op(...)`) and pass %t (one op per line)", loc)
    if tok.type in ("IDENT", "DTYPE") and "LOCAL" in expected and "RBRACE" in expected:
        return ParseError(f"expected a statement (`%name = Op(...)` or `return`), found "
                          f"{found}: value names start with %", loc)
    if tok.type == "RPAR" and expected == {"COMMA"}:
        return ParseError("expected ',', found ')': a one-element shape is written with a "
                          "trailing comma, as in (4,)", loc)
    if tok.type == "$END" and "RBRACE" in expected:
        return ParseError("unexpected end of file: a function is missing its closing '}'", loc)
    return ParseError(f"expected {_words(expected)}, found {found}", loc)


def _char_error(e: _BadChar) -> ParseError:
    hint = ""
    if e.char == '"':
        hint = ": unterminated string (a string ends with \" on the same line)"
    elif e.char == "%":
        hint = ": a value name is %name with letters, digits, _ . $ -, or %\"quoted\""
    elif e.char == "@":
        hint = ": a function name is @name"
    elif e.char == "/":
        hint = ": a comment starts with //"
    return ParseError(f"unexpected character {e.char!r}{hint}", e.loc)


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse ``text`` into a ``Module``; names are resolved, nothing else is checked."""
    lexer, tables, b = _lark()
    with _LOCK, no_gc():
        b.reset(filename)
        lexer.file = filename
        try:
            _drive(tables, lexer.lex(text))
        except _Unexpected as e:
            raise _syntax_error(e, filename) from None
        except _BadChar as e:
            raise _char_error(e) from None
        except RecursionError:
            raise ParseError("the file nests too deeply to parse",
                             Loc(filename, 1, 1)) from None
        functions, pending = b.functions, b.pending_calls
        b.reset(filename)  # drop references to this parse's objects
    fns = {f.name: f for f in functions}
    for op, name, loc in pending:
        callee = fns.get(name)
        if callee is None:
            raise ParseError(f"call to unknown function @{name}: define `func @{name}(...)` "
                             "in this file", loc)
        op.callee = callee
    return Module(functions, filename=filename)
