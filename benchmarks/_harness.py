"""Shared benchmark machinery: one fresh subprocess per case, peak RSS, medians, tables.

The driver side (``run_cases``, ``markdown_table``, ``write_results``) imports only the
standard library (and tqdm), so the driver process stays small; torch is imported only in
the worker processes. A benchmark script calls itself with ``--worker '<json spec>'``;
the worker builds its inputs, calls :class:`PeakRSS` ``.start()``, runs the timed loop with
:func:`time_repeats`, and hands its result back with :func:`emit_result`.

Peak memory, exactly: at the end of the worker's setup (imports, inputs, model), after
``gc.collect()``, the kernel's RSS high-water mark is reset (``/proc/self/clear_refs`` <- 5)
and the current RSS is read as the baseline; after warm-up and timed repeats the peak is
``getrusage(RUSAGE_SELF).ru_maxrss``. Reported: ``peak - baseline``, i.e. the extra resident
memory the workload needed on top of its inputs and parameters (activations, autograd
state, gradients, caches such as CSR built on the first call, allocator slack, and any
library code pages first touched by the run).
"""
from __future__ import annotations

import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

__all__ = ["MARK", "TUNED_MALLOC", "worker_env", "malloc_description", "mem_available_bytes",
           "rss_bytes", "PeakRSS", "time_repeats", "summarize", "emit_result", "run_cases",
           "markdown_table", "write_results", "machine_info", "gpu_info", "measure_copy_bandwidth",
           "measure_gather_bandwidth", "fmt"]

MARK = "@@GRAPHATTN_BENCH_RESULT@@"
#: glibc settings that stop large blocks from being mmap'ed (and page-faulted) afresh on
#: every allocation and freed memory from being returned to the OS (see shared/REFERENCES.md).
TUNED_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000"}
_MALLOC_VARS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES")


# ----------------------------------------------------------------------------- environment
def worker_env(threads: int, tuned_malloc: bool) -> Dict[str, str]:
    """Environment for every worker: same threads and the same malloc settings for all rows."""
    env = {k: v for k, v in os.environ.items() if k not in _MALLOC_VARS}
    if tuned_malloc:
        env.update(TUNED_MALLOC)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def malloc_description(env: Dict[str, str]) -> str:
    libc = " ".join(platform.libc_ver()) or "unknown libc"
    set_vars = [f"{k}={env[k]}" for k in _MALLOC_VARS if k in env]
    pre = env.get("LD_PRELOAD")
    desc = f"{libc} malloc, " + (" ".join(set_vars) if set_vars else "defaults (no MALLOC_* set)")
    return desc + (f", LD_PRELOAD={pre}" if pre else "")


def mem_available_bytes() -> Optional[int]:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes(pid: str = "self") -> Optional[int]:
    """Current resident set size of a process (Linux), or None when unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gpu_info() -> Dict[str, object]:
    """The CUDA device (name, SMs, L2, memory) and the torch / triton versions (imports torch)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"gpu": props.name, "sm_count": props.multi_processor_count,
            "l2_cache_mb": getattr(props, "L2_cache_size", 0) / 2**20,
            "gpu_memory_gb": props.total_memory / 2**30, "cuda": torch.version.cuda,
            "torch": torch.__version__, "triton": triton_version}


def machine_info(device: str = "cpu") -> Dict[str, object]:
    """CPU, memory and platform; with ``device="cuda"`` also :func:`gpu_info`."""
    if device == "cuda":
        return {**machine_info(), **gpu_info()}
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "mem_available_gb": (mem_available_bytes() or 0) / 2**30}


# ----------------------------------------------------------------------------- worker side
class PeakRSS:
    """Peak extra RSS of this process from ``start()`` on (see module docstring)."""

    def start(self) -> None:
        import gc

        gc.collect()
        self.reset_ok = True
        try:  # reset the high-water mark so ru_maxrss measures from here on
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            self.reset_ok = False
        self.baseline = rss_bytes() or 0
        self.maxrss_at_start = _ru_maxrss()

    def stop(self) -> Dict[str, object]:
        peak = _ru_maxrss()
        base = self.baseline if self.reset_ok else max(self.baseline, self.maxrss_at_start)
        return {"baseline_rss_mb": self.baseline / 2**20, "peak_rss_mb": peak / 2**20,
                "peak_delta_mb": max(0, peak - base) / 2**20, "hwm_reset": self.reset_ok}


def _ru_maxrss() -> int:
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def time_repeats(step: Callable[[], Dict[str, float]], warmup: int, repeats: int,
                 min_time: float = 0.0, max_repeats: int = 200) -> Dict[str, List[float]]:
    """Run ``step`` ``warmup`` times untimed, then at least ``repeats`` times and until
    ``min_time`` seconds of timed work have accumulated (at most ``max_repeats``).
    ``step`` returns its own phase timings, e.g. ``{"fwd": s, "total": s}``."""
    for _ in range(warmup):
        step()
    out: Dict[str, List[float]] = {}
    spent, n = 0.0, 0
    while n < repeats or (spent < min_time and n < max_repeats):
        t = step()
        for k, v in t.items():
            out.setdefault(k, []).append(v)
        spent += t.get("total", 0.0)
        n += 1
    return out


