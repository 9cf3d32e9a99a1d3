"""Plugin discovery and the registries built from the plugin hooks.

Plugins are loaded on first use (never at `import luminal`): core's own `luminal.builtin_plugin`
under the name "luminal-core", then every entry point of the group `luminal.plugins`, filtered by
the comma-separated environment variables `LUMINAL_PLUGINS` (allow list; unset or empty means
all) and `LUMINAL_DISABLE_PLUGINS` (block list). A plugin that fails to import or to register
is recorded with its error (see `plugin_infos()`) and never stops the others from loading.

Registries are built by calling each plugin's hook implementation with a validating `register`
callback. Invalid registrations (wrong type, a name two plugins claim) make the lookups that
depend on that registry raise `PluginError`, naming the plugins involved.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from . import hookspecs
from .backend import Backend, BackendStatus

ENTRY_POINT_GROUP = "luminal.plugins"
CORE_PLUGIN = "luminal-core"
ENV_ALLOW = "LUMINAL_PLUGINS"
ENV_BLOCK = "LUMINAL_DISABLE_PLUGINS"

class PluginError(Exception):
    """A plugin registered something invalid, or two plugins claim the same name."""


@dataclass(frozen=True)
class PluginInfo:
    """A loaded (or failed) plugin: what `luminal plugins` shows."""

    name: str
    version: str | None
    module: str
    hooks: tuple[str, ...]
    registered: dict[str, tuple[str, ...]]  # hook name -> names registered through it
    error: str | None


@dataclass(frozen=True)
class BackendInfo:
    """A registered backend and the result of probing it here."""

    name: str
    plugin: str
    priority: float
    aliases: tuple[str, ...]
    available: bool
    device: str
    reason: str


@dataclass(frozen=True)
class CompilerInfo:
    """A named compiler: `factory(**kwargs)` returns the compiler."""

    name: str
    plugin: str
    factory: Callable[..., Any]
    description: str = ""


@dataclass(frozen=True)
class ModelInfo:
    """A model architecture: `factory(**kwargs)` builds it."""

    name: str
    plugin: str
    factory: Callable[..., Any]
    description: str = ""


@dataclass(frozen=True)
class RulesetInfo:
    """An egglog rule set for the search compiler: `program` is egglog text over the term
    language luminal-search declares (see its README)."""

    name: str
    plugin: str
    program: str
    description: str = ""


@dataclass(frozen=True)
class CommandInfo:
    """A `luminal NAME` subcommand (see `hookspecs.CommandRegistrar`)."""

    name: str
    plugin: str
    help: str
    configure: Callable[..., None] | None
    run: Callable[..., int | None]


@dataclass(frozen=True)
class _BackendEntry:
    name: str
    plugin: str
    backend: Backend


# --------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class _Loaded:
    name: str
    version: str | None
    module: str
    plugin: object | None  # None when loading failed
    error: str | None


@dataclass
class _State:
    pm: pluggy.PluginManager
    loaded: list[_Loaded] = field(default_factory=list)
    registries: dict[str, tuple[object, _Registry]] = field(default_factory=dict)


_lock = threading.RLock()
_state: _State | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide `PluginManager("luminal")`; plugins are discovered on the first call."""
    return _get_state().pm


def reset_plugins() -> None:
    """Forget the plugin manager and every registry; the next use rediscovers plugins.

    For tests (after changing `LUMINAL_PLUGINS`, say). Imported plugin modules stay imported.
    """
    global _state
    with _lock:
        _state = None


def _get_state() -> _State:
    global _state
    with _lock:
        if _state is None:
            pm = pluggy.PluginManager(hookspecs.PROJECT)
            pm.add_hookspecs(hookspecs)
            # Published before loading, so a plugin that calls back into luminal while it is
            # being imported gets the manager instead of starting a second discovery.
            _state = state = _State(pm)
            _load(state, CORE_PLUGIN, _core_version(), "luminal.builtin_plugin",
                  lambda: importlib.import_module("luminal.builtin_plugin"))
            for ep in _selected_entry_points():
                version = ep.dist.version if ep.dist is not None else None
                _load(state, ep.name, version, ep.value, ep.load)
        return _state


