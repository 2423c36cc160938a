"""`envace-gym view`: one self-contained HTML file, checked in headless Chromium (Debian's
`chromium`, installed by the Makefile's test setup): it renders without console errors, its
tables count, filter and sort right, an episode opens, a crafted pair highlights exactly the
leaves that differ, and text from records never runs as script."""

import html
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
    return {
        "task_id": task_id,
        "reward": reward,
        "reward_source": "world",
        "dynamics": "real",
        "agent": "x",
        "turns": 2,
        "tool_calls": 1,
        "real_calls": 1,
        "ended_by": "user_stop",
        "error": None,
        "reward_info": {"note": text},
        "opening_messages": 2,
        "rehearsal_attempts": 0,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": text},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": text}}}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "lookup",
                "content": json.dumps({"error": {"code": "invalid_arguments", "message": text}}),
            },
            {"role": "assistant", "content": "Done."},
        ],
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("view")
    runs = folder / "run.jsonl"
    runs.write_text(
        "\n".join(json.dumps(episode(f"t{i}", i / 10, HOSTILE if i == 3 else f"hello {i}")) for i in range(7)) + "\n"
    )
    calls = folder / "compare.jsonl"
    calls.write_text(
        json.dumps(
            {
                "task_id": "t1",
                "tool": "lookup",
                "arguments": {"q": 1},
                "real": json.dumps(REAL),
                "rehearsed": json.dumps(REHEARSED),
                "parsed": True,
                "shape": 0.8,
                "leaf_match": 0.5,
                "error_agree": True,
                "exact": False,
            }
        )
        + "\n"
        + json.dumps(
            {
                "task_id": "t2",
                "tool": "other",
                "arguments": {},
                "real": json.dumps(HOSTILE),
                "rehearsed": json.dumps({"x": HOSTILE}),
                "parsed": True,
                "shape": 0.0,
                "leaf_match": 0.0,
                "error_agree": True,
                "exact": False,
            }
        )
        + "\n"
    )
    train = folder / "train"
    train.mkdir()
    (train / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "reward": s / 10, "loss/act": 1 / s}) for s in range(1, 6)) + "\n"
    )
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
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            f"{report.as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@needs_browser
def test_the_page_renders_counts_filters_sorts_and_opens_an_episode(report):
    page, console = dom(report, "tab=runs&q=&sort=-reward&page=0&open=3")
    assert 'data-ready="1"' in page and "Uncaught" not in console and "CONSOLE" not in console.replace("CONSOLE(0)", "")
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
    calls.write_text(
        json.dumps(
            {
                "task_id": "t1",
                "tool": PLACEHOLDERS,
                "arguments": {},
                "real": "{}",
                "rehearsed": "[]",
                "parsed": True,
                "shape": float("nan"),
                "leaf_match": -float("inf"),
                "error_agree": True,
                "exact": False,
            }
        )
        + "\n"
    )
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
    plots = training.split('id="training"')[1]  # the summary's fidelity chart is an <svg> too
    assert plots.count("<svg") == 1 and "train-__DATA__-__SVGS__</h3>" in plots


def test_records_keep_line_separators_and_read_crlf(tmp_path):
    from envace_gym.play import records

    path = tmp_path / "r.jsonl"
    path.write_bytes((json.dumps({"text": SEPARATORS}, ensure_ascii=False) + "\r\n" + '{"a": 1}\r\n').encode())
    assert records.rows(path) == [{"text": SEPARATORS}, {"a": 1}]


def test_a_deeply_nested_record_is_one_error_naming_its_line(tmp_path):
    from envace_gym.play import records

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
    calls.write_text(
        json.dumps(
            {
                "task_id": "t1",
                "tool": "x",
                "arguments": {},
                "real": "[" * 100000 + "]" * 100000,
                "rehearsed": "[" * 100000,
                "parsed": False,
            }
        )
        + "\n"
    )
    result = CliRunner().invoke(app, ["view", str(calls), "--out", str(tmp_path / "report.html")])
    assert result.exit_code == 0, result.output
    assert data_block((tmp_path / "report.html").read_text())["calls"][0]["diff"] == {"real": [], "rehearsed": []}
    if CHROMIUM:  # opened, the call shows its texts as they are
        page, console = dom(tmp_path / "report.html", "tab=calls&q=&sort=&page=0&open=0")
        detail = page.split('id="detail"')[1].split('id="training"')[0]
        assert 'data-ready="1"' in page and "Uncaught" not in console and detail.count("[" * 100000) == 2


