"""The sampling jar (the JVM half of the tap), built from the Java source in ``runtime/jvm/``.

A wheel carries the jar prebuilt (``runtime/jvm/sparkglass-sampling.jar``, compiled by the
build backend in ``build_support/``; a JDK is needed only to build): :func:`sampling_jar`
uses it when it was built from this source against a Spark the running one can load (the
build compiles against the oldest supported minor), so a job needs only a JRE. Otherwise (a
source checkout, an older Spark) it compiles the source with ``javac`` against the installed
pyspark's jars, once, into a cache keyed by the sparkglass version, the Spark version and a
hash of the source (``<user cache>/sparkglass/jars/``, or
``$SPARKGLASS_JAR_CACHE``). :func:`build_jar` writes one to a chosen path.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from sparkglass import __version__
from sparkglass.runtime.contract.errors import JAVA_FIX, SparkglassError

log = logging.getLogger(__name__)

#: Where the Java source lives (shipped as package data).
JAVA_SOURCE_ROOT = Path(__file__).parents[1] / "jvm"
#: The plugin class to name in ``spark.plugins``.
PLUGIN_CLASS = "io.sparkglass.sampling.SamplingPlugin"
#: Java release the classes target (Spark 4 needs 17).
JAVA_RELEASE = "17"
#: The prebuilt jar a wheel carries, beside the source.
PACKAGED_JAR = JAVA_SOURCE_ROOT / "sparkglass-sampling.jar"


class JarBuildError(SparkglassError):
    """The sampling jar could not be compiled (no javac, or a compile error)."""


def java_sources() -> list[Path]:
    """The ``.java`` files of the sampling jar, sorted (stable hash)."""
    sources = sorted(JAVA_SOURCE_ROOT.rglob("*.java"))
    if not sources:
        raise JarBuildError(
            f"no Java source under {JAVA_SOURCE_ROOT}; is sparkglass installed fully?"
        )
    return sources


def source_hash() -> str:
    """SHA-256 (first 16 hex digits) over the relative paths and contents of the source."""
    digest = hashlib.sha256()
    for path in java_sources():
        digest.update(str(path.relative_to(JAVA_SOURCE_ROOT)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def spark_version() -> str:
    """The installed pyspark's version (imported here: the build backend imports this module
    in a build environment)."""
    import pyspark

    return str(pyspark.__version__)


def spark_jars_dir() -> Path:
    """The ``jars/`` folder of the installed pyspark (the compile classpath)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise JarBuildError(f"pyspark at {jars.parent} has no jars/ folder")
    return jars


def javac_executable() -> str:
    """``$JAVA_HOME/bin/javac`` or ``javac`` on PATH; raises :class:`JarBuildError` if none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if not found:
        raise JarBuildError(
            f"javac not found: building the sampling jar needs a JDK 17+; {JAVA_FIX}"
        )
    return found


def build_jar(out_path: str | Path, *, version: str | None = None) -> Path:
    """Compile the sampling jar to ``out_path`` (parents created; replaced atomically);
    ``version``: the manifest's ``Implementation-Version`` (default: the installed
    sparkglass's).

    Takes about 2 s. Raises :class:`JarBuildError` with javac's output on failure.
    """
    out = Path(out_path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparkglass-jar-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [
            javac_executable(),
            "--release",
            JAVA_RELEASE,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            str(spark_jars_dir() / "*"),
            "-d",
            str(classes),
            *[str(p) for p in java_sources()],
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise JarBuildError(f"javac failed ({proc.returncode}):\n{proc.stderr.strip()}")
        staged = Path(tmp) / "out.jar"
        manifest = (
            "Manifest-Version: 1.0\n"
            f"Implementation-Title: sparkglass-sampling\n"
            f"Implementation-Version: {version or __version__}\n"
            f"Spark-Version: {spark_version()}\n"
            f"Source-Hash: {source_hash()}\n\n"
        )
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", manifest)
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        fd, tmp_out = tempfile.mkstemp(prefix=".sparkglass-", suffix=".jar", dir=out.parent)
        os.close(fd)
        shutil.copyfile(staged, tmp_out)
        # mkstemp creates 0600: a jar built as root (an image build) must stay readable by
        # the non-root user the driver runs as. A jar holds no secret.
        os.chmod(tmp_out, 0o644)
        os.replace(tmp_out, out)
    log.info("built sampling jar %s", out)
    return out


def cache_dir() -> Path:
    """The jar cache folder (``$SPARKGLASS_JAR_CACHE`` or ``<user cache>/sparkglass/jars``)."""
    override = os.environ.get("SPARKGLASS_JAR_CACHE")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("sparkglass")) / "jars"


def cached_jar_path() -> Path:
    """Where the jar for this sparkglass, Spark and source version lives in the cache."""
    name = f"sparkglass-sampling-{__version__}-spark{spark_version()}-{source_hash()}.jar"
    return cache_dir() / name


def jar_manifest(path: Path) -> dict[str, str]:
    """The main attributes of jar ``path``'s manifest (empty when it has none or cannot be
    read)."""
    try:
        with zipfile.ZipFile(path) as jar:
            text = jar.read("META-INF/MANIFEST.MF").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return {}
    fields = (line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return {key: value for key, value in fields}


def _major_minor(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def jar_fits(built_for: str, running: str) -> bool:
    """Whether a jar compiled against Spark ``built_for`` runs on Spark ``running``: the same
    major version, and a minor version at least the jar's. The Java source uses only API that
    every 4.x minor keeps (``make spark-matrix`` runs the jar compiled against 4.0 on each:
    docs/spark-versions.md); an older minor may lack what a newer one compiled against."""
    jar, spark = _major_minor(built_for), _major_minor(running)
    return jar is not None and spark is not None and jar[0] == spark[0] and spark[1] >= jar[1]


def packaged_jar() -> Path | None:
    """The wheel's prebuilt jar when it fits: built from this source (its ``Source-Hash``)
    against a Spark the running one can load (:func:`jar_fits` on its ``Spark-Version``; the
    build compiles against the oldest supported minor); else None."""
    if not PACKAGED_JAR.is_file():
        return None
    manifest = jar_manifest(PACKAGED_JAR)
    if manifest.get("Source-Hash") != source_hash():
        return None
    if not jar_fits(manifest.get("Spark-Version", ""), spark_version()):
        log.info(
            "the packaged sampling jar is for Spark %s; this is Spark %s: compiling one",
            manifest.get("Spark-Version"),
            spark_version(),
        )
        return None
    return PACKAGED_JAR


def sampling_jar() -> Path:
    """The sampling jar: the wheel's prebuilt one when it fits (:func:`packaged_jar`), else
    the cached one, compiled on first use (module docstring). Raises
    :class:`JarBuildError` when it must be compiled and cannot (no ``javac``)."""
    packaged = packaged_jar()
    if packaged is not None:
        return packaged
    path = cached_jar_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.is_file():  # another process may have built it while we waited
                try:
                    build_jar(path)
                except JarBuildError as exc:
                    if PACKAGED_JAR.is_file():  # say why the prebuilt one was not used
                        built_for = jar_manifest(PACKAGED_JAR).get("Spark-Version", "?")
                        raise JarBuildError(
                            f"{exc} (the packaged sampling jar is for Spark {built_for} or "
                            f"another sparkglass source; this is Spark {spark_version()})"
                        ) from None
                    raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path
