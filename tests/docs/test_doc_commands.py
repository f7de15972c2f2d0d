"""Every command of the shell blocks of README.md and docs/*.md runs, or says why not.

Commands come from fenced ```bash, ```sh, ```shell and ```console blocks: ``\\`` continuations
joined, comments dropped, a command spanning lines (an open quote, a pipe at the end of a line,
a ``for`` loop) kept whole (``bash -n`` decides where one ends); in console blocks only the
``$ `` lines (and their continuations) are commands, the rest is output. Each is classified in
:data:`CLASSIFICATION`, by an explicit entry or a rule: ``demo`` commands run through
``bash -c`` against a live local demo (a real Spark session running the flights pipeline, the
local service in front; the docs' http://127.0.0.1:8080 becomes its URL, ``$TOKEN`` is set to
its admin token, an ``--endpoint`` and its ``--token`` become the driver's, /opt/sparkglass/ a
temporary folder), ``install`` commands are checked against the Makefile and
pyproject.toml, ``cluster`` and ``static`` ones are not run but name only files, Java classes,
CRDs and chart values that exist. A command no entry classifies fails the test.

Out of scope: commands inline in prose (backticked spans), except ``make TARGET`` spans, whose
targets must exist; blocks of other languages (python, yaml, unlabelled ones).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from tests.support.live_demo import live_demo as running_demo

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELL_FENCES = ("bash", "sh", "shell", "console")
#: Where the docs put the demo's service (`make demo` serves on port 8080).
DOCS_SERVICE_URL = "http://127.0.0.1:8080"
#: Statuses of a sample that answered (a round that failed, or is still open, did not).
ANSWERED = ("COMPLETE", "PARTIAL", "NO_DATA")
VENV_BIN = Path(sys.executable).parent

Kind = Literal["demo", "install", "cluster", "static"]


# ------------------------------------------------------------------------------- extraction
@dataclass(frozen=True)
class DocCommand:
    doc: str  # relative to the repository
    line: int  # of the command's first line
    text: str  # continuations joined, comments dropped; a multi-line command keeps its newlines
    complete: bool = True  # False: bash -n refuses it (the block ended inside it)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def __str__(self) -> str:
        return f"{self.id}: {self.text}"


def _bash_accepts(text: str) -> bool:
    return subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode == 0


def _strip_comments(text: str) -> str:
    """``text`` without shell comments (a ``#`` starting a word, outside quotes)."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote == "'":
            quote = "" if ch == "'" else quote
        elif ch == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        elif quote == '"':
            quote = "" if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n;|&("):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _normalized(raw: str) -> str:
    text = re.sub(r"[ \t]*\\\n[ \t]*", " ", _strip_comments(raw))
    lines = [line.rstrip() for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip()).strip()


def extract(markdown: str, doc: str) -> list[DocCommand]:
    """The commands of ``markdown``'s shell blocks (see the module docstring)."""
    commands: list[DocCommand] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w-]*)", lines[i])
        i += 1
        if not fence:
            continue
        indent, marker, lang = fence.group(1), fence.group(2), fence.group(3).lower()
        body: list[tuple[int, str]] = []
        while i < len(lines) and not lines[i].strip().startswith(marker):
            line = lines[i]
            body.append((i + 1, line[len(indent) :] if line.startswith(indent) else line.lstrip()))
            i += 1
        i += 1  # the closing fence
        if lang in SHELL_FENCES:
            commands.extend(_commands_of_block(body, doc, console=lang == "console"))
    return commands


def _commands_of_block(body: list[tuple[int, str]], doc: str, console: bool) -> list[DocCommand]:
    found: list[DocCommand] = []
    buffer: list[str] = []
    start = 0
    for number, line in body:
        if not buffer:
            if console:
                if not line.startswith("$ "):
                    continue  # output
                line = line[2:]
            start = number
        elif console and line.startswith("> "):
            line = line[2:]  # a continuation prompt
        buffer.append(line)
        raw = "\n".join(buffer)
        if line.rstrip().endswith("\\") or not _bash_accepts(raw):
            continue
        if text := _normalized(raw):
            found.append(DocCommand(doc, start, text))
        buffer = []
    if buffer and (text := _normalized("\n".join(buffer))):
        found.append(DocCommand(doc, start, text, complete=False))
    return found


