"""`envace-gym view`: one self-contained HTML file, checked in headless Chromium (Debian's
`chromium`, installed by the Makefile's test setup): it renders without console errors, its
tables count, filter and sort right, an episode opens, a crafted pair highlights exactly the
leaves that differ, and text from records never runs as script."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envace_gym.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (`make test` installs Debian's)")
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">"
REAL = {"a": 1, "b": {"c": 2, "d": [1, 2]}, "f": "same"}
REHEARSED = {"a": 1, "b": {"c": 3, "d": [1, 5]}, "f": "same", "e": 0}


def episode(task_id: str, reward: float, text: str) -> dict:
    return {"task_id": task_id, "reward": reward, "reward_source": "world", "dynamics": "real", "agent": "x",
            "turns": 2, "tool_calls": 1, "real_calls": 1, "ended_by": "user_stop", "error": None,
            "reward_info": {"note": text}, "opening_messages": 2, "rehearsal_attempts": 0,
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text},
                         {"role": "assistant", "content": "",
                          "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "lookup", "arguments": {"q": text}}}]},
                         {"role": "tool", "tool_call_id": "c1", "name": "lookup",
                          "content": json.dumps({"error": {"code": "invalid_arguments", "message": text}})},
                         {"role": "assistant", "content": "Done."}]}


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("view")
    runs = folder / "run.jsonl"
    runs.write_text("\n".join(json.dumps(episode(f"t{i}", i / 10, HOSTILE if i == 3 else f"hello {i}"))
                              for i in range(7)) + "\n")
    calls = folder / "compare.jsonl"
    calls.write_text(json.dumps({"task_id": "t1", "tool": "lookup", "arguments": {"q": 1}, "real": json.dumps(REAL),
                                 "rehearsed": json.dumps(REHEARSED), "parsed": True, "shape": 0.8,
                                 "leaf_match": 0.5, "error_agree": True, "exact": False}) + "\n"
                     + json.dumps({"task_id": "t2", "tool": "other", "arguments": {}, "real": json.dumps(HOSTILE),
                                   "rehearsed": json.dumps({"x": HOSTILE}), "parsed": True, "shape": 0.0,
                                   "leaf_match": 0.0, "error_agree": True, "exact": False}) + "\n")
    train = folder / "train"
    train.mkdir()
    (train / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "reward": s / 10, "loss/act": 1 / s})
                                                   for s in range(1, 6)) + "\n")
    out = folder / "report.html"
    result = CliRunner().invoke(app, ["view", str(runs), str(calls), str(train), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_record_text_cannot_close_the_data_block_or_open_markup(report):
    html = report.read_text()
    assert html.count("<script") == 2 and "document.title='pwned'" not in html.split('id="data">')[0]
    assert "<img src=x" not in html and "\\u003cscript>" in html
    for fetch in ('src="http', "src='http", 'href="http', "url(http", "@import"):  # nothing from a network
        assert fetch not in html


def dom(report: Path, fragment: str) -> tuple[str, str]:
    """The page's DOM after its script ran, and the browser's console log."""
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           "--enable-logging=stderr", "--v=0", "--dump-dom", f"{report.as_uri()}#{fragment}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@needs_browser
def test_the_page_renders_counts_filters_sorts_and_opens_an_episode(report):
    page, console = dom(report, "tab=runs&q=&sort=-reward&page=0&open=3")
    assert 'data-ready="1"' in page and "Uncaught" not in console and "CONSOLE" not in console.replace(
        "CONSOLE(0)", "")
    assert 'data-rows="7"' in page
    keys = [k for k in page.split('data-key="')[1:]]
    assert [k.split('"')[0] for k in keys] == ["6", "5", "4", "3", "2", "1", "0"]  # reward, descending
    assert page.count('class="msg ') == 5 and "system prompt</summary>" in page  # the opened episode
    assert "error: invalid_arguments" in page
    assert "<title>envace-gym view</title>" in page and "pwned</title>" not in page  # the script never ran
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in page  # shown as text
    filtered, _ = dom(report, "tab=runs&q=t5&sort=&page=0&open=")
    assert 'data-rows="1"' in filtered and 'data-key="5"' in filtered


@needs_browser
def test_the_diff_highlights_exactly_the_leaves_that_differ(report):
    page, console = dom(report, "tab=calls&q=&sort=&page=0&open=0")
    assert "Uncaught" not in console and 'data-rows="2"' in page
    real, rehearsed = page.split("<h4>real</h4>")[1].split("<h4>rehearsed</h4>")
    paths = lambda part: sorted(x.split('"')[0] for x in part.split('data-path="')[1:])  # noqa: E731
    assert paths(real) == ["b.c", "b.d[1]"] and paths(rehearsed) == ["b.c", "b.d[1]", "e"]
    tools, _ = dom(report, "tab=tools&q=&sort=-leaf_match&page=0&open=")
    assert 'data-rows="2"' in tools and tools.index('data-key="lookup"') < tools.index('data-key="other"')
    training, _ = dom(report, "tab=training")
    assert "<svg" in training and "reward by role" in training


# records as found in the wild: numbers JSON cannot write, text naming the page's placeholders,
# line separators inside strings, nesting deeper than anything walks with recursion
PLACEHOLDERS = "__DATA__ <b>__SVGS__</b> __DATA____SVGS__"
SEPARATORS = "a\u2028b\u2029c\u0085d"  # str.splitlines ends lines there; JSONL does not


def data_block(html: str) -> dict:
    """The page's data, read as standard JSON only (NaN or Infinity fail, as in a browser)."""
    text = html.split('<script type="application/json" id="data">')[1].split("</script>")[0]
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the page's JSON"))


