"""Plugin discovery, for real and in-process.

The subprocess tests pip-install the fixture distributions in tests/fixtures/ into a target
directory and run a fresh interpreter on it, so entry points are read from real dist-info.
The in-process tests register plugin objects directly to exercise the registries.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from luminal import cli, hookspecs, plugins
from luminal.backend import Backend, BackendStatus
from luminal.hookspecs import hookimpl
from luminal.plugins import PluginError

ROOT = Path(__file__).resolve().parents[1]
CORE_SRC = ROOT / "packages" / "luminal-core" / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOY_HOOKS = ["luminal_register_backends", "luminal_register_commands",
             "luminal_register_compilers"]


# --------------------------------------------------------------------------- real installs


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding pip-installed luminal-toyplugin and luminal-brokenplugin."""
    root = tmp_path_factory.mktemp("plugin-dists")
    sources = []
    for name in ("luminal-toyplugin", "luminal-brokenplugin"):
        # setuptools writes build/ and *.egg-info into the source tree: build from a copy.
        shutil.copytree(FIXTURES / name, root / name)
        sources.append(str(root / name))
    site = root / "site"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(site), *sources],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def run_python(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a fresh interpreter that sees core's sources and `site`, with no LUMINAL_* set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    clean["PYTHONPATH"] = os.pathsep.join([str(site), str(CORE_SRC)])
    return subprocess.run([sys.executable, *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def run_luminal(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_python(site, "-m", "luminal", *args, **env)


def plugins_json(site: Path, **env: str) -> dict[str, dict]:
    result = run_luminal(site, "plugins", "--json", **env)
    assert result.returncode == 0, result.stderr
    return {p["name"]: p for p in json.loads(result.stdout)}


def test_installed_plugins_are_listed(plugin_site: Path) -> None:
    infos = plugins_json(plugin_site)

    toy = infos["luminal-toyplugin"]
    assert toy["version"] == "0.1.0"
    assert toy["module"] == "luminal_toyplugin.plugin"
    assert toy["hooks"] == TOY_HOOKS
    assert toy["registered"] == {"luminal_register_backends": ["toy"],
                                 "luminal_register_compilers": ["toy-noop"],
                                 "luminal_register_commands": ["toy-hello"]}
    assert toy["error"] is None

    broken = infos["luminal-brokenplugin"]
    assert broken["version"] == "0.1.0"
    assert broken["error"] == "ImportError: luminal-brokenplugin is broken on purpose"
    assert broken["hooks"] == [] and broken["registered"] == {}

    core = infos["luminal-core"]
    assert core["module"] == "luminal.builtin_plugin"
    assert core["registered"]["luminal_register_commands"] == ["plugins", "backends"]
    # Whether or not core's reference backend imports, a failure is reported, never fatal.
    if "luminal_register_backends" not in core["registered"]:
        assert "luminal_register_backends raised" in core["error"]


def test_core_registers_reference_backend_and_generic_compiler(plugin_site: Path) -> None:
    core = plugins_json(plugin_site)["luminal-core"]
    assert core["error"] is None
    assert core["registered"]["luminal_register_backends"] == ["reference"]
    assert core["registered"]["luminal_register_compilers"] == ["generic"]


def test_backends_json_lists_toy(plugin_site: Path) -> None:
    result = run_luminal(plugin_site, "backends", "--json")
    assert result.returncode == 0, result.stderr
    found = {b["name"]: b for b in json.loads(result.stdout)}
    assert found["toy"] == {"name": "toy", "plugin": "luminal-toyplugin", "priority": -1,
                            "aliases": ["toy-alias"], "available": True,
                            "device": "toy device", "reason": ""}
    assert found["reference"]["available"] is True
    assert list(found).index("reference") < list(found).index("toy")  # priority 0 > -1


def test_backends_table(plugin_site: Path) -> None:
    result = run_luminal(plugin_site, "backends")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "AVAILABLE", "PRIORITY", "PLUGIN", "DEVICE", "/",
                                "REASON"]
    assert ["toy", "yes", "-1", "luminal-toyplugin", "toy", "device"] in \
        [line.split() for line in lines]


def test_plugins_table_shows_load_error(plugin_site: Path) -> None:
    result = run_luminal(plugin_site, "plugins")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows["luminal-toyplugin"].rstrip().endswith("ok")
    assert "backends: toy; compilers: toy-noop" in rows["luminal-toyplugin"]
    assert "error: ImportError: luminal-brokenplugin is broken on purpose" in \
        rows["luminal-brokenplugin"]


def test_plugin_command_runs(plugin_site: Path) -> None:
    result = run_luminal(plugin_site, "toy-hello", "--name", "tests")
    assert (result.returncode, result.stdout) == (0, "hello tests from the toy plugin\n")
    assert "toy-hello" in run_luminal(plugin_site, "--help").stdout


def test_usage_errors_exit_2(plugin_site: Path) -> None:
    for args in [(), ("no-such-command",), ("backends", "--no-such-flag")]:
        result = run_luminal(plugin_site, *args)
        assert result.returncode == 2, args
        assert result.stdout == "" and "usage: luminal" in result.stderr


def test_help_exits_0(plugin_site: Path) -> None:
    result = run_luminal(plugin_site, "--help")
    assert result.returncode == 0
    assert "LUMINAL_PLUGINS" in result.stdout and "plugins" in result.stdout


@pytest.mark.parametrize(("env", "expected"), [
    ({"LUMINAL_PLUGINS": "luminal-toyplugin"}, {"luminal-core", "luminal-toyplugin"}),
    ({"LUMINAL_PLUGINS": " luminal-brokenplugin , not-installed "},
     {"luminal-core", "luminal-brokenplugin"}),
    ({"LUMINAL_PLUGINS": ""}, {"luminal-core", "luminal-toyplugin", "luminal-brokenplugin"}),
    ({"LUMINAL_DISABLE_PLUGINS": "luminal-brokenplugin"}, {"luminal-core", "luminal-toyplugin"}),
    ({"LUMINAL_PLUGINS": "luminal-toyplugin,luminal-brokenplugin",
      "LUMINAL_DISABLE_PLUGINS": "luminal-toyplugin"}, {"luminal-core", "luminal-brokenplugin"}),
])
def test_allow_and_block_lists(plugin_site: Path, env: dict[str, str],
                               expected: set[str]) -> None:
    names = set(plugins_json(plugin_site, **env))
    # Other distributions installed in this environment may add plugins, never remove ours.
    if env.get("LUMINAL_PLUGINS"):
        assert names == expected
    else:
        assert expected <= names
        assert not ({"luminal-toyplugin", "luminal-brokenplugin"} - expected) & names


def test_loading_is_lazy_and_isolated(plugin_site: Path) -> None:
    code = textwrap.dedent("""
        import sys
        import luminal, luminal.plugins as p
        assert "luminal_toyplugin.plugin" not in sys.modules, "loaded at import"
        assert p.backend("toy").name == "toy"  # the broken plugin does not get in the way
        assert "luminal_toyplugin.plugin" in sys.modules
    """)
    result = run_python(plugin_site, "-c", code)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("first", [
    "lm.backends(); lm.backend('reference')",
    "from luminal.reference import ReferenceBackend",
    "import luminal.reference, luminal.pipeline, luminal.passes",
])
def test_registry_functions_are_functions(plugin_site: Path, first: str) -> None:
    # lm.backend/backends/compiler/compilers are the plugin lookups; no module of core shares
    # one of their names, so importing any module can never replace them.
    code = f"import luminal as lm\n{first}\n" \
           "assert all(map(callable, (lm.backend, lm.backends, lm.compiler, lm.compilers)))\n" \
           "assert 'reference' in [b.name for b in lm.backends()]\n" \
           "assert type(lm.compiler('generic')).__name__ == 'GenericCompiler'\n" \
           "assert 'generic' in [c.name for c in lm.compilers()]"
    result = run_python(plugin_site, "-c", code)
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- in process


@pytest.fixture
def pm(monkeypatch: pytest.MonkeyPatch):
    """A fresh plugin manager with core's plugin only, whatever else is installed here."""
    monkeypatch.setenv("LUMINAL_PLUGINS", "no-such-plugin-in-tests")
    monkeypatch.delenv("LUMINAL_DISABLE_PLUGINS", raising=False)
    plugins.reset_plugins()
    yield plugins.get_plugin_manager()
    plugins.reset_plugins()


def make_backend(name: str, priority: int = 0, available: bool = True, reason: str = "",
                 aliases: tuple[str, ...] = (), probed_priority: float | None = None) -> Backend:
    def probe(self: Backend) -> BackendStatus:
        return BackendStatus(available, device=f"{name}-device" if available else "",
                             reason=reason, priority=probed_priority)

    cls = type(f"Backend_{name}", (Backend,),
               {"name": name, "priority": priority, "aliases": aliases, "probe": probe})
    return cls()


def make_plugin(**hooks) -> types.SimpleNamespace:
    """A plugin object: make_plugin(backends=lambda register: ...) implements the hook
    luminal_register_backends, and so on."""
    plugin = types.SimpleNamespace()
    for short, fn in hooks.items():
        setattr(plugin, f"luminal_register_{short}", hookimpl(fn))
    return plugin


def registering(*backends: Backend) -> types.SimpleNamespace:
    def register_all(register):
        for b in backends:
            register(b)

    return make_plugin(backends=register_all)


def test_priority_orders_backends_and_default_choice(pm) -> None:
    pm.register(registering(make_backend("t-low", 1), make_backend("t-mid", 5)), name="a")
    pm.register(registering(make_backend("t-high", 10, available=False, reason="no device")),
                name="b")
    mine = [b.name for b in plugins.backends() if b.name.startswith("t-")]
    assert mine == ["t-high", "t-mid", "t-low"]
    assert plugins.backend().name == "t-mid"  # t-high is unavailable
    assert plugins.backends()[0].reason == "no device"


def test_probe_can_rank_its_backend_down(pm) -> None:
    # Like OpenCL on a CPU device: registered above t-mid, ranked below it once probed.
    pm.register(registering(make_backend("t-mid", 5), make_backend("t-low", 1),
                            make_backend("t-gpu-api", 10, probed_priority=3),
                            make_backend("t-liar", 7, probed_priority=99)), name="a")
    mine = [(b.name, b.priority) for b in plugins.backends() if b.name.startswith("t-")]
    assert mine == [("t-liar", 7), ("t-mid", 5), ("t-gpu-api", 3), ("t-low", 1)]
    assert plugins.backend().name == "t-liar"  # a probe can lower its rank, never raise it


def test_best_backend_stops_probing_once_nothing_can_outrank(pm) -> None:
    probed = []
    top, low = make_backend("t-top", 10), make_backend("t-below", 5)
    low.probe = lambda: probed.append("t-below") or BackendStatus(True)  # type: ignore[method-assign]
    pm.register(registering(top, low), name="a")
    assert plugins.backend().name == "t-top" and probed == []


def test_backend_by_alias(pm) -> None:
    pm.register(registering(make_backend("t-x", aliases=("t-y",))), name="a")
    assert plugins.backend("t-y") is plugins.backend("t-x")
    assert [b.aliases for b in plugins.backends() if b.name == "t-x"] == [("t-y",)]


def test_unknown_backend_lists_installed(pm) -> None:
    pm.register(registering(make_backend("t-one"), make_backend("t-two")), name="a")
    with pytest.raises(ValueError, match=r"unknown backend 'nope'; installed backends: .*"
                                         r"t-one, t-two") as info:
        plugins.backend("nope")
    assert "failed to load" not in str(info.value)


def test_unavailable_backend_gives_reason(pm) -> None:
    pm.register(registering(make_backend("t-gpu", available=False, reason="no GPU here")),
                name="a")
    with pytest.raises(RuntimeError, match="backend 't-gpu' is not available: no GPU here"):
        plugins.backend("t-gpu")


def test_no_available_backend(pm) -> None:
    pm.unregister(name=plugins.CORE_PLUGIN)
    pm.register(registering(make_backend("t-gpu", available=False, reason="no GPU")), name="a")
    with pytest.raises(RuntimeError, match=r"no luminal backend is available \(t-gpu: no GPU\)"):
        plugins.backend()


def test_probe_exception_means_unavailable(pm) -> None:
    b = make_backend("t-crash")
    b.probe = lambda: 1 / 0  # type: ignore[method-assign]
    pm.register(registering(b), name="a")
    [info] = [i for i in plugins.backends() if i.name == "t-crash"]
    assert not info.available
    assert info.reason == "probe failed: ZeroDivisionError: division by zero"
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        plugins.backend("t-crash")


@pytest.mark.parametrize("second", [
    make_backend("t-dup"),
    make_backend("t-other", aliases=("t-dup",)),
])
def test_duplicate_backend_names_name_both_plugins(pm, second: Backend) -> None:
    pm.register(registering(make_backend("t-dup")), name="plugin-one")
    pm.register(registering(second), name="plugin-two")
    message = "backend name 't-dup' is registered by both plugin 'plugin-one' and " \
              "plugin 'plugin-two'"
    for lookup in (plugins.backends, plugins.backend, lambda: plugins.backend("t-dup")):
        with pytest.raises(PluginError, match=message):
            lookup()
    # Listing plugins still works, so the clash can be diagnosed.
    infos = {i.name: i for i in plugins.plugin_infos()}
    assert infos["plugin-two"].error == message


def test_duplicate_within_one_plugin(pm) -> None:
    pm.register(registering(make_backend("t-a", aliases=("t-a",))), name="solo")
    with pytest.raises(PluginError, match="plugin 'solo' registers backend name 't-a' twice"):
        plugins.backends()


def test_duplicate_compiler_names(pm) -> None:
    pm.register(make_plugin(compilers=lambda register: register("t-c", object)), name="one")
    pm.register(make_plugin(compilers=lambda register: register("t-c", object)), name="two")
    with pytest.raises(PluginError, match="compiler name 't-c' is registered by both plugin "
                                          "'one' and plugin 'two'"):
        plugins.compiler("t-c")


@pytest.mark.parametrize(("hooks", "message"), [
    ({"backends": lambda register: register("cpu")},
     "plugin 'bad' registered 'cpu' as a backend, but it is not a luminal.Backend instance"),
    ({"backends": lambda register: register(Backend)},
     r"plugin 'bad' registered the class Backend; register an instance: register\(Backend\(\)\)"),
    ({"backends": lambda register: register(make_backend(""))},
     "plugin 'bad' registered a backend named ''"),
    ({"compilers": lambda register: register("t-c", 42)},
     "plugin 'bad' registered compiler 't-c' = 42, which is not callable"),
    ({"compilers": lambda register: register(7, object)},
     "plugin 'bad' registered a compiler named 7"),
    ({"models": lambda register: register("t-m", None)},
     "plugin 'bad' registered model 't-m' = None, which is not callable"),
    ({"commands": lambda cli: cli.register("t-cmd", "help", None, "run")},
     "plugin 'bad' registered command 't-cmd' run = 'run', which is not callable"),
])
def test_wrong_registrations_name_the_plugin(pm, hooks, message: str) -> None:
    pm.register(make_plugin(**hooks), name="bad")
    lookup = {"backends": plugins.backends, "compilers": plugins.compilers,
              "models": plugins.models,
              "commands": plugins.commands}[next(iter(hooks))]
    with pytest.raises(PluginError, match=message):
        lookup()


def test_hook_that_raises_is_isolated(pm) -> None:
    def crash(register):
        register(make_backend("t-partial"))
        raise ImportError("no SDK")

    pm.register(make_plugin(backends=crash), name="crashy")
    pm.register(registering(make_backend("t-fine")), name="fine")
    names = [b.name for b in plugins.backends()]
    assert "t-fine" in names and "t-partial" not in names  # a crashed hook contributes nothing
    infos = {i.name: i for i in plugins.plugin_infos()}
    assert infos["crashy"].error == "luminal_register_backends raised ImportError: no SDK"
    assert infos["crashy"].registered == {}
    assert infos["fine"].registered == {"luminal_register_backends": ("t-fine",)}
    assert infos["fine"].hooks == ("luminal_register_backends",)


def test_compilers_models_commands(pm) -> None:
    def factory(**kwargs):
        return ("built", kwargs)

    pm.register(make_plugin(
        compilers=lambda register: register("t-comp", factory, "a test compiler"),
        models=lambda register: register("t-model", factory, description="a test model"),
        commands=lambda cli: cli.register("t-cmd", "a test command", None, lambda args: 3),
    ), name="many")
    assert plugins.compiler("t-comp", level=2) == ("built", {"level": 2})
    assert [(c.name, c.plugin, c.description) for c in plugins.compilers()
            if c.name == "t-comp"] == [("t-comp", "many", "a test compiler")]
    assert [m.description for m in plugins.models() if m.name == "t-model"] == ["a test model"]
    assert {c.name for c in plugins.commands()} >= {"plugins", "backends", "t-cmd"}
    assert cli.main(["t-cmd"]) == 3
    with pytest.raises(ValueError, match=r"unknown compiler 'nope'; registered compilers: "
                                         r".*t-comp"):
        plugins.compiler("nope")


def test_command_name_clash_with_core(pm, capsys: pytest.CaptureFixture[str]) -> None:
    pm.register(make_plugin(commands=lambda cli: cli.register("plugins", "mine", None, print)),
                name="greedy")
    with pytest.raises(PluginError, match="command name 'plugins' is registered by both "
                                          "plugin 'luminal-core' and plugin 'greedy'"):
        plugins.commands()
    # The CLI falls back to core's commands and says why.
    assert cli.main(["plugins", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "plugin commands are disabled" in err
    assert "greedy" in {p["name"] for p in json.loads(out)}


def test_cli_backends_json_in_process(pm, capsys: pytest.CaptureFixture[str]) -> None:
    pm.register(registering(make_backend("t-cli", 7)), name="a")
    assert cli.main(["backends", "--json"]) == 0
    [found] = [b for b in json.loads(capsys.readouterr().out) if b["name"] == "t-cli"]
    assert found == {"name": "t-cli", "plugin": "a", "priority": 7, "aliases": [],
                     "available": True, "device": "t-cli-device", "reason": ""}


def test_cli_reports_plugin_errors_with_status_1(pm, capsys) -> None:
    pm.register(registering(make_backend("t-d")), name="one")
    pm.register(registering(make_backend("t-d")), name="two")
    assert cli.main(["backends"]) == 1
    assert "luminal: error: backend name 't-d'" in capsys.readouterr().err


def test_registries_follow_registration(pm) -> None:
    plugin = registering(make_backend("t-late"))
    assert "t-late" not in [b.name for b in plugins.backends()]
    pm.register(plugin, name="late")
    assert "t-late" in [b.name for b in plugins.backends()]
    pm.unregister(plugin)
    assert "t-late" not in [b.name for b in plugins.backends()]


def write_fake_dist(site: Path, dist: str, module: str, source: str) -> None:
    """A dist-info with one `luminal.plugins` entry point, as pip would install it."""
    info = site / f"{dist.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text(f"[luminal.plugins]\n{dist} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


def test_misspelled_hook_is_blamed_on_its_plugin(pm, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_fake_dist(tmp_path, "luminal-typo", "luminal_typo_plugin", """
        from luminal.hookspecs import hookimpl

        @hookimpl
        def luminal_register_backend(register):  # missing "s"
            pass
    """)
    write_fake_dist(tmp_path, "luminal-good", "luminal_good_plugin", """
        from luminal.backend import Backend
        from luminal.hookspecs import hookimpl

        class GoodBackend(Backend):
            name = "t-good"

        @hookimpl
        def luminal_register_backends(register):
            register(GoodBackend())
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("luminal_typo_plugin", "luminal_good_plugin"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setenv("LUMINAL_PLUGINS", "luminal-typo,luminal-good")
    plugins.reset_plugins()

    infos = {i.name: i for i in plugins.plugin_infos()}
    assert set(infos) >= {"luminal-core", "luminal-typo", "luminal-good"}
    assert infos["luminal-typo"].version == "1.2.3"
    assert "unknown hook 'luminal_register_backend'" in infos["luminal-typo"].error
    assert infos["luminal-good"].error is None
    assert plugins.backend("t-good").name == "t-good"
    assert "luminal-typo" not in dict(plugins.get_plugin_manager().list_name_plugin())


def test_every_hookspec_has_a_registry() -> None:
    specs = {name for name in dir(hookspecs) if name.startswith("luminal_")}
    assert specs == set(hookspecs.REGISTRATION_HOOKS) == set(plugins._HOOKS)
    assert hookspecs.REGISTRATION_HOOKS["luminal_register_backends"] == "backend"


def test_docs_list_exactly_the_hookspecs() -> None:
    """docs/plugins.md's hook table names every spec with its argument, and nothing else."""
    import inspect

    text = (ROOT / "docs" / "plugins.md").read_text()
    documented = {line.split("`")[1] for line in text.splitlines()
                  if line.startswith("| `luminal_register_")}
    specs = {f"{name}({', '.join(inspect.signature(getattr(hookspecs, name)).parameters)})"
             for name in hookspecs.REGISTRATION_HOOKS}
    assert documented == specs
