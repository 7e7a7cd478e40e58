"""Build the optional compiled hot path, ``amps_emulator/_speedups.c`` (see ``amps_emulator/accel.py``).

As a hatchling build hook (``pip install .``, ``python -m build``): when a C compiler and the
Python headers are there, the extension is compiled and goes into the wheel, which is then
tagged for this interpreter and platform; when they are not (or ``AMPS_EMULATOR_PURE=1`` is
set), the build says why on stderr and the wheel is the pure-Python one, which works the same,
only slower. A failed compile never fails the install.

As a script, for a source checkout or the editable install (whose package is the checkout):
``python hatch_build.py --inplace`` compiles ``amps_emulator/_speedups*.so`` next to its source
(``.ci/run`` does this after ``pip install -e``); ``--clean`` removes it.

Only the standard library and the compiler the interpreter was built with (``sysconfig``'s
``CC``, ``CFLAGS``, ``LDSHARED``; ``CC`` and ``LDSHARED`` in the environment override them) are
used: no setuptools, no Cython.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "amps_emulator" / "_speedups.c"
PURE_ENV = "AMPS_EMULATOR_PURE"


def extension_name() -> str:
    """``_speedups`` plus this interpreter's extension suffix (``.cpython-311-x86_64-linux-gnu.so``)."""
    return "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compile_extension(out: Path) -> str | None:
    """Compile the extension to ``out``; None on success, else why it was not built."""
    if os.environ.get(PURE_ENV, "0") not in ("", "0"):
        return f"{PURE_ENV} is set"
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    include = sysconfig.get_paths().get("include")
    if not include or not Path(include, "Python.h").is_file():
        return "the Python headers (Python.h) are not installed"
    # CC / LDSHARED from the environment win, as with setuptools (CC=false: build no extension)
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    ldshared = shlex.split(os.environ.get("LDSHARED")
                           or (f"{os.environ['CC']} -shared" if os.environ.get("CC") else "")
                           or sysconfig.get_config_var("LDSHARED") or f"{cc[0]} -shared")
    cflags = shlex.split(sysconfig.get_config_var("CFLAGS") or "")
    ccshared = shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC")
    with tempfile.TemporaryDirectory(prefix="amps-speedups-") as tmp:
        obj, lib = Path(tmp, "_speedups.o"), Path(tmp, extension_name())
        steps = [
            [*cc, *cflags, *ccshared, "-O2", "-I", include, "-c", str(SOURCE), "-o", str(obj)],
            [*ldshared, str(obj), "-o", str(lib)],
        ]
        for cmd in steps:
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"{cmd[0]} could not run ({exc})"
            if done.returncode != 0:
                return f"{cmd[0]} failed: {(done.stderr or done.stdout).strip()[-2000:]}"
        os.replace(lib, out)  # never a half-written library where the package looks for it
    return None


def _note(text: str) -> None:
    print(f"amps-emulator build: {text}", file=sys.stderr)


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script without hatchling: only --inplace / --clean
    pass
else:

    class SpeedupsBuildHook(BuildHookInterface):
        """Compile ``_speedups`` into the wheel when possible (see the module docstring)."""

        PLUGIN_NAME = "custom"

        def initialize(self, version: str, build_data: dict) -> None:
            if self.target_name != "wheel" or version == "editable":
                return  # an editable install runs the checkout: `hatch_build.py --inplace`
            self._tmp = tempfile.TemporaryDirectory(prefix="amps-speedups-wheel-")
            out = Path(self._tmp.name, extension_name())
            why = compile_extension(out)
            if why is not None:
                _note(f"the compiled hot path is not built ({why}); the pure-Python one is used")
                return
            _note(f"built {extension_name()}")
            build_data["force_include"][str(out)] = f"amps_emulator/{extension_name()}"
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

        def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
            tmp = getattr(self, "_tmp", None)
            if tmp is not None:
                tmp.cleanup()


def main(argv: list[str]) -> int:
    target = ROOT / "amps_emulator" / extension_name()
    if argv == ["--clean"]:
        target.unlink(missing_ok=True)
        return 0
    if argv != ["--inplace"]:
        print("usage: python hatch_build.py --inplace | --clean", file=sys.stderr)
        return 2
    why = compile_extension(target)
    if why is not None:
        _note(f"the compiled hot path is not built ({why}); the pure-Python one is used")
        return 0  # not an error: the package works without it
    _note(f"built {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