def _all_commands() -> list[DocCommand]:
    return [
        command
        for path in DOCS
        for command in extract(path.read_text(), str(path.relative_to(REPO)))
    ]


COMMANDS = _all_commands()


# --------------------------------------------------------------------------- classification
@dataclass(frozen=True)
class Rule:
    kind: Kind
    pattern: str  # a regex searched in the command's text
    reason: str
    #: An explicit entry (a literal prefix of one command) must match a command of the docs.
    explicit: bool = False
    #: Checks beyond the common ones: each returns what is wrong with the command.
    checks: tuple[Callable[[str], list[str]], ...] = ()


def entry(kind: Kind, prefix: str, reason: str, *checks: Callable[[str], list[str]]) -> Rule:
    return Rule(kind, "^" + re.escape(prefix), reason, explicit=True, checks=checks)


def rule(kind: Kind, pattern: str, reason: str) -> Rule:
    return Rule(kind, pattern, reason)


def _chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((REPO / "charts/sparkglass/values.yaml").read_text())
    return values


def _chart_value_problems(setting: str, *, json_value: bool) -> list[str]:
    """``setting`` is ``key.path=value`` as ``helm --set`` takes it."""
    key, _, value = setting.partition("=")
    node: Any = _chart_values()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return [f"chart value {key!r} is not in charts/sparkglass/values.yaml"]
        node = node[part]
    if json_value:
        try:
            json.loads(value)
        except ValueError as exc:
            return [f"--set-json {key}: not JSON ({exc})"]
    return []


def _api_assignment(text: str) -> list[str]:
    """``API='key=json'``: the value the helm commands pass with ``--set-json "$API"``."""
    name, _, value = shlex.split(text)[0].partition("=")
    return _chart_value_problems(value, json_value=True) if name == "API" else [f"not API=: {text}"]


def _java_classes(text: str) -> list[str]:
    return [
        f"no Java source for {name} under runtime/jvm"
        for name in re.findall(r"\bio\.sparkglass(?:\.\w+)+", text)
        if not (REPO / "runtime/jvm" / (name.replace(".", "/") + ".java")).is_file()
    ]


def _sets_a_control_token(text: str) -> list[str]:
    """Without a token the endpoint makes one up and prints it nowhere: `sparkglass sample
    --endpoint` could never be given it."""
    if re.search(r"(^|\s)SPARKGLASS_CONTROL_TOKEN=\S|spark\.sparkglass\.control\.token=\S", text):
        return []
    return ["sets no control token (SPARKGLASS_CONTROL_TOKEN or spark.sparkglass.control.token)"]


