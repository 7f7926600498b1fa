"""mapo.registry: names, built-ins imported on first use, entry points, `package.module:object` paths."""

from __future__ import annotations

import sys
import textwrap

import pytest

from mapo.registry import Registry, RegistryError, import_object


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """A package `mapo_plugin_for_test` on sys.path, with an installed-distribution record that
    declares entry points in the groups "mapo_test.things" and "mapo_test.broken"."""
    package = tmp_path / "mapo_plugin_for_test"
    package.mkdir()
    (package / "__init__.py").write_text("def triple(x):\n    return 3 * x\n\nclass Box:\n    def size(self):\n        return 7\n")
    dist = tmp_path / "mapo_plugin_for_test-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mapo-plugin-for-test\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [mapo_test.things]
            triple = mapo_plugin_for_test:triple

            [mapo_test.broken]
            missing = mapo_plugin_for_test:not_there
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    sys.modules.pop("mapo_plugin_for_test", None)


def test_registered_names_resolve_and_a_clash_is_refused():
    things: Registry[object] = Registry("thing")

    @things.register("double")
    def double(x):
        return 2 * x

    assert things.resolve("double") is double and "double" in things and list(things) == ["double"]
    things.add("double", double)  # the same object again is fine
    with pytest.raises(RegistryError, match="thing 'double' is already registered"):
        things.add("double", lambda x: x)
    with pytest.raises(RegistryError, match="without ':'"):
        things.add("a:b", double)
    things.remove("double")
    assert "double" not in things


def test_unknown_name_lists_what_exists_and_how_to_plug_in():
    things: Registry[object] = Registry("thing", group="mapo_test.things", builtins={"json": "json:dumps"})
    things.add("mine", object())
    with pytest.raises(RegistryError) as info:
        things.resolve("nothing")
    message = str(info.value)
    assert "unknown thing 'nothing'" in message and "json, mine" in message
    assert "package.module:object" in message and "mapo_test.things" in message
    with pytest.raises(RegistryError, match="non-empty"):
        things.resolve("")


def test_builtins_import_on_first_use_and_stay_registered():
    import json

    things: Registry[object] = Registry("thing", builtins={"dumps": "json:dumps"})
    assert "dumps" not in things  # nothing imported yet
    assert things.resolve("dumps") is json.dumps
    assert things["dumps"] is json.dumps and things.names() == ["dumps"]


def test_entry_points_and_paths_resolve(plugin_package):
    things: Registry[object] = Registry("thing", group="mapo_test.things")
    assert "triple" in things.names()
    assert things.resolve("triple")(2) == 6
    assert things.resolve("mapo_plugin_for_test:Box.size")(None) == 7  # dotted attribute after the colon
    broken: Registry[object] = Registry("thing", group="mapo_test.broken")
    with pytest.raises(RegistryError, match=r"entry point 'mapo_plugin_for_test:not_there'.*cannot import"):
        broken.resolve("missing")


def test_bad_paths_name_the_path_and_the_reason():
    with pytest.raises(RegistryError, match=r"environment: cannot import 'no_such_module_xyz:Thing'"):
        import_object("no_such_module_xyz:Thing", "environment")
    with pytest.raises(RegistryError, match="has no attribute 'nope'"):
        import_object("json:nope", "reward kind")
    with pytest.raises(RegistryError, match="not a 'package.module:object' path"):
        import_object("json:", "reward kind")


def test_a_package_in_the_working_directory_is_found(tmp_path, monkeypatch):
    """`mapo train` run at a repository root finds its local packages (examples/...) by path."""
    (tmp_path / "local_pkg_for_registry_test").mkdir()
    (tmp_path / "local_pkg_for_registry_test" / "__init__.py").write_text("VALUE = 41\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert import_object("local_pkg_for_registry_test:VALUE", "thing") == 41
    finally:
        sys.modules.pop("local_pkg_for_registry_test", None)
