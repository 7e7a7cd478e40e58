"""Does bytecode in the image speed the server's start? Inside one container of the image
(podman or docker), the time from starting ``amps-emulator`` (built-in config, in memory) to
its ``ready:`` line, and the time of one health-check probe, with the bytecode the image ships
(Debian's for the standard library, none for the server and its dependencies), beside the same
with bytecode for everything (compiled into a ``PYTHONPYCACHEPREFIX`` first) and with none at
all (an empty prefix). Rounds alternate, so drift on the machine hits every variant alike;
prints the median per variant.

    python3 bench/bench_image_startup.py [IMAGE] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import machine  # noqa: E402

#: runs inside the container, as its user; prints one JSON object of medians in seconds
INSIDE = r"""
import compileall, json, os, statistics, subprocess, sys, sysconfig, time
rounds = int(sys.argv[1])
full, empty = "/tmp/pyc-all", "/tmp/pyc-none"
os.makedirs(empty, exist_ok=True)
env = {**os.environ, "PYTHONPYCACHEPREFIX": full}
roots = sorted({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
subprocess.run([sys.executable, "-c",
                "import compileall, sys; [compileall.compile_dir(d, quiet=2) for d in sys.argv[1:]]",
                *roots], env=env, check=True)
variants = {"as built": {}, "bytecode for all": {"PYTHONPYCACHEPREFIX": full},
            "no bytecode": {"PYTHONPYCACHEPREFIX": empty}}
times = {name: {"server": [], "probe": []} for name in variants}
for _ in range(rounds):
    for name, extra in variants.items():
        env = {**os.environ, **extra, "AMPS_EMULATOR_MEMORY": "1",
               "AMPS_EMULATOR_LISTEN": "127.0.0.1:19007", "AMPS_EMULATOR_LOG_LEVEL": "WARNING"}
        t0 = time.perf_counter()
        p = subprocess.Popen(["amps-emulator"], env=env, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        times[name]["server"].append(time.perf_counter() - t0)
        assert line.startswith("ready: "), line
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "amps_emulator.probe", "127.0.0.1:19007"], env=env,
                       check=True)
        times[name]["probe"].append(time.perf_counter() - t0)
        p.terminate()
        p.wait()
print(json.dumps({"python": sys.version.split()[0],
                  "medians": {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("image", nargs="?", default="localhost/amps-emulator:test")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    engine = shutil.which("podman") or shutil.which("docker")
    if engine is None:
        sys.exit("needs podman or docker")
    out = subprocess.run([engine, "run", "--rm", "--entrypoint", "python", args.image,
                          "-c", INSIDE, str(args.rounds)], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    medians = result["medians"]
    host = machine().rsplit(", Python ", 1)[0]
    print(f"{args.image} (Python {result['python']}), median of {args.rounds} starts; {host}")
    print(f"{'bytecode':<20}{'start to ready':>16}{'one probe':>12}")
    for name, m in medians.items():
        print(f"{name:<20}{m['server'] * 1000:>13.0f} ms{m['probe'] * 1000:>9.0f} ms")


if __name__ == "__main__":
    main()