#: One table: explicit entries first (literal command prefixes), then rules. First match wins.
CLASSIFICATION: tuple[Rule, ...] = (
    entry(
        "static",
        "API='networkPolicy.webhookFrom=",
        "a shell variable the helm commands below read; its key must be a chart value and its "
        "value JSON",
        _api_assignment,
    ),
    entry(
        "static",
        "SPARKGLASS_CONTROL_TOKEN=secret spark-submit --jars /opt/sparkglass/sparkglass-tap.jar",
        "starts job.py (the block after it), which streams until stopped; "
        "tests/sampling/test_plain_streaming.py spark-submits a job with these confs",
        _java_classes,
        _sets_a_control_token,
    ),
    entry(
        "static",
        "cd examples/sdp-flights",
        "changes the directory for the next command (the folder must exist)",
    ),
    entry(
        "static",
        "SPARKGLASS_CONTROL_TOKEN=secret sparkglass pipelines run --spec spark-pipeline.yml",
        "a Spark Connect run held 60 s (minutes here); tests/sampling/test_sdp_flights.py runs "
        "`sparkglass pipelines run` on a copy of this example",
        lambda text: (
            []
            if (REPO / "examples/sdp-flights/spark-pipeline.yml").is_file()
            else ["examples/sdp-flights/spark-pipeline.yml is missing"]
        ),
    ),
    entry(
        "demo",
        "python examples/sdp-flights/prepare.py",
        "runs here, on a copy of the example (it writes data/ next to itself)",
    ),
    entry(
        "demo",
        "sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar",
        "runs here, writing the jar to a temporary folder instead of /opt",
    ),
    entry(
        "cluster",
        "make e2e-kind",
        "creates a kind cluster (needs Docker, kind, kubectl and helm); the target must exist",
    ),
    rule("demo", r"^sparkglass sample\b", "a round at the live demo's service or driver"),
    rule("demo", r"^curl\b.*http://127\.0\.0\.1:8080/", "a request to the live demo's service"),
    rule("demo", r"^sparkglass plan\b", "plans a pipeline on a local Spark session"),
    rule(
        "install",
        r"^make [a-z]",
        "installs into .venv and runs for minutes: not run; the target and variables must be "
        "the Makefile's",
    ),
    rule(
        "install",
        r"^pip install\b",
        "changes the environment: not run; the extras must be pyproject.toml's",
    ),
    rule(
        "cluster",
        r"(^|[|;&(\n]\s*|\b(?:do|then)\s+)(?:kubectl|helm|kind)\b",
        "needs a Kubernetes cluster: not run here; `make e2e-kind` installs the chart and runs "
        "a SparkApplication and a DataSample round on kind wherever Docker and kind exist",
    ),
)


def classify(command: DocCommand) -> Rule | None:
    return next((r for r in CLASSIFICATION if re.search(r.pattern, command.text)), None)


def _by_kind(kind: Kind) -> list[DocCommand]:
    return [c for c in COMMANDS if (found := classify(c)) is not None and found.kind == kind]


# ----------------------------------------------------------------- what a command may name
def _makefile() -> str:
    return (REPO / "Makefile").read_text()


def _make_problems(text: str) -> list[str]:
    """``make TARGET... [VAR=value]...``: the targets and variables exist."""
    makefile = _makefile()
    targets = {
        name
        for line in re.findall(r"^([A-Za-z0-9_.$()/ -]+?)\s*:(?!=)", makefile, re.M)
        for name in line.split()
    }
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:+]?=", makefile, re.M))
    problems = []
    for word in shlex.split(text)[1:]:
        if "=" in word:
            var = word.split("=", 1)[0]
            if var not in variables:
                problems.append(f"`{text}`: the Makefile has no variable {var}")
        elif not word.startswith("-") and word not in targets:
            problems.append(f"`{text}`: the Makefile has no target {word!r}")
    return problems