# the first screen: the page opens on the tab that has data, under a summary (counts, reward by
# dynamics, fidelity per tool); an opened row shows its detail where the reader is looking


def call(i: int, tool: str, leaf_match: float, task_id: str = "t1") -> dict:
    return {
        "task_id": task_id,
        "tool": tool,
        "arguments": {"n": i},
        "real": json.dumps(REAL),
        "rehearsed": json.dumps(REHEARSED),
        "parsed": True,
        "shape": leaf_match,
        "leaf_match": leaf_match,
        "error_agree": True,
        "exact": leaf_match == 1.0,
    }


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, Path]:
    """One report per kind of input alone: a compare file (60 calls on three tools, one named by
    hostile text), a run file (7 episodes, one failed) and a training folder."""
    from envace_gym.reporting.viewer import render

    folder = tmp_path_factory.mktemp("single")
    calls = folder / "cmp.jsonl"
    tools = ("lookup", "search", HOSTILE)
    calls.write_text(
        "".join(json.dumps(call(i, tools[i % 3], [1.0, 0.5, 0.0][i % 3], f"t{i % 5}")) + "\n" for i in range(60))
    )
    runs = folder / "run.jsonl"
    runs.write_text(
        "".join(
            json.dumps(episode(f"t{i}", i / 10, f"hello {i}") | {"error": "boom" if i == 4 else None}) + "\n"
            for i in range(7)
        )
    )
    train = folder / "train"
    train.mkdir()
    (train / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in range(1, 4)))
    return {
        name: render([path], folder / f"{name}.html")
        for name, path in (("compare", calls), ("run", runs), ("training", train))
    }


def probe(report: Path, fragment: str, action: str, width: int = 1400) -> dict:
    """Geometry after ``action`` (JavaScript, run once the page has drawn) in a ``width`` x 900
    window: the scroll offset when ``action`` ends and once the page has answered it, and the
    boxes of the detail, the table and the selected row, read by a script added to a copy of the page."""
    script = """<script>
(async () => {
  const box = q => { const e = document.querySelector(q); return e && e.getBoundingClientRect().toJSON(); };
  const out = {};
  __ACTION__
  out.before = scrollY;  // the page answers a click on the next hashchange
  await new Promise(done => setTimeout(done, 300));
  Object.assign(out, {after: scrollY, height: innerHeight, detail: box("#detail"), table: box("#table"),
                      row: box("tr.sel")});
  document.body.dataset.probe = JSON.stringify(out);
})();
</script></body>""".replace("__ACTION__", action)
    copy = report.with_name(f"probe-{report.name}")
    copy.write_text(report.read_text(encoding="utf-8").replace("</body>", script), encoding="utf-8")
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
            f"--window-size={width},900",
            "--dump-dom",
            f"{copy.as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(html.unescape(done.stdout.split('data-probe="')[1].split('"')[0]))


@needs_browser
def test_a_compare_file_opens_on_its_calls_under_the_per_tool_chart(single):
    page, console = dom(single["compare"], "")
    assert 'data-ready="1"' in page and "Uncaught" not in console
    assert 'data-rows="60"' in page and ">0 rows" not in page and '<button data-tab="calls" class="on">' in page
    assert '<button data-tab="runs" hidden="">' in page  # no empty Episodes tab on offer
    chart = page.split('id="fidelity-chart"')[1].split("</svg>")[0]
    assert chart.count('<g class="bar"') == 4 and 'data-tool="lookup"' in chart  # all calls, then each tool
    assert "1.00 · exact 1.00 · 20 calls" in chart and "0.50 · exact 0.00 · 20 calls" in chart
    assert "&lt;script&gt;document.title='pwned'" in chart and "pwned</title>" not in page  # a tool's name as text
    assert 'id="by-dynamics"' not in page and "<b>60</b><span" in page  # no episodes: no reward table
    leaf_match = [row.split("<td")[5] for row in page.split('<tr class="row"')[1:]]  # i, task_id, tool, parsed
    assert len(leaf_match) == 60 and all('style="background:' in td for td in leaf_match)
    assert len({td.split('style="')[1].split('"')[0] for td in leaf_match}) == 3  # 1, 0.5 and 0: three colours