def _env_names(var: str) -> set[str]:
    return {name.strip() for name in os.environ.get(var, "").split(",") if name.strip()}


def _selected_entry_points() -> list[importlib.metadata.EntryPoint]:
    allow, block = _env_names(ENV_ALLOW), _env_names(ENV_BLOCK)
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    chosen = [ep for ep in eps if (not allow or ep.name in allow) and ep.name not in block]
    return sorted(chosen, key=lambda ep: ep.name)


def _load(state: _State, name: str, version: str | None, module: str,
          load: Callable[[], object]) -> None:
    pm, plugin, error = state.pm, None, None
    try:
        plugin = load()
        pm.register(plugin, name=name)
        # Checked after each plugin, so a misspelled hook name is blamed on its own plugin.
        pm.check_pending()
    except Exception as exc:
        # pluggy can leave a plugin half-registered when one of its hooks fails validation.
        if plugin is not None and pm.get_plugin(name) is plugin:
            pm.unregister(name=name)
        plugin, error = None, f"{type(exc).__name__}: {exc}"
    state.loaded.append(_Loaded(name, version, module, plugin, error))


def _core_version() -> str | None:
    try:
        return importlib.metadata.version(CORE_PLUGIN)
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return getattr(sys.modules.get(__package__), "__version__", None)


# --------------------------------------------------------------------------- registries


@dataclass
class _Registry:
    entries: dict[str, Any] = field(default_factory=dict)  # every name and alias -> entry
    names: dict[str, list[str]] = field(default_factory=dict)  # plugin -> names it registered
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (plugin, message)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (plugin, message)

    def unique(self) -> list[Any]:
        return list({id(e): e for e in self.entries.values()}.values())

    def check(self) -> _Registry:
        if self.conflicts:
            raise PluginError("\n".join(message for _, message in self.conflicts))
        return self


Add = Callable[[Iterable[Any], Any], None]
ArgumentBuilder = Callable[[str, Add], object]

# hook name -> builder of the validating argument its implementations receive
_ARGUMENTS: dict[str, ArgumentBuilder] = {}


def _argument_of(spec: Callable[..., None]) -> Callable[[ArgumentBuilder], ArgumentBuilder]:
    """Declare `builder(plugin, add)` as what makes the argument of hook `spec`."""

    def declare(builder: ArgumentBuilder) -> ArgumentBuilder:
        _ARGUMENTS[spec.__name__] = builder
        return builder

    return declare


def _check_callable(plugin: str, what: str, obj: object) -> None:
    if not callable(obj):
        raise PluginError(f"plugin {plugin!r} registered {what} = {obj!r}, which is not callable")


@_argument_of(hookspecs.luminal_register_backends)
def _backends_arg(plugin: str, add: Add) -> Callable[[Backend], None]:
    def register(backend: Backend) -> None:
        if isinstance(backend, type) and issubclass(backend, Backend):
            raise PluginError(f"plugin {plugin!r} registered the class {backend.__name__}; "
                              f"register an instance: register({backend.__name__}())")
        if not isinstance(backend, Backend):
            raise PluginError(f"plugin {plugin!r} registered {backend!r} as a backend, "
                              "but it is not a luminal.Backend instance")
        if not isinstance(backend.priority, int | float) or isinstance(backend.priority, bool):
            raise PluginError(f"plugin {plugin!r} registered backend {backend.name!r} with "
                              f"priority {backend.priority!r}, which is not a number")
        add((backend.name, *backend.aliases), _BackendEntry(backend.name, plugin, backend))

    return register


