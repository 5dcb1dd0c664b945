"""The wheel: built from a copy of the sources, installed into a fresh virtual environment, run
from a folder outside the repository. Proves that the grammar and the diagnostics reference are
shipped inside the package (not read from the checkout) and that the `plangate` script works.

How (chosen to be fast, and to need the package index at most for the build backend):

1. Copy `pyproject.toml`, `README.md`, `engine/`, `grammar/`, `docs/` to a temporary folder and build
   there (`python -m build --wheel`), so nothing is written into the checkout. Without isolation
   when this environment already has the build backend (`setuptools>=68`); otherwise with build
   isolation, which fetches setuptools from the index (pip's cache usually has it).
2. `python -m venv --without-pip` a fresh environment, and install the wheel into it with this
   environment's pip (`pip --python NEW install --no-deps --no-index WHEEL`): pip lays out the
   package and writes the `plangate` console script, exactly as for a user.
3. The runtime dependencies (lark, pydantic, networkx, z3-solver, cel-python) are not downloaded
   again: a `.pth` file in the new environment appends this environment's site-packages to
   `sys.path`. That is a plain path entry, not a site directory, so the `.pth` files inside it — the
   editable install's import hook among them — are *not* processed, and the new environment's own
   site-packages comes first: `plangate` is imported from the wheel (asserted below). The usual
   alternative, `--system-site-packages`, would expose the editable install; installing the
   dependencies from the index would cost a 30 MB z3 download per run.

Marked `slow` but not deselected by default (`-m "not slow"` leaves it out).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from plangate import __version__

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["pyproject.toml", "README.md", "engine", "grammar", "docs"]

CLEAN = """\
plan clean {
  version 1
  step build {
    call ci.build(commit: "abc123")
    risk read_only
  }
}
"""
BROKEN = """\
plan broken {
  version 1
  step build after biuld {
    call ci.build(commit: "abc123")
    risk read_only
  }
}
"""
POLICY = """\
policy tools {
  version 1
  tool ci.build { risk read_only args { commit: string } }
  unknown_tools deny
}
"""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)


def _has_backend() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    major = int(setuptools.__version__.split(".")[0])
    return major >= 68


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [name for name in SOURCES if not (ROOT / name).exists()]
    if missing:
        pytest.skip(f"cannot build the wheel: {', '.join(missing)} missing from the checkout")
    pytest.importorskip("build", reason="the `build` package (a test extra) is not installed")
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)]
    if _has_backend():
        command.insert(4, "--no-isolation")
    built = _run(command, cwd=source)
    wheels = sorted(out.glob("plangate-*.whl"))
    if built.returncode != 0 or not wheels:
        pytest.skip(f"cannot build the wheel here (`{' '.join(command[1:4])}` failed):\n"
                    f"{built.stdout[-2000:]}\n{built.stderr[-2000:]}")
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("venv")
    created = _run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    assert created.returncode == 0, created.stderr
    python = home / "bin" / "python"
    options = ["install", "--quiet", "--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)]
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), *options])
    if installed.returncode != 0 and "--python" in installed.stderr:  # pip older than 22.3: use the venv's own
        subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], capture_output=True, timeout=300)
        installed = _run([str(python), "-m", "pip", *options])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                   .stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (purelib / "zz_plangate_test_dependencies.pth").write_text(
        "".join(f"{path}\n" for path in sorted(ours) if Path(path).is_dir()), encoding="utf-8")
    return home


@pytest.fixture
def workdir(tmp_path: Path, venv: Path) -> tuple[Path, dict[str, str]]:
    """A folder outside the repository, with an environment whose PATH starts at the new venv."""
    for name, text in {"clean.plan": CLEAN, "broken.plan": BROKEN, "tools.policy": POLICY}.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    for relative in ("examples/deploy.plan", "policies/baseline.policy"):
        if (ROOT / relative).is_file():
            shutil.copy2(ROOT / relative, tmp_path / Path(relative).name)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # a cold grammar cache: the grammar comes from the wheel
    env["NO_COLOR"] = "1"
    assert ROOT not in tmp_path.parents
    return tmp_path, env


def _plangate(venv: Path, workdir: tuple[Path, dict[str, str]], *argv: str) -> subprocess.CompletedProcess[str]:
    folder, env = workdir
    script = venv / "bin" / "plangate"
    assert script.is_file(), "pip did not install the `plangate` console script"
    return _run([str(script), *argv], cwd=folder, env=env)


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode("utf-8")
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode("utf-8")
    for required in ("plangate/__init__.py", "plangate/cli.py", "plangate/driver.py", "plangate/syntax/parser.py",
                     "plangate/grammar/plangate.lark", "plangate/docs/diagnostics.md"):
        assert required in names, f"the wheel lacks {required}"
    assert not any(name.startswith(("tests/", "engine/", "benchmarks/")) for name in names)
    assert "plangate = plangate.cli:console" in scripts
    assert f"Version: {__version__}" in metadata
    for dependency in ("lark", "pydantic", "networkx", "z3-solver", "cel-python"):
        assert f"Requires-Dist: {dependency}" in metadata


def test_installed_package_is_the_wheel(venv: Path, workdir: tuple[Path, dict[str, str]]) -> None:
    folder, env = workdir
    probe = _run([str(venv / "bin" / "python"), "-c",
                  "import json, plangate, plangate.assets as a; "
                  "print(json.dumps([plangate.__file__, str(a.Path(a.__file__).parent / 'grammar')]))"],
                 cwd=folder, env=env)
    assert probe.returncode == 0, probe.stderr
    module, grammar = json.loads(probe.stdout)
    assert Path(module).is_relative_to(venv), f"plangate was imported from {module}, not from the wheel"
    assert (Path(grammar) / "plangate.lark").is_file()


def test_version(venv: Path, workdir: tuple[Path, dict[str, str]]) -> None:
    completed = _plangate(venv, workdir, "--version")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"plangate {__version__}"


def test_check_clean_and_broken(venv: Path, workdir: tuple[Path, dict[str, str]]) -> None:
    clean = _plangate(venv, workdir, "check", "clean.plan", "--policy", "tools.policy")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "no problems in 1 file" in clean.stdout
    broken = _plangate(venv, workdir, "check", "broken.plan", "--policy", "tools.policy", "--format", "json")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    report = json.loads(broken.stdout)
    assert [(d["name"], d["file"], d["span"]["start"]["line"]) for d in report["diagnostics"]] == [
        ("unknown-step", "broken.plan", 3)]
    assert "Traceback" not in clean.stderr + broken.stderr


def test_check_an_example(venv: Path, workdir: tuple[Path, dict[str, str]]) -> None:
    folder, _ = workdir
    if not (folder / "deploy.plan").is_file() or not (folder / "baseline.policy").is_file():
        pytest.skip("examples/deploy.plan or policies/baseline.policy are not in this checkout")
    completed = _plangate(venv, workdir, "check", "deploy.plan", "--policy", "baseline.policy")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "no problems in 1 file" in completed.stdout


def test_explain_reads_the_shipped_docs(venv: Path, workdir: tuple[Path, dict[str, str]]) -> None:
    completed = _plangate(venv, workdir, "explain", "PG101")
    assert completed.returncode == 0, completed.stderr
    # The page from docs/diagnostics.md; without the docs, explain falls back to a one-line summary.
    assert completed.stdout.startswith("## PG101 unknown-step"), completed.stdout[:300]
