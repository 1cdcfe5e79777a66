"""Progress for long work: tqdm's bar on a terminal; plain periodic lines anywhere else (CI logs,
`nohup`, a file), where a redrawn bar becomes one endless line of carriage returns."""

from __future__ import annotations

import sys
import time


def progress(total: int | None = None, initial: int = 0, desc: str = "", unit: str = "it", unit_scale: bool = False,
             disable: bool = False, file=None, every: float = 30.0):
    """A progress object with tqdm's `update`, `set_postfix`, `close` and `total`: tqdm's bar when
    `file` (standard error by default) is a terminal, else `Lines` every `every` seconds."""
    file = file or sys.stderr
    if not disable and not is_terminal(file):
        return Lines(total, initial, desc, unit, unit_scale, file, every)
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit=unit, unit_scale=unit_scale, disable=disable,
                file=file, dynamic_ncols=True, mininterval=1)


class Lines:
    """`desc: 120/610 steps (20%), 0:35 elapsed, ~2:20 left, loss 6.99, tok_s 11321`, at most every
    `every` seconds, and once more at the end."""

    def __init__(self, total, initial, desc, unit, unit_scale, file, every):
        self.total, self.n, self.desc, self.unit, self.unit_scale = total, initial, desc, unit, unit_scale
        self.file, self.every, self.postfix = file, every, {}
        self.start = self.last = time.perf_counter()
        self.first, self.printed = initial, None

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.perf_counter() - self.last >= self.every:
            self._print()

    def set_postfix(self, **values) -> None:
        self.postfix = values

    def write(self, message: str, file=None) -> None:
        """A line of its own (tqdm's `write`, which keeps a bar below it on a terminal)."""
        print(message, file=file or self.file, flush=True)

    def close(self) -> None:
        if self.printed != self.n:
            self._print()

    def _amount(self, n: float) -> str:
        if not self.unit_scale:
            return f"{n:,.0f}"
        for prefix in ("", "k", "M", "G", "T"):
            if abs(n) < 1000:
                return f"{n:.1f}{prefix}"
            n /= 1000
        return f"{n:.1f}P"

    def _print(self) -> None:
        now = time.perf_counter()
        elapsed = now - self.start
        parts = [f"{self._amount(self.n)}" + (f"/{self._amount(self.total)}" if self.total else "") + f" {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        parts.append(f"{clock(elapsed)} elapsed")
        done = self.n - self.first
        if self.total and done > 0 and self.n < self.total:
            parts.append(f"~{clock(elapsed / done * (self.total - self.n))} left")
        parts += [f"{k} {v}" for k, v in self.postfix.items()]
        print(f"{self.desc}: " + ", ".join(parts), file=self.file, flush=True)
        self.last, self.printed = now, self.n


def clock(seconds: float) -> str:
    """`0:42`, `12:03`, `1:02:03`: a duration as the progress lines write it."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Timed:
    """Work that reports no progress of its own when not on a terminal (the `tokenizers` trainer
    draws its own bar, on a terminal only): a line when it starts and one with its duration when
    it ends, `desc ...` then `desc: done in 0:42` (with `done` given at the end, if any)."""

    def __init__(self, desc: str, file=None, enabled: bool = True):
        self.desc, self.file, self.enabled, self.start = desc, file or sys.stderr, enabled, None

    def __enter__(self):
        self.start = time.perf_counter()
        if self.enabled:
            print(f"{self.desc} ...", file=self.file, flush=True)
        return self

    def __exit__(self, kind, value, traceback):
        if self.enabled and kind is None:
            print(f"{self.desc}: done in {clock(time.perf_counter() - self.start)}", file=self.file, flush=True)
        return False


def is_terminal(file=None) -> bool:
    """Whether `file` (standard error by default) is a terminal, where a redrawn bar is wanted."""
    file = file or sys.stderr
    return hasattr(file, "isatty") and file.isatty()
