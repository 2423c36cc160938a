"""How the viewer scales: 1,000 episodes of about 5k tokens each, against a 10-episode report.

Writes both reports, then loads each in headless Chromium (``--dump-dom``, which returns once
the page's script has drawn its first table) and reports file sizes, the time to write, and the
wall time to open, as a ratio to the small report (which measures the browser's own start).

    python benchmarks/viewer_scale.py
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from envace_gym.reporting.viewer import render

WORDS = "the order was delivered to the customer and the refund is pending review today".split()


def episode(i: int, tokens: int) -> dict:
    text = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(tokens // 10))
    messages = [{"role": "system", "content": text}]
    for turn in range(8):
        messages += [
            {"role": "user", "content": text[:400]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": f"c{turn}", "type": "function", "function": {"name": "get", "arguments": {"n": turn}}}
                ],
            },
            {"role": "tool", "tool_call_id": f"c{turn}", "name": "get", "content": json.dumps({"body": text})},
        ]
    return {
        "task_id": str(i),
        "reward": i % 2,
        "reward_source": "world",
        "dynamics": "real",
        "turns": 8,
        "real_calls": 8,
        "ended_by": "user_stop",
        "error": None,
        "reward_info": {},
        "messages": messages,
    }


def open_seconds(chromium: str, page: Path, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--dump-dom",
                f"{page.as_uri()}#tab=runs&q=&sort=-reward&page=0&open=0",
            ],
            capture_output=True,
            timeout=300,
            check=True,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    chromium = shutil.which("chromium")
    folder = Path(tempfile.mkdtemp())
    rows = {}
    for name, n in (("small", 10), ("large", 1000)):
        records = folder / f"{name}.jsonl"
        records.write_text("\n".join(json.dumps(episode(i, 5000)) for i in range(n)) + "\n")
        start = time.perf_counter()
        page = render([records], folder / f"{name}.html")
        rows[name] = {
            "episodes": n,
            "records_mb": records.stat().st_size / 1e6,
            "html_mb": page.stat().st_size / 1e6,
            "write_s": time.perf_counter() - start,
            "open_s": open_seconds(chromium, page) if chromium else None,
        }
    for name, row in rows.items():
        opened = f"{row['open_s']:.2f} s" if row["open_s"] is not None else "no chromium"
        print(
            f"{name:>5}: {row['episodes']:>4} episodes · records {row['records_mb']:.1f} MB · html "
            f"{row['html_mb']:.1f} MB · written in {row['write_s']:.2f} s · opened in {opened}"
        )
    if chromium:
        print(f"open time, large / small: {rows['large']['open_s'] / rows['small']['open_s']:.2f}x")


if __name__ == "__main__":
    main()