@needs_browser
def test_a_run_file_opens_on_its_episodes_under_reward_by_dynamics(single):
    page, console = dom(single["run"], "")
    assert 'data-ready="1"' in page and "Uncaught" not in console
    assert 'data-rows="7"' in page and '<button data-tab="runs" class="on">' in page
    assert '<button data-tab="calls" hidden="">' in page and 'id="fidelity-chart"' not in page
    table = page.split('id="by-dynamics"')[1].split("</table>")[0]
    assert "<td>real</td><td>x</td><td>7</td>" in table and ">0.300</td><td>1</td>" in table  # mean, failed
    assert '<div class="tile bad"><b>1</b><span class="muted">failed (error)</span>' in page
    training, _ = dom(single["training"], "")
    assert '<div id="training">' in training and '<button data-tab="training" class="on">' in training
    named, _ = dom(single["compare"], "tab=runs&q=&sort=&page=0&open=")  # a tab the fragment names wins
    assert 'data-rows="0"' in named and '<button data-tab="runs" class="on">' in named


@needs_browser
def test_an_opened_call_is_beside_the_list_in_view(single):
    click = 'const row = document.querySelectorAll("tr.row")[40]; row.scrollIntoView(); row.click();'
    wide = probe(single["compare"], "", click)
    detail, table, row = wide["detail"], wide["table"], wide["row"]
    assert detail["left"] >= table["right"] and detail["width"] > 500  # beside the list
    assert 0 <= detail["top"] < 100 and detail["bottom"] <= wide["height"]  # on screen, by the list's row 40
    assert 0 <= row["top"] < wide["height"]  # and the clicked row still in view
    narrow = probe(single["compare"], "", 'document.querySelector("tr.row").click();', width=800)
    detail = narrow["detail"]  # stacked under the 60 rows, and scrolled to: all of it on screen
    assert detail["top"] >= narrow["table"]["bottom"] and narrow["after"] > narrow["before"] + 1000
    assert 0 <= detail["top"] and detail["bottom"] <= narrow["height"] and detail["height"] > 300


@needs_browser
def test_an_episode_and_its_compared_calls_link_to_each_other(report):
    page, _ = dom(report, "tab=runs&q=&sort=&page=0&open=1")
    links = html.unescape(page.split('id="detail"')[1])
    assert 'href="#tab=calls&q=&sort=&page=0&open=&task=t1">this task\'s 1 compared call</a>' in links
    calls, _ = dom(report, "tab=calls&q=&sort=&page=0&open=&task=t1")
    assert 'data-rows="1"' in calls and "task t1 only" in calls
    opened, _ = dom(report, "tab=calls&q=&sort=&page=0&open=0&task=")
    assert 'href="#tab=runs&q=&sort=&page=0&open=1&task=">open this task\'s episode</a>' in html.unescape(opened)
    t0, _ = dom(report, "tab=runs&q=&sort=&page=0&open=0")
    detail = t0.split('id="detail"')[1].split('id="training"')[0]
    assert "task t0 · reward 0" in detail and "compared call" not in detail  # t0 has none