def _pip_problems(text: str) -> list[str]:
    """``pip install ... 'sparkglass[a,b]'``: the extras are pyproject.toml's."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = set(pyproject["project"]["optional-dependencies"])
    problems = []
    for word in shlex.split(text)[2:]:
        found = re.fullmatch(r"(?:sparkglass|\.)\[([^\]]*)\]", word)
        if found:
            problems.extend(
                f"`{text}`: pyproject.toml has no extra {extra!r}"
                for extra in found.group(1).split(",")
                if extra.strip() not in extras
            )
    return problems


def _crd_names() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]["names"]
        names.update([spec["plural"], spec["singular"], spec["kind"].lower()])
        names.update(spec.get("shortNames", []))
        names.update(f"{n}.{crd['spec']['group']}" for n in (spec["plural"], spec["singular"]))
    return names


#: ``kubectl [-n NS|-A] VERB RESOURCE``: the resource a command names.
KUBECTL_RESOURCE = (
    r"\bkubectl(?:\s+(?:-n\s+\S+|--namespace[= ]\S+|-A|--all-namespaces))*"
    r"\s+(get|describe|delete|patch|edit|wait)\s+([a-z][\w.]*)"
)
#: Kubernetes' own resources the docs may name (anything else must be a sparkglass CRD's name).
KUBE_BUILTINS = frozenset(
    re.split(
        r"\s+",
        "pod pods po service services svc configmap configmaps cm secret secrets job jobs "
        "deployment deployments deploy namespace namespaces ns event events crd crds "
        "customresourcedefinitions networkpolicy networkpolicies netpol",
    )
)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=False)
    except ValueError:
        return text.split()


def _named_things_problems(text: str) -> list[str]:
    """Repository paths, sparkglass Java classes, custom resources and chart values the
    command names exist."""
    top = {p.name for p in REPO.iterdir()}
    words = _words(text)
    problems = []
    for word in words:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        first = value.split("/", 1)[0]
        if "/" in value and first in top and not (REPO / value.rstrip("/")).exists():
            problems.append(f"{value} does not exist")
    problems.extend(_java_classes(text))
    for verb, resource in re.findall(KUBECTL_RESOURCE, text):
        if resource not in KUBE_BUILTINS and resource not in _crd_names():
            problems.append(
                f"kubectl {verb} {resource}: not a sparkglass CRD's name (nor in KUBE_BUILTINS)"
            )
    if words and words[0] == "helm":
        for flag, value in itertools.pairwise(words):
            if flag in ("--set", "--set-string", "--set-json") and not value.startswith("$"):
                problems.extend(_chart_value_problems(value, json_value=flag == "--set-json"))
    return problems


# ------------------------------------------------------------------------ the static tests
def test_commands_are_found() -> None:
    docs = {c.doc for c in COMMANDS}
    assert {"README.md", "docs/pipelines.md", "docs/gitops.md"} <= docs, docs
    incomplete = [str(c) for c in COMMANDS if not c.complete]
    assert not incomplete, f"bash -n refuses these commands: {incomplete}"


def test_every_command_is_classified_with_a_reason() -> None:
    unclassified = [str(c) for c in COMMANDS if classify(c) is None]
    assert not unclassified, (
        "add these commands to CLASSIFICATION (demo, install, cluster or static, with a "
        f"reason): {unclassified}"
    )
    assert all(r.reason.strip() for r in CLASSIFICATION)
    unused = [r.pattern for r in CLASSIFICATION if r.explicit and not any(
        re.search(r.pattern, c.text) for c in COMMANDS
    )]  # fmt: skip
    assert not unused, f"explicit entries no doc command matches any more: {unused}"


@pytest.mark.parametrize("command", _by_kind("install"), ids=lambda c: c.id)
def test_install_commands_name_make_targets_and_extras_that_exist(command: DocCommand) -> None:
    words = _words(command.text)
    assert words[0] in ("make", "pip"), command
    problems = _make_problems(command.text) if words[0] == "make" else _pip_problems(command.text)
    assert not problems, problems


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.id)
def test_commands_name_only_what_exists(command: DocCommand) -> None:
    found = classify(command)
    problems = _named_things_problems(command.text)
    if found is not None:
        for check in found.checks:
            problems.extend(check(command.text))
        if re.match(r"make\s", command.text):
            problems.extend(_make_problems(command.text))
    assert not problems, f"{command}: {problems}"


def test_inline_make_commands_name_targets_that_exist() -> None:
    problems = [
        f"{path.relative_to(REPO)}: {problem}"
        for path in DOCS
        for span in re.findall(r"`(make [^`]+)`", path.read_text())
        for problem in _make_problems(span)
    ]
    assert not problems, problems


def test_extraction_joins_continuations_and_drops_comments_prompts_and_output() -> None:
    markdown = "\n".join(
        [
            "text `inline --command`",
            "```bash",
            "# a comment line",
            "make demo   # a trailing comment",
            "curl -H 'a # b' \\",
            "  http://x/#frag",
            "jq -n '{a:",
            "  1}' | kubectl apply -f -",
            "for x in a b; do",
            '  echo "$x"',
            "done",
            "```",
            "  ```console",
            "  $ kubectl get dsample",
            "  NAME  PHASE",
            "  $ echo a \\",
            "  > b",
            "  a b",
            "  ```",
            "```python",
            "print('not a command')",
            "```",
        ]
    )
    got = [(c.line, c.text) for c in extract(markdown, "x.md")]
    assert got == [
        (4, "make demo"),
        (5, "curl -H 'a # b' http://x/#frag"),
        (7, "jq -n '{a:\n  1}' | kubectl apply -f -"),
        (9, 'for x in a b; do\n  echo "$x"\ndone'),
        (14, "kubectl get dsample"),
        (16, "echo a b"),
    ]


# ------------------------------------------------------------------------------ the live demo
@dataclass
class LiveDemo:
    service_url: str
    token: str  # the service's admin token
    driver_url: str
    driver_token: str
    workdir: Path


@pytest.fixture(scope="module")
def live_demo(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDemo]:
    """The flights demo with the local service in front (tests/support/live_demo.py)."""
    workdir = tmp_path_factory.mktemp("doc-commands")
    with running_demo(spark, workdir, progress_timeout_s=120) as demo:
        service = demo.service
        yield LiveDemo(service.url, service.token, demo.driver_url, demo.driver_token, workdir)


def _runnable(text: str, demo: LiveDemo) -> str:
    """The docs' placeholders replaced by the live demo's (``$TOKEN`` comes from the env)."""
    text = text.replace(DOCS_SERVICE_URL, demo.service_url)
    if "--endpoint" in text:
        text = re.sub(r"--endpoint\s+\S+", f"--endpoint {demo.driver_url}", text)
        text = re.sub(r"--token\s+\S+", f"--token {shlex.quote(demo.driver_token)}", text)
    text = text.replace("/opt/sparkglass/", f"{demo.workdir}/opt/")
    if "examples/sdp-flights/prepare.py" in text:
        copy = demo.workdir / "sdp-flights"
        if not copy.exists():
            shutil.copytree(
                REPO / "examples/sdp-flights", copy, ignore=shutil.ignore_patterns("data")
            )
        text = text.replace("examples/sdp-flights/prepare.py", f"{copy}/prepare.py")
    return text


def _shell(text: str, demo: LiveDemo, timeout: float) -> subprocess.CompletedProcess[str]:
    """``bash -c text`` from the repository root, the venv first on PATH; its whole process
    group is killed at ``timeout``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKGLASS_")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", TOKEN=demo.token)
    env["COLUMNS"] = "200"
    proc = subprocess.Popen(
        ["bash", "-c", text], cwd=REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"`{text}` ran past {timeout} s:\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _sample_status(stdout: str) -> str:
    """The status of ``sparkglass sample``'s answer: its JSON body, or its table's summary."""
    try:
        return str(json.loads(stdout)["status"])
    except ValueError:
        found = re.search(r"\bstatus (\w+)", stdout)
        assert found, f"no status in the answer:\n{stdout[-2000:]}"
        return found.group(1)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", _by_kind("demo"), ids=lambda c: c.id)
def test_demo_command_runs_against_the_live_demo(command: DocCommand, live_demo: LiveDemo) -> None:
    text = _runnable(command.text, live_demo)
    if command.text.startswith("curl"):
        # The first call starts a round (PENDING); later ones answer with its result.
        deadline = time.monotonic() + 90
        while True:
            proc = _shell(text, live_demo, timeout=60)
            assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
            try:
                body = json.loads(proc.stdout)
            except ValueError:
                pytest.fail(f"{command}: not JSON:\n{proc.stdout[-2000:]}")
            assert "status" in body, f"{command}: the service refused it (docs wrong?): {body}"
            if body["status"] != "PENDING" and not body.get("stale"):
                break
            assert time.monotonic() < deadline, f"{command}: still {body['status']}"
            time.sleep(0.5)
        assert body["status"] in ANSWERED, f"{command}: {body}"
        return
    proc = _shell(text, live_demo, timeout=120)
    assert proc.returncode == 0, (
        f"{command}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    if command.text.startswith("sparkglass sample"):
        assert _sample_status(proc.stdout) in ANSWERED, f"{command}\n{proc.stdout[-3000:]}"
