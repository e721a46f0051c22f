"""What `pip install` ships: every Python package of the source tree is listed in pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_the_tree_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in ("engine", "projections") for init in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"


def test_every_schema_version_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    versions = {f"engine.schemas.{d.name}" for d in (ROOT / "schemas").iterdir() if d.is_dir() and d.name[:1] == "v"}
    assert versions, "schemas/ holds the shipped versions"
    assert versions - set(config["packages"]) == set(), "add the schema version to [tool.setuptools] packages"
    assert versions - set(config["package-data"]) == set(), "add the schema version's *.avsc to package-data"


def test_an_editable_install_is_one_path_entry() -> None:
    """setuptools makes ``pip install -e .`` a plain path entry, and prints no warning about it, only when every
    package sits where its name says under one root (engine/schemas is a link to schemas/, the contract)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {"": "."}
    for package in config["packages"]:
        assert (ROOT / package.replace(".", "/")).is_dir(), package
