"""Where each name of a candidate is bound, by Python's scoping rules, read off its syntax tree.

Every binding of a name in its scope is recorded with where its value comes from (an
assignment, a loop, a parameter, an import, a ``def``), and every store to an attribute of a
given name anywhere in the module; ``kinds`` infers from these what a name may hold.
Anything that binds a value out of the tree's sight (``vars()``, ``__dict__``, ``setattr``
with a computed name, frame and closure internals, a class passed around as a value so that a
method's ``self`` may be any object) marks the module ``opaque``: nothing is inferred then.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# A kind is the set of things an expression may hold, as bits; 0 means no binding was seen yet.
PY = 1  # a plain Python value: builtin container, str, number, None, function, builtin type
EXT = 2  # the extension module that load_inline returned
OTHER = 4  # anything else, tensors included
UNKNOWN = PY | EXT | OTHER

# Tensor attributes that are tensors: never trusted as `self.<name>`.
_TENSOR_VALUED_ATTRS = {"data", "grad", "_grad", "T", "mT", "H", "mH", "real", "imag", "_base"}
# Names through which values are bound, or classes reached, out of the syntax tree's sight.
_OPAQUE = {"vars", "locals", "globals", "exec", "eval", "__import__", "__builtins__", "delattr", "type",
           "__dict__", "__setattr__", "__getattr__", "__getattribute__", "__class__", "__func__",
           "__get__", "__set__", "__set_name__", "__init_subclass__", "_buffers", "_parameters", "_modules",
           "f_locals", "f_globals", "f_back", "tb_frame", "gi_frame", "cr_frame", "ag_frame", "__code__",
           "__globals__", "__closure__", "cell_contents"}
# Calls that set an attribute named by an argument (a string).
_NAMED_SETTERS = {"setattr": 1, "register_buffer": 0, "register_parameter": 0, "add_module": 0,
                  "register_module": 0}
_NN_MODULE = {"torch.nn.Module", "torch.nn.modules.module.Module"}
_WORD_LIST = re.compile(r"[\w\s,]*")


@dataclass(eq=False)
class Scope:
    node: ast.AST
    parent: Scope | None
    kind: str  # module, class, function or comprehension
    bindings: dict[str, list[tuple]] = field(default_factory=dict)  # name -> sources
    declared: dict[str, str] = field(default_factory=dict)  # name -> global | nonlocal
    self_name: str | None = None
    returns: list[ast.expr | None] = field(default_factory=list)
    plain_result: bool = False  # a generator or coroutine function: its call is a plain object


class Scopes(ast.NodeVisitor):
    """The scopes of one module and the bindings of their names.

    A source says where a value comes from: ``("value", expr)``, ``("item", iterable, scope)``
    (a loop variable), ``("part", source, i)`` (tuple unpacking), ``("kind", k)``, ``("def", node)``
    or ``("import", path)``; each recorded source ends with the scope it is evaluated in.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.module = Scope(tree, None, "module")
        self.scope = self.module
        self.by_node: dict[ast.AST, Scope] = {tree: self.module}
        self.scope_of: dict[ast.AST, Scope] = {}
        self.classes: dict[str, list[Scope]] = {}
        self.attr_stores: dict[str, list[tuple]] = {}
        self.untrusted_attrs: set[str] = set()
        self.defined: set[str] = set()  # attribute names the candidate defines itself
        self.harmless: set[ast.AST] = set()  # class names used only to call, subclass or test
        self.loads: list[ast.Name] = []
        self.self_subscripts: list[tuple[str, Scope]] = []
        self.nonlocals: list[tuple[str, tuple, Scope]] = []
        self.opaque = False
        self.visit(tree)
        self._close()

    # --- questions ---------------------------------------------------------------------------
    def import_path(self, node: ast.expr) -> str | None:
        """``a.b.c`` where ``a`` is bound only by one import: the imported thing's full path."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node not in self.scope_of:
            return None
        paths = {b[1] if b[0] == "import" else None for b in self.bindings(node.id, self.scope_of[node])}
        if len(paths) != 1 or None in paths:
            return None
        return ".".join([paths.pop(), *reversed(parts)])

    def single_value(self, node: ast.Name) -> ast.expr | None:
        """The value of a name that only one plain assignment binds."""
        if self.opaque or node not in self.scope_of:
            return None
        binds = self.bindings(node.id, self.scope_of[node])
        return binds[0][1] if len(binds) == 1 and binds[0][0] == "value" else None

    # --- collecting bindings -----------------------------------------------------------------
    def _bind(self, name: str, source: tuple, owner: Scope | None = None) -> None:
        """``name`` may hold ``source``, evaluated in the current scope."""
        source += (self.scope,)
        owner = owner or self.scope
        decl = owner.declared.get(name)
        if decl == "nonlocal":
            self.nonlocals.append((name, source, owner))
            return
        if decl == "global":
            owner = self.module
        if owner.kind == "class":  # a class attribute, seen as `self.name` by the methods
            self.attr_stores.setdefault(name, []).append(source)
            self.defined.add(name)
        owner.bindings.setdefault(name, []).append(source)

    def _bind_target(self, target: ast.expr, source: tuple) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, source)
        elif isinstance(target, ast.Attribute):
            self.attr_stores.setdefault(target.attr, []).append(source + (self.scope,))
            self.defined.add(target.attr)
        elif isinstance(target, ast.Starred):
            self._bind_target(target.value, ("kind", PY))  # a starred target always gets a list
        elif isinstance(target, (ast.Tuple, ast.List)):
            starred = any(isinstance(elt, ast.Starred) for elt in target.elts)
            for i, elt in enumerate(target.elts):
                # Beside a starred name the others' positions in the value are not known.
                self._bind_target(elt, ("kind", UNKNOWN) if starred else ("part", source, i))
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.self_subscripts.append((target.value.id, self.scope))

    def _enter(self, node: ast.AST, kind: str) -> Scope:
        self.scope = self.by_node[node] = Scope(node, self.scope, kind)
        return self.scope

    def _mark_harmless(self, node: ast.AST | None) -> None:
        if node is not None:
            self.harmless.update(ast.walk(node))

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.expr):
            self.scope_of[node] = self.scope
        super().visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        outer = self.scope
        args = node.args
        for d in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(d)
        if not isinstance(node, ast.Lambda):
            if node.name in _OPAQUE:
                self.opaque = True
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            for annotation in [a.annotation for a in every] + [node.returns]:
                if annotation is not None:
                    self._mark_harmless(annotation)
                    self.visit(annotation)
            for d in node.decorator_list:
                self.visit(d)
            self._bind(node.name, ("def", node) if not node.decorator_list else ("kind", UNKNOWN))
        inner = self._enter(node, "function")
        inner.plain_result = isinstance(node, ast.AsyncFunctionDef)
        positional = args.posonlyargs + args.args
        if outer.kind == "class" and not isinstance(node, ast.Lambda) and not node.decorator_list and positional:
            inner.self_name = positional[0].arg
        for a in positional + args.kwonlyargs:
            self._bind(a.arg, ("kind", UNKNOWN))
        for a in (args.vararg, args.kwarg):
            if a is not None:
                self._bind(a.arg, ("kind", PY))  # *args is a tuple, **kwargs a dict
        if isinstance(node, ast.Lambda):
            inner.returns.append(node.body)
            self.visit(node.body)
        else:
            for stmt in node.body:
                self.visit(stmt)
        self.scope = outer

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._mark_harmless(ast.Tuple(elts=node.bases))
        for n in node.decorator_list + node.bases + [k.value for k in node.keywords]:
            self.visit(n)
        self._bind(node.name, ("kind", UNKNOWN))
        outer = self.scope
        self.classes.setdefault(node.name, []).append(self._enter(node, "class"))
        for stmt in node.body:
            self.visit(stmt)
        self.scope = outer

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        outer = self.scope
        inner = self._enter(node, "comprehension")
        for i, gen in enumerate(node.generators):
            # The first iterable is evaluated outside the comprehension, the others inside.
            where = outer if i == 0 else inner
            self.scope = where
            self.visit(gen.iter)
            self.scope = inner
            self._bind_target(gen.target, ("item", gen.iter, where))
            for cond in gen.ifs:
                self.visit(cond)
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                self.visit(getattr(node, part))
        self.scope = outer

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._bind_target(t, ("value", node.value))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._mark_harmless(node.annotation)
        if node.value is not None:
            self._bind_target(node.target, ("value", node.value))
        elif isinstance(node.target, ast.Name) and self.scope.kind == "class":
            self._bind(node.target.id, ("kind", UNKNOWN))  # a dataclass or NamedTuple field
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, (ast.Name, ast.Attribute)):
            current = (ast.Name(id=node.target.id, ctx=ast.Load()) if isinstance(node.target, ast.Name)
                       else ast.Attribute(value=node.target.value, attr=node.target.attr, ctx=ast.Load()))
            self._bind_target(node.target, ("value", ast.BinOp(left=current, op=node.op, right=node.value)))
        else:
            self._bind_target(node.target, ("kind", UNKNOWN))
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._bind_target(node.target, ("item", node.iter, self.scope))
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, ("kind", UNKNOWN))
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        owner = self.scope
        while owner.kind == "comprehension":  # := in a comprehension binds in the enclosing scope
            owner = owner.parent
        self._bind(node.target.id, ("value", node.value), owner)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            if isinstance(t, ast.Attribute):
                self.untrusted_attrs.add(t.attr)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        module = getattr(node, "module", None) or ""
        for alias in node.names:
            if alias.name == "*":
                self.opaque = True
            elif isinstance(node, ast.Import):
                head = alias.name.split(".")[0]
                self._bind(alias.asname or head, ("import", alias.name if alias.asname else head))
            else:
                self._bind(alias.asname or alias.name, ("import", f"{module}.{alias.name}".lstrip(".")))

    visit_ImportFrom = visit_Import

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.scope.declared[name] = "global" if isinstance(node, ast.Global) else "nonlocal"

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name, ("kind", UNKNOWN))
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs | ast.MatchStar | ast.MatchMapping) -> None:
        name = getattr(node, "name", None) or getattr(node, "rest", None)
        if name:
            self._bind(name, ("kind", UNKNOWN))
        self.generic_visit(node)

    visit_MatchStar = visit_MatchMapping = visit_MatchAs

    def visit_TypeAlias(self, node: ast.AST) -> None:
        self._bind(node.name.id, ("kind", UNKNOWN))

    def visit_Return(self, node: ast.Return) -> None:
        self.scope.returns.append(node.value)
        self.generic_visit(node)

    def visit_Yield(self, node: ast.Yield | ast.YieldFrom) -> None:
        self.scope.plain_result = True
        self.generic_visit(node)

    visit_YieldFrom = visit_Yield

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in _OPAQUE or (node.id in _NAMED_SETTERS and node not in self.harmless):
            self.opaque = True
        if isinstance(node.ctx, ast.Load):
            self.loads.append(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _OPAQUE or (node.attr in _NAMED_SETTERS and node not in self.harmless):
            self.opaque = True
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            # An attribute named by a string (register_buffer("w", ...)) is set out of the tree's
            # sight; so are the fields of namedtuple("T", "shape size").
            self.untrusted_attrs.add(node.value)
            if _WORD_LIST.fullmatch(node.value):
                self.defined.update(node.value.replace(",", " ").split())

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        keywords = {k.arg for k in node.keywords if k.arg}  # SimpleNamespace(w=...) names attributes too
        self.defined |= keywords
        self.untrusted_attrs |= keywords
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in _NAMED_SETTERS:
            at = _NAMED_SETTERS[name]
            named = node.args[at] if len(node.args) > at else None
            if not (isinstance(named, ast.Constant) and isinstance(named.value, str)):
                self.opaque = True
            elif name == "setattr" and len(node.args) == 3:
                self.attr_stores.setdefault(named.value, []).append(("value", node.args[2], self.scope))
                self.defined.add(named.value)
            self.harmless.add(func)
        if isinstance(func, ast.Name):
            self.harmless.add(func)  # calling a class makes an instance: its methods get a real self
            if func.id == "super" and node.args:
                self.harmless.add(node.args[0])
            if func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                self._mark_harmless(node.args[1])
        self.generic_visit(node)

    def _close(self) -> None:
        for name, source, scope in self.nonlocals:
            owner = scope.parent
            while owner.parent is not None and (owner.kind == "class" or name not in owner.bindings):
                owner = owner.parent
            owner.bindings.setdefault(name, []).append(source)
        for node in self.loads:
            # A class used as a value (ModelNew.forward(x), C = ModelNew) can run a method with
            # any object as `self`.
            if node.id in self.classes and node not in self.harmless:
                self.opaque = True
        for name, scope in self.self_subscripts:
            if self.self_scope(name, scope) is not None:
                self.opaque = True  # self[key] = value registers `key` on a container module
        self.untrusted_attrs |= _TENSOR_VALUED_ATTRS

    # --- name resolution (Python's rules: functions skip the class bodies around them) ----------
    def owner(self, name: str, scope: Scope) -> Scope | None:
        decl = scope.declared.get(name)
        if decl == "global":
            return self.module if name in self.module.bindings else None
        if decl is None and name in scope.bindings:
            return scope
        s = scope.parent
        while s is not None:
            if s.kind != "class" and name in s.bindings and s.declared.get(name) != "global":
                return s
            s = s.parent
        return None

    def bindings(self, name: str, scope: Scope) -> list[tuple]:
        owner = self.owner(name, scope)
        return owner.bindings[name] if owner is not None else []

    def self_scope(self, name: str, scope: Scope) -> Scope | None:
        """The method whose ``self`` ``name`` is, when that surely is an instance of a trusted class."""
        owner = self.owner(name, scope)
        if owner is None or owner.self_name != name or len(owner.bindings.get(name, [])) != 1:
            return None
        return owner if self.trusted_class(owner.parent) else None

    def trusted_class(self, cls: Scope, seen: frozenset = frozenset()) -> bool:
        """A class whose instances get attributes only as the tree shows: no decorator or
        metaclass, and bases that are nn.Module, object or trusted classes of the module
        (container modules such as nn.ModuleDict register attributes by key)."""
        node = cls.node
        if node.decorator_list or node.keywords or cls in seen:
            return False
        for base in node.bases:
            if self.import_path(base) in _NN_MODULE:
                continue
            if isinstance(base, ast.Name) and base.id == "object" and self.owner("object", cls) is None:
                continue
            mine = self.classes.get(base.id, []) if isinstance(base, ast.Name) else []
            if len(mine) != 1 or not self.trusted_class(mine[0], seen | {cls}):
                return False
        return True