@pytest.fixture(scope="module")
def odd_report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("odd")
    nan = episode("t0", float("nan"), PLACEHOLDERS) | {"reward_info": {"x": float("inf"), "y": -float("inf")}}
    runs = folder / "run.jsonl"
    runs.write_text("\n".join(json.dumps(e) for e in (nan, episode("t1", 1.0, "plain"), episode("t2", 0.5, "x"))))
    calls = folder / "compare.jsonl"
    calls.write_text(json.dumps({"task_id": "t1", "tool": PLACEHOLDERS, "arguments": {}, "real": "{}",
                                 "rehearsed": "[]", "parsed": True, "shape": float("nan"),
                                 "leaf_match": -float("inf"), "error_agree": True, "exact": False}) + "\n")
    train = folder / "train-__DATA__-__SVGS__"
    train.mkdir()
    (train / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "reward": s / 10}) for s in range(1, 4)))
    out = folder / "report.html"
    result = CliRunner().invoke(app, ["view", str(runs), str(calls), str(train), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_non_finite_numbers_are_written_as_standard_json(odd_report):
    data = data_block(odd_report.read_text(encoding="utf-8"))
    first = data["episodes"][0]
    assert first["reward"] == "NaN" and first["reward_info"] == {"x": "Infinity", "y": "-Infinity"}
    assert data["calls"][0]["shape"] == "NaN" and data["calls"][0]["leaf_match"] == "-Infinity"


def test_placeholder_names_in_records_survive_verbatim(odd_report):
    html = odd_report.read_text(encoding="utf-8")
    data = data_block(html)
    assert data["episodes"][0]["messages"][1]["content"] == PLACEHOLDERS and data["calls"][0]["tool"] == PLACEHOLDERS
    assert data["training"][0]["name"].endswith("train-__DATA__-__SVGS__")
    assert html.count("<svg") == 1 and '<div id="training" hidden><section class="train"><h3></h3><svg' in html
    assert "\\u003cb>__SVGS__\\u003c/b>" in html  # the record's tags escaped inside the data block


@needs_browser
def test_a_page_of_odd_records_renders(odd_report):
    page, console = dom(odd_report, "tab=runs&q=&sort=&page=0&open=0")
    assert 'data-ready="1"' in page and "Uncaught" not in console and 'data-rows="3"' in page
    assert "<td>NaN</td>" in page and '"x": "Infinity"' in page
    assert "<div>__DATA__ &lt;b&gt;__SVGS__&lt;/b&gt; __DATA____SVGS__</div>" in page  # the message, as text
    calls, console = dom(odd_report, "tab=calls&q=&sort=&page=0&open=")
    assert 'data-rows="1"' in calls and "<td>-Infinity</td>" in calls and "Uncaught" not in console
    training, _ = dom(odd_report, "tab=training")
    assert training.count("<svg") == 1 and "train-__DATA__-__SVGS__</h3>" in training


def test_records_keep_line_separators_and_read_crlf(tmp_path):
    from envace_gym import records

    path = tmp_path / "r.jsonl"
    path.write_bytes((json.dumps({"text": SEPARATORS}, ensure_ascii=False) + "\r\n" + '{"a": 1}\r\n').encode())
    assert records.rows(path) == [{"text": SEPARATORS}, {"a": 1}]


def test_a_deeply_nested_record_is_one_error_naming_its_line(tmp_path):
    from envace_gym import records

    path = tmp_path / "deep.jsonl"
    fine = {"text": "[{" * 5000, "deep": json.loads("[" * 200 + "]" * 200)}  # brackets in strings do not count
    path.write_text(json.dumps(fine) + "\n" + '{"a": ' + "[" * 100000 + "]" * 100000 + "}\n")
    with pytest.raises(ValueError, match=f"^{path}:2: nested deeper than"):
        records.rows(path)
    result = CliRunner().invoke(app, ["view", str(path), "--out", str(tmp_path / "report.html")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and f"{path}:2:" in lines[0], result.output
    path.write_text(json.dumps(fine) + "\n")
    assert records.rows(path) == [fine]


def test_a_deeply_nested_response_text_is_shown_without_its_diff(tmp_path):
    calls = tmp_path / "compare.jsonl"
    calls.write_text(json.dumps({"task_id": "t1", "tool": "x", "arguments": {}, "real": "[" * 100000 + "]" * 100000,
                                 "rehearsed": "[" * 100000, "parsed": False}) + "\n")
    result = CliRunner().invoke(app, ["view", str(calls), "--out", str(tmp_path / "report.html")])
    assert result.exit_code == 0, result.output
    assert data_block((tmp_path / "report.html").read_text())["calls"][0]["diff"] == {"real": [], "rehearsed": []}
    if CHROMIUM:  # opened, the call shows its texts as they are
        page, console = dom(tmp_path / "report.html", "tab=calls&q=&sort=&page=0&open=0")
        detail = page.split('id="detail"')[1].split('id="training"')[0]
        assert 'data-ready="1"' in page and "Uncaught" not in console and detail.count("[" * 100000) == 2