def summarize(xs: Sequence[float]) -> Dict[str, float]:
    xs = sorted(xs)
    if not xs:
        return {"median": math.nan, "q1": math.nan, "q3": math.nan, "n": 0}
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "min": xs[0], "n": len(xs)}


def emit_result(result: Dict[str, object]) -> None:
    sys.stdout.write("\n" + MARK + json.dumps(result) + "\n")
    sys.stdout.flush()


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def measure_copy_bandwidth(nbytes: int, repeats: int = 5, device: str = "cpu") -> float:
    """Large tensor copy ``dst.copy_(src)``; bytes read + written per second (STREAM 'copy').
    ``device="cuda"``: a device-to-device copy, timed between synchronisations."""
    import torch

    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def measure_gather_bandwidth(table_rows: int, row_bytes: int, n_gather: int, repeats: int = 3,
                             chunk: int = 8192, seed: int = 0, device: str = "cpu") -> float:
    """Random gather of ``row_bytes`` rows from a ``table_rows``-row table: bytes of rows
    read per second. Rows land in a small reused buffer, so the writes stay in cache
    (on CUDA a 65536-row buffer, 32 MB at 512-byte rows, inside the L2 of large GPUs, so
    the launches do not dominate)."""
    import torch

    if device == "cuda":
        chunk = max(chunk, 65536)
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(table_rows, row_bytes // 4, generator=g).to(device)
    idx = torch.randint(0, table_rows, (n_gather,), generator=g).to(device)
    buf = torch.empty(chunk, row_bytes // 4, device=device)
    best = math.inf
    for _ in range(repeats + 1):  # first round warms up
        _sync(device)
        t = time.perf_counter()
        for s in range(0, n_gather, chunk):
            i = idx[s:s + chunk]
            torch.index_select(table, 0, i, out=buf[: i.numel()])
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return n_gather * row_bytes / best


# ----------------------------------------------------------------------------- driver side
def _run_one(argv: List[str], env: Dict[str, str], timeout: float,
             mem_cap: Optional[int]) -> Dict[str, object]:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True)
        killed, max_seen = None, 0
        while proc.poll() is None:
            rss = rss_bytes(str(proc.pid)) or 0
            max_seen = max(max_seen, rss)
            if mem_cap is not None and rss > mem_cap:
                killed = f"killed: RSS {rss / 2**30:.2f} GB exceeded the cap {mem_cap / 2**30:.2f} GB"
            elif time.perf_counter() - t0 > timeout:
                killed = f"killed: ran longer than {timeout:.0f} s"
            if killed:
                proc.kill()
                proc.wait()
                break
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["wall_s"] = time.perf_counter() - t0
            return res
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    why = killed or (f"exit code {proc.returncode}"
                     + (" (killed by the OS, out of memory?)" if proc.returncode in (-9, 137) else ""))
    return {"error": f"{why}: {tail}" if tail and not killed else why}


def run_cases(jobs: List[Dict[str, object]], script: str, env: Dict[str, str], *,
              timeout: float, mem_cap: Optional[int], parallel: int = 1,
              desc: str = "cases") -> List[Dict[str, object]]:
    """Run each job (a JSON-able spec) as ``python script --worker <spec>`` in a fresh
    process, ``parallel`` at a time, with a tqdm bar. Returns results in job order."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        tqdm = None
    results: List[Optional[Dict[str, object]]] = [None] * len(jobs)
    bar = tqdm(total=len(jobs), desc=desc, unit="case", file=sys.stderr) if tqdm else None
    lock = threading.Lock()
    queue = list(range(len(jobs)))

    def work():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
                if bar is not None:
                    bar.set_postfix_str(str(jobs[i].get("label", "")), refresh=True)
            argv = [sys.executable, script, "--worker", json.dumps(jobs[i])]
            res = _run_one(argv, env, timeout, mem_cap)
            with lock:
                results[i] = {**jobs[i], **res}
                if bar is not None:
                    bar.update(1)

    threads = [threading.Thread(target=work) for _ in range(max(1, parallel))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bar is not None:
        bar.close()
    return results  # type: ignore[return-value]


def fmt(x: Optional[float], digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{max(digits - 1, 1)}f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                   right: Sequence[bool] = ()) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    align = [right[i] if i < len(right) else False for i in range(len(headers))]

    def line(vals):
        return "| " + " | ".join(v.rjust(w) if a else v.ljust(w)
                                 for v, w, a in zip(vals, widths, align)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a else ("-" * (w + 2))
                         for w, a in zip(widths, align)) + "|"
    return "\n".join([line(headers), sep] + [line(r) for r in cells])


def write_results(out: Path, payload: Dict[str, object], csv_rows: List[Dict[str, object]]) -> List[Path]:
    """Write ``payload`` as JSON to ``out`` and ``csv_rows`` as CSV beside it (same stem)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    csv_path = out.with_suffix(".csv")
    keys: List[str] = []
    for r in csv_rows:
        keys += [k for k in r if k not in keys]
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(csv_rows)
    return [out, csv_path]