def test_view_writes_its_report_under_runs_by_default(tmp_path, monkeypatch):
    records = tmp_path / "run.jsonl"
    records.write_text(json.dumps({"task_id": "1", "reward": 1.0, "dynamics": "real", "messages": []}) + "\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["view", str(records)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "runs" / "report.html").is_file() and not (tmp_path / "report.html").exists()


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Path:
    """An eval's view: a noisy oracle on tau2 telecom (task ids of over 100 characters) and a BFCL
    category, one task each, with the world-model table (its own row, then the oracle's and knn's)."""
    out = tmp_path_factory.mktemp("eval") / "eval"
    suites = "EnvACE/tau2-telecom-v0,EnvACE/bfcl-multi-turn-base-v0"
    args = ["eval", "--agent", "noisy-oracle", "--suites", suites, "--limit", "1", "--world-model", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    done = CliRunner().invoke(app, ["view", str(out), "--out", str(out.parent / "view.html")])
    assert done.exit_code == 0, done.output
    return out.parent / "view.html"


@needs_browser
def test_an_eval_opens_on_its_benchmark_table_then_a_world_model_panel_per_agent(evaluated):
    page, console = dom(evaluated, "")
    assert 'data-ready="1"' in page and "Uncaught" not in console
    summary = html.unescape(page.split('id="summary"')[1].split("</section>")[0])
    assert summary.index('id="benchmarks"') < summary.index('id="world-models"') < summary.index(">counts<")
    table = summary.split('id="benchmarks"')[1].split("</table>")[0]
    assert "noisy-oracle (measured)" in table and " (partial)" in table  # one task of each: partial, marked
    assert "<th>tau2</th><th>BFCL v4</th>" in table  # in the order given
    assert "EnvACE-8B (reported)</td><td>36.70</td><td>46.04</td>" in table  # the paper's, beside
    assert "multi-turn-base: 1/200 tasks" in table  # the coverage, on hover
    panels = summary.split('id="world-models"')[1]
    at = [panels.index(f'id="world-{name}"') for name in ("noisy-oracle", "oracle", "knn")]
    assert at == sorted(at) and "world model: knn (reference)" in panels and "world model: noisy-oracle<" in panels
    own, knn = (panels.split(f'id="world-{name}"')[1].split("</svg>")[0] for name in ("noisy-oracle", "knn"))
    assert "BFCL v4: all calls" in own and own != knn  # each world model's own numbers, not pooled
    assert 'id="fidelity-chart"' not in page
    by_env = summary.split('id="by-dynamics"')[1].split("</table>")[0]
    assert "EnvACE/tau2-telecom-v0" in by_env and "EnvACE/bfcl-multi-turn-base-v0" in by_env  # reward per env


@needs_browser
def test_an_evals_episodes_fit_1280_pixels_with_long_task_ids_cut_short(evaluated):
    page, _ = dom(evaluated, "tab=runs&q=&sort=&page=0&open=")
    rows = page.split('<tr class="row"')[1:]
    telecom = next(r for r in rows if "tau2-telecom" in r)
    task = telecom.split('class="id"')[2]  # env, then task_id
    whole = html.unescape(task.split('title="')[1].split('"')[0])
    assert len(whole) > 100 and "env</th>" in page  # the whole id on hover, an env column
    fit = probe(evaluated, "tab=runs&q=&sort=&page=0&open=", "", width=1280)
    assert fit["table"]["right"] <= 1280  # every column on screen at 1280 px


@pytest.mark.parametrize(
    ("number", "field"),
    [("NaN", "benchmarks[0].score is nan"), ("1e999", "benchmarks[0].score is inf"), ("-Infinity", "score is -inf")],
)
def test_an_eval_whose_results_hold_a_nan_or_infinity_is_refused_not_drawn(tmp_path, number, field):
    from envace_gym.evaluation import EvalResults
    from envace_gym.evaluation.results import BenchmarkResult

    bench = BenchmarkResult(
        name="tau2", score=50.0, parts={}, episodes=1, failed={}, skipped={}, missing=[], records=[], real_calls=0
    )
    results = EvalResults(
        agent="oracle",
        user="scripted",
        judge=None,
        trials=1,
        limit=1,
        rehearse=0,
        benchmarks=[bench],
        overall=50.0,
        overall_of=["tau2"],
        reported={},
    )
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "results.json").write_text(results.model_dump_json().replace('"score":50.0', f'"score":{number}'))
    out = tmp_path / "view.html"
    result = CliRunner().invoke(app, ["view", str(folder), "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert "results.json" in result.output and field in result.output and "not a finite number" in result.output


@needs_browser
def test_two_compare_files_are_two_world_models_never_pooled(tmp_path):
    def call(tool: str, leaf_match: float, **more) -> str:
        fields = {"task_id": "t", "tool": tool, "arguments": {}, "real": "{}", "rehearsed": "{}", "parsed": True}
        return json.dumps(fields | {"shape": 1.0, "leaf_match": leaf_match, "error_agree": True, "exact": False} | more)

    good, bad = tmp_path / "knn-compare.jsonl", tmp_path / "old-compare.jsonl"
    good.write_text(call("lookup", 1.0, world_model="knn") + "\n")
    bad.write_text(call("lookup", 0.0) + "\n")  # written before records named their rehearser: its file names it
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["view", str(good), str(bad), "--out", str(out)]).exit_code == 0
    page, console = dom(out, "")
    assert "Uncaught" not in console
    assert 'id="fidelity-chart"' in page and 'id="fidelity-chart-1"' in page  # one chart per world model
    assert "knn: fidelity per tool" in page and "old-compare.jsonl: fidelity per tool" in page
    tools, _ = dom(out, "tab=tools")
    assert "<th>world_model</th><th>tool</th>" in tools  # a row per world model and tool
    assert "<td>knn</td><td>lookup</td>" in tools and "<td>old-compare.jsonl</td><td>lookup</td>" in tools