def _declare_factories_arg(spec: Callable[..., None], info: type) -> None:
    """Declare the argument of hook `spec`, whose plugins call `register(name, factory,
    description="")`; each registration becomes `info(name, plugin, factory, description)`."""
    kind = hookspecs.REGISTRATION_HOOKS[spec.__name__]

    @_argument_of(spec)
    def build(plugin: str, add: Add) -> Callable[..., None]:
        def register(name: str, factory: Callable[..., Any], description: str = "") -> None:
            _check_callable(plugin, f"{kind} {name!r}", factory)
            add((name,), info(name, plugin, factory, str(description)))

        return register


_declare_factories_arg(hookspecs.luminal_register_compilers, CompilerInfo)
_declare_factories_arg(hookspecs.luminal_register_models, ModelInfo)


@_argument_of(hookspecs.luminal_register_rulesets)
def _rulesets_arg(plugin: str, add: Add) -> Callable[..., None]:
    def register(name: str, program: str, description: str = "") -> None:
        if not isinstance(program, str) or not program.strip():
            raise PluginError(f"plugin {plugin!r} registered rule set {name!r} with program "
                              f"{program!r}; it must be non-empty egglog text")
        add((name,), RulesetInfo(name, plugin, program, str(description)))

    return register


@_argument_of(hookspecs.luminal_register_commands)
class _Commands:
    """The `cli` object `luminal_register_commands` receives (`hookspecs.CommandRegistrar`)."""

    def __init__(self, plugin: str, add: Add) -> None:
        self._plugin, self._add = plugin, add

    def register(self, name: str, help: str, configure: Callable[..., None] | None,
                 run: Callable[..., int | None]) -> None:
        _check_callable(self._plugin, f"command {name!r} run", run)
        if configure is not None:
            _check_callable(self._plugin, f"command {name!r} configure", configure)
        self._add((name,), CommandInfo(name, self._plugin, str(help), configure, run))


# hook -> (what its names are called in messages, builder of its argument), for every hook
# spec: a spec without a builder fails here, at import, rather than when a plugin uses it
_HOOKS: dict[str, tuple[str, ArgumentBuilder]] = {
    name: (kind, _ARGUMENTS[name]) for name, kind in hookspecs.REGISTRATION_HOOKS.items()
}


def _build(pm: pluggy.PluginManager, hook_name: str) -> _Registry:
    kind, make_arg = _HOOKS[hook_name]
    registry = _Registry()
    # Each implementation is called on its own so that every registration is attributed to
    # the plugin that made it; in registration order, so on a clash the plugin loaded first
    # (core, then entry points by name) keeps the name and the later one is blamed.
    for impl in getattr(pm.hook, hook_name).get_hookimpls():
        if impl.wrapper or impl.hookwrapper:
            continue
        plugin = impl.plugin_name
        staged: dict[str, Any] = {}

        def add(names: Iterable[Any], entry: Any, plugin: str = plugin,
                staged: dict[str, Any] = staged) -> None:
            names = tuple(names)
            for name in names:
                if not isinstance(name, str) or not name:
                    raise PluginError(f"plugin {plugin!r} registered a {kind} named {name!r}; "
                                      "names must be non-empty strings")
                other = registry.entries.get(name) or staged.get(name)
                if other is not None or names.count(name) > 1:
                    owner = other.plugin if other is not None else plugin
                    raise PluginError(
                        f"plugin {plugin!r} registers {kind} name {name!r} twice"
                        if owner == plugin else
                        f"{kind} name {name!r} is registered by both plugin {owner!r} "
                        f"and plugin {plugin!r}")
            staged.update(dict.fromkeys(names, entry))

        try:
            impl.function(**dict.fromkeys(impl.argnames, make_arg(plugin, add)))
        except PluginError as exc:
            registry.conflicts.append((plugin, str(exc)))
        except Exception as exc:
            registry.failures.append((plugin, f"{hook_name} raised {type(exc).__name__}: {exc}"))
            continue  # a hook that crashed contributes nothing
        registry.entries.update(staged)
        registry.names.setdefault(plugin, []).extend(
            e.name for e in {id(e): e for e in staged.values()}.values())
    return registry


