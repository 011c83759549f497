"""What an expression of a candidate may hold, where the source alone can tell.

Tensor compute methods share their names with methods of plain Python values (``seen.add(k)``,
``keys.sort()``) and with the kernels of the candidate's own extension (``ext.softmax(x)``).
From the bindings ``scopes`` records, this module infers without running anything which
expressions surely hold such a value, so that only a call on a possible tensor counts as
PyTorch compute.

The inference is one-sided: an expression is known only when every way a value can reach it is
known. A name holds what all of its bindings hold, so rebinding it to anything unknown makes it
unknown again; an element read out of a container, a parameter and the result of an unknown
call are unknown; ``self.attr`` holds what every store to an attribute of that name anywhere in
the module holds; in an opaque module nothing is known.
"""

from __future__ import annotations

import ast
import builtins

from .scopes import EXT, OTHER, PY, UNKNOWN, Scope, Scopes

LOAD_INLINE = "torch.utils.cpp_extension.load_inline"
RETURN = "<return>"  # the pseudo-name under which a function's results are kept

_BUILTINS = frozenset(dir(builtins))
# Builtins whose result type the interpreter fixes whatever they are given (len() is always an
# int). abs, min, max, sum, round, pow, divmod, reversed, iter, next and type are left out on
# purpose: given a tensor they return a tensor, or its class.
_PLAIN_CALLS = set(
    "len int float bool str bytes complex repr ascii format hash id ord chr bin oct hex isinstance "
    "issubclass hasattr callable list tuple dict set frozenset sorted range enumerate zip map filter "
    "slice object print".split()
)
_PLAIN_IMPORTED_CALLS = {"collections.defaultdict", "collections.OrderedDict", "collections.Counter",
                         "collections.deque"}
# Methods of builtin containers, strings and numbers whose result is again a plain value.
_PLAIN_METHODS = set(
    "copy keys values items count index union intersection difference symmetric_difference issubset "
    "issuperset isdisjoint fromkeys join split rsplit splitlines strip lstrip rstrip replace format "
    "lower upper title capitalize casefold startswith endswith find rfind partition rpartition encode "
    "decode zfill ljust rjust center isdigit isalpha isalnum isspace isidentifier bit_length "
    "is_integer".split()
)
# What a tensor tells about itself: never a tensor. Trusted only for names the candidate does not
# define itself (its own class with a `shape` property could return anything).
_TENSOR_INFO_ATTRS = {"shape", "ndim", "dtype", "device", "is_cuda", "layout", "requires_grad"}
_TENSOR_INFO_CALLS = {"size", "dim", "ndimension", "numel", "nelement", "stride", "element_size",
                      "data_ptr", "is_contiguous", "item", "tolist", "get_device", "storage_offset"}


