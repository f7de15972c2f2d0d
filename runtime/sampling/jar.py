"""Building the sampling jar (the JVM half of the tap) from the Java source in ``runtime/jvm/``.

No jar is committed: :func:`sampling_jar` compiles the source with ``javac`` against the jars
the installed pyspark ships, once, into a cache keyed by the sparkglass version, the Spark
version and a hash of the source (``<user cache>/sparkglass/jars/``, or
``$SPARKGLASS_JAR_CACHE``). :func:`build_jar` writes one to a chosen path (container images:
``sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar``).

Concurrent first uses (several test processes) are serialised with a lock file and the jar
appears atomically (rename), so no reader ever sees half a jar.
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

import platformdirs
import pyspark

from sparkglass import __version__
from sparkglass.runtime.contract.errors import JAVA_FIX, SparkglassError

log = logging.getLogger(__name__)

#: Where the Java source lives (shipped as package data).
JAVA_SOURCE_ROOT = Path(__file__).parents[1] / "jvm"
#: The plugin class to name in ``spark.plugins``.
PLUGIN_CLASS = "io.sparkglass.sampling.SamplingPlugin"
#: Java release the classes target (Spark 4 needs 17).
JAVA_RELEASE = "17"


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


def spark_jars_dir() -> Path:
    """The ``jars/`` folder of the installed pyspark (the compile classpath)."""
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


def build_jar(out_path: str | Path) -> Path:
    """Compile the sampling jar to ``out_path`` (parents created; replaced atomically).

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
            f"Implementation-Version: {__version__}\n"
            f"Spark-Version: {pyspark.__version__}\n"
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
    return Path(override) if override else Path(platformdirs.user_cache_dir("sparkglass")) / "jars"


def cached_jar_path() -> Path:
    """Where the jar for this sparkglass, Spark and source version lives in the cache."""
    name = f"sparkglass-sampling-{__version__}-spark{pyspark.__version__}-{source_hash()}.jar"
    return cache_dir() / name


def sampling_jar() -> Path:
    """The cached sampling jar, compiled on first use (see module docstring)."""
    path = cached_jar_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not path.is_file():  # another process may have built it while we waited
                build_jar(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path