def _registry(hook: Callable[..., None] | str) -> _Registry:
    """The registry of a hook spec (or its name), rebuilt when the plugins change."""
    hook_name = hook if isinstance(hook, str) else hook.__name__
    with _lock:
        state = _get_state()
        # Rebuilt whenever the set of registered plugins changes (tests register their own).
        key = tuple((name, id(plugin)) for name, plugin in state.pm.list_name_plugin())
        cached = state.registries.get(hook_name)
        if cached is None or cached[0] != key:
            cached = state.registries[hook_name] = (key, _build(state.pm, hook_name))
        return cached[1]


def _listed(hook: Callable[..., None]) -> list[Any]:
    """Everything registered through `hook`, sorted by name."""
    return sorted(_registry(hook).check().unique(), key=lambda entry: entry.name)


def _failure_hint(registry: _Registry) -> str:
    failed = {x.name for x in _get_state().loaded if x.error} | {p for p, _ in registry.failures}
    if not failed:
        return ""
    return f" ({len(failed)} plugin(s) failed to load: {', '.join(sorted(failed))}; " \
           "run `luminal plugins` for details)"


# --------------------------------------------------------------------------- public lookups


def plugin_infos() -> list[PluginInfo]:
    """Every plugin that was loaded or failed to load, with what it registered.

    Never raises for a misbehaving plugin: its problems are in `PluginInfo.error`.
    """
    state = _get_state()
    registries = {hook: _registry(hook) for hook in _HOOKS}
    records = list(state.loaded)
    known = {id(x.plugin) for x in records}
    # Plugins registered directly with the manager (tests, embedding applications).
    records += [_Loaded(name, None, getattr(p, "__name__", type(p).__qualname__), p, None)
                for name, p in state.pm.list_name_plugin()
                if p is not None and id(p) not in known]
    infos = []
    for rec in records:
        errors = [rec.error] if rec.error else []
        registered: dict[str, tuple[str, ...]] = {}
        hooks: tuple[str, ...] = ()
        if rec.plugin is not None:
            hooks = tuple(sorted(c.name for c in state.pm.get_hookcallers(rec.plugin) or ()))
            for hook, registry in registries.items():
                if registry.names.get(rec.name):
                    registered[hook] = tuple(registry.names[rec.name])
                errors += [m for p, m in registry.conflicts + registry.failures if p == rec.name]
        infos.append(PluginInfo(rec.name, rec.version, rec.module, hooks, registered,
                                "; ".join(errors) or None))
    return infos


def _probe(entry: _BackendEntry) -> BackendInfo:
    try:
        status = entry.backend.probe()
        if not isinstance(status, BackendStatus):
            raise TypeError(f"probe() returned {status!r}, not a BackendStatus")
    except Exception as exc:  # a probe that crashes means the backend cannot run here
        status = BackendStatus(False, reason=f"probe failed: {type(exc).__name__}: {exc}")
    b = entry.backend
    priority = b.priority if status.priority is None else min(b.priority, status.priority)
    return BackendInfo(entry.name, entry.plugin, priority, tuple(b.aliases),
                       status.available, status.device, status.reason)


def _backend_entries() -> list[_BackendEntry]:
    entries = _registry(hookspecs.luminal_register_backends).check().unique()
    return sorted(entries, key=lambda e: (-e.backend.priority, e.name))


def backends() -> list[BackendInfo]:
    """Every registered backend, highest priority here first (a probe may rank its backend
    down for the device it found), each probed for availability."""
    infos = [_probe(e) for e in _backend_entries()]
    return sorted(infos, key=lambda i: -i.priority)