class Kinds:
    """What each name, attribute and function result of one module may hold."""

    def __init__(self, scopes: Scopes) -> None:
        self.scopes = scopes
        self.kinds: dict[tuple[Scope, str], int] = {}
        self.attr_kinds: dict[str, int] = {}
        if not scopes.opaque:
            self._solve()

    def not_a_tensor(self, node: ast.expr) -> bool:
        """Whether ``node`` surely holds a plain Python value or the extension module."""
        if self.scopes.opaque or node not in self.scopes.scope_of:
            return False
        kind = self._kind(node, self.scopes.scope_of[node])
        return kind != 0 and not kind & OTHER

    def _solve(self) -> None:
        """Grow every name's kind from nothing until no binding adds to it (kinds only grow)."""
        changed = True
        while changed:
            changed = False
            for scope in self.scopes.by_node.values():
                for name, binds in scope.bindings.items():
                    changed |= _grow(self.kinds, (scope, name), self._join(binds))
                if scope.kind == "function":
                    results = PY if scope.plain_result else self._join(
                        [("value", r, scope) for r in scope.returns or [None]])
                    changed |= _grow(self.kinds, (scope, RETURN), results)
            for attr, binds in self.scopes.attr_stores.items():
                changed |= _grow(self.attr_kinds, attr, self._join(binds))

    def _join(self, sources: list[tuple]) -> int:
        kind = 0
        for source in sources:
            kind |= self._source_kind(source[:-1], source[-1])
        return kind

    def _source_kind(self, source: tuple, scope: Scope) -> int:
        how = source[0]
        if how == "value":
            return PY if source[1] is None else self._kind(source[1], scope)
        if how == "kind":
            return source[1]
        if how == "def":
            return PY
        if how == "item":
            return self._item_kind(source[1], source[2])
        if how == "part":
            return self._part_kind(source[1], source[2], scope)
        return UNKNOWN  # an import: a module may be anything

    def _part_kind(self, source: tuple, i: int, scope: Scope) -> int:
        """Element ``i`` when ``source`` is unpacked into a tuple of names."""
        if source[0] == "value":
            value = source[1]
            if isinstance(value, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in value.elts):
                return self._kind(value.elts[i], scope) if i < len(value.elts) else UNKNOWN
            return PY if self._tensor_info(value, shape_only=True) else UNKNOWN
        if source[0] == "item":
            it, where = source[1], source[2]
            if self._builtin_call(it, where, "enumerate") and it.args and i < 2:
                return PY if i == 0 else self._item_kind(it.args[0], where)
            if self._builtin_call(it, where, "zip") and i < len(it.args):
                return self._item_kind(it.args[i], where)
        return UNKNOWN

    def _item_kind(self, it: ast.expr, scope: Scope) -> int:
        """What iterating over ``it`` yields."""
        if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
            if any(isinstance(e, ast.Starred) for e in it.elts):
                return UNKNOWN
            return self._join([("value", e, scope) for e in it.elts]) if it.elts else PY
        if isinstance(it, ast.Dict):
            if None in it.keys:
                return UNKNOWN
            return self._join([("value", k, scope) for k in it.keys]) if it.keys else PY
        if isinstance(it, (ast.JoinedStr, ast.Constant)):
            return PY
        if any(self._builtin_call(it, scope, f) for f in ("range", "enumerate", "zip")):
            return PY  # ints, or tuples
        if any(self._builtin_call(it, scope, f) for f in ("sorted", "list", "tuple", "set", "frozenset")):
            return self._item_kind(it.args[0], scope) if it.args else PY
        return PY if self._tensor_info(it, shape_only=True) else UNKNOWN

    def _kind(self, node: ast.expr, scope: Scope) -> int:
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            return PY
        if isinstance(node, ast.Name):
            return self._name_kind(node.id, scope)
        if isinstance(node, ast.Attribute):
            if self._tensor_info(node):
                return PY
            method = self.scopes.self_scope(node.value.id, scope) if isinstance(node.value, ast.Name) else None
            if method is None or node.attr in self.scopes.untrusted_attrs or _mangled(node.attr):
                return UNKNOWN
            return self.attr_kinds.get(node.attr, 0)
        if isinstance(node, ast.Call):
            return self._call_kind(node, scope)
        if isinstance(node, ast.BinOp):
            return _plain_if_all([self._kind(node.left, scope), self._kind(node.right, scope)])
        if isinstance(node, ast.UnaryOp):
            return PY if isinstance(node.op, ast.Not) else _plain_if_all([self._kind(node.operand, scope)])
        if isinstance(node, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
                return PY  # always a bool
            return _plain_if_all([self._kind(n, scope) for n in [node.left, *node.comparators]])
        if isinstance(node, ast.BoolOp):
            return self._join([("value", v, scope) for v in node.values])
        if isinstance(node, ast.IfExp):
            return self._join([("value", node.body, scope), ("value", node.orelse, scope)])
        if isinstance(node, ast.NamedExpr):
            return self._kind(node.value, scope)
        if isinstance(node, ast.Subscript):
            return PY if self._tensor_info(node.value, shape_only=True) else UNKNOWN
        return UNKNOWN

    def _call_kind(self, node: ast.Call, scope: Scope) -> int:
        func = node.func
        path = self.scopes.import_path(func)
        if path == LOAD_INLINE:
            return EXT
        if path in _PLAIN_IMPORTED_CALLS or self._tensor_info(node):
            return PY
        if isinstance(func, ast.Name):
            if func.id in _PLAIN_CALLS and self._builtin_call(node, scope, func.id):
                return PY
            binds = self.scopes.bindings(func.id, scope)
            if len(binds) == 1 and binds[0][0] == "def":  # a function of the module: what it returns
                return self.kinds.get((self.scopes.by_node[binds[0][1]], RETURN), 0)
        elif isinstance(func, ast.Attribute):
            receiver = self._kind(func.value, scope)
            if receiver == PY and func.attr in _PLAIN_METHODS:
                return PY
            if receiver == 0:
                return 0
        return UNKNOWN

    def _tensor_info(self, node: ast.expr, shape_only: bool = False) -> bool:
        """``x.shape``, ``x.size(0)``, ``x.numel()``: plain values whatever ``x`` is, unless the
        candidate defines such a name itself or ``x`` is reached through an imported module."""
        if isinstance(node, ast.Attribute):
            names = {"shape"} if shape_only else _TENSOR_INFO_ATTRS
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            names = {"size", "stride"} if shape_only else _TENSOR_INFO_CALLS
            node = node.func
        else:
            return False
        if node.attr not in names or node.attr in self.scopes.defined:
            return False
        root = node.value
        while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
            root = root.func if isinstance(root, ast.Call) else root.value
        if isinstance(root, ast.Name) and root in self.scopes.scope_of:
            return not any(b[0] == "import" for b in self.scopes.bindings(root.id, self.scopes.scope_of[root]))
        return True

    def _builtin_call(self, node: ast.expr, scope: Scope, name: str) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
                and name in _BUILTINS and self.scopes.owner(name, scope) is None)

    def _name_kind(self, name: str, scope: Scope) -> int:
        if _mangled(name):
            return UNKNOWN
        owner = self.scopes.owner(name, scope)
        if owner is None:
            return PY if name in _BUILTINS else UNKNOWN
        kind = self.kinds.get((owner, name), 0)
        if owner.kind == "class":  # a class body reads the outer name until it binds its own
            kind |= self._name_kind(name, owner.parent)
        return kind


def _grow(kinds: dict, key: object, kind: int) -> bool:
    old = kinds.get(key, 0)
    kinds[key] = old | kind
    return kinds[key] != old


def _plain_if_all(kinds: list[int]) -> int:
    if 0 in kinds:
        return 0
    return PY if all(k == PY for k in kinds) else UNKNOWN


def _mangled(name: str) -> bool:
    """Private names live under another spelling (`__x` in class C is `_C__x`): never trusted."""
    return "__" in name.strip("_") or (name.startswith("__") and not name.endswith("__"))