def backend(name: str | None = None) -> Backend:
    """A registered backend by name or alias; with no name, the best available one.

    Raises `ValueError` for an unknown name (listing the installed backends) and
    `RuntimeError` when the backend (or, with no name, every backend) is unavailable here.
    """
    registry = _registry(hookspecs.luminal_register_backends).check()
    entries = _backend_entries()
    if name is None:
        best: tuple[float, _BackendEntry] | None = None
        reasons = []
        for entry in entries:  # static priority order; a probe can only rank its backend down
            if best is not None and entry.backend.priority <= best[0]:
                break
            info = _probe(entry)
            if not info.available:
                reasons.append(f"{info.name}: {info.reason or 'unavailable'}")
            elif best is None or info.priority > best[0]:
                best = (info.priority, entry)
        if best is not None:
            if best[1].backend.name == REFERENCE_BACKEND and reasons:
                _warn_fallback(reasons)
            return best[1].backend
        detail = "; ".join(reasons) if reasons else "none is installed"
        raise RuntimeError(f"no luminal backend is available ({detail})"
                           + _failure_hint(registry))
    entry = registry.entries.get(name)
    if entry is None:
        installed = ", ".join(e.name for e in entries) or "none"
        raise ValueError(f"unknown backend {name!r}; installed backends: {installed}"
                         + _failure_hint(registry))
    info = _probe(entry)
    if not info.available:
        raise RuntimeError(f"backend {entry.name!r} is not available: "
                           f"{info.reason or 'its probe gave no reason'}")
    return entry.backend


class BackendFallbackWarning(RuntimeWarning):
    """`backend()` chose the slow reference backend because the compiled ones cannot run."""


REFERENCE_BACKEND = "reference"
_fallbacks_warned: set[tuple[str, ...]] = set()


def _warn_fallback(reasons: list[str]) -> None:
    """Warn, once per process for the same reasons, that the best backend is the reference
    one; each unavailable backend's reason says how to fix it (install gcc or clang, ...)."""
    key = tuple(reasons)
    with _lock:
        if key in _fallbacks_warned:
            return
        _fallbacks_warned.add(key)
    warnings.warn(
        "luminal is falling back to the NumPy reference backend, tens of times slower than a "
        "compiled one, because none can run here: " + "; ".join(reasons)
        + " (`luminal backends` lists them)", BackendFallbackWarning, stacklevel=3)


def compilers() -> list[CompilerInfo]:
    """Every registered named compiler, sorted by name."""
    return _listed(hookspecs.luminal_register_compilers)


def compiler(name: str, **kwargs: Any) -> Any:
    """Build the compiler registered as `name`: its factory called with `kwargs`."""
    registry = _registry(hookspecs.luminal_register_compilers).check()
    info = registry.entries.get(name)
    if info is None:
        known = ", ".join(c.name for c in compilers()) or "none"
        raise ValueError(f"unknown compiler {name!r}; registered compilers: {known}"
                         + _failure_hint(registry))
    return info.factory(**kwargs)


def models() -> list[ModelInfo]:
    """Every registered model architecture, sorted by name."""
    return _listed(hookspecs.luminal_register_models)


def rulesets() -> list[RulesetInfo]:
    """Every registered egglog rule set for the search compiler, sorted by name."""
    return _listed(hookspecs.luminal_register_rulesets)


def commands() -> list[CommandInfo]:
    """Every registered CLI subcommand, sorted by name (core's included)."""
    return _listed(hookspecs.luminal_register_commands)


__all__ = [
    "CORE_PLUGIN",
    "ENTRY_POINT_GROUP",
    "ENV_ALLOW",
    "ENV_BLOCK",
    "BackendFallbackWarning",
    "BackendInfo",
    "CommandInfo",
    "CompilerInfo",
    "ModelInfo",
    "PluginError",
    "PluginInfo",
    "RulesetInfo",
    "backend",
    "backends",
    "commands",
    "compiler",
    "compilers",
    "get_plugin_manager",
    "models",
    "plugin_infos",
    "reset_plugins",
    "rulesets",
]
