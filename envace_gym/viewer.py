"""``envace-gym view``: run records, compare records and training folders as one self-contained HTML file.

Everything the page shows comes from the records, which are untrusted: they travel as one standard
JSON document (a NaN or infinity as a string) inside a ``<script type="application/json">`` block
(every ``<`` written ``\\u003c``, so nothing in them can close it), put in the page in one pass with
the training plots (so text naming a placeholder stays text), and the page's own script puts them on
screen as text nodes only, never as markup. Tables are paginated and transcripts built when opened,
so a thousand long episodes open in a few seconds. No CDN, no network: the file opens from disk.

The page opens on a summary (counts, mean reward per dynamics and agent, mean leaf_match per tool as
bars drawn by its script) above the tab that has data: episodes, else compared calls, else training.
Fidelity and reward cells are shaded red (0) to green (1); an opened row's detail sits beside the
list (under it in a narrow window, scrolled to), and an episode and its task's compared calls link
to each other. The page's state lives in its URL fragment
(``#tab=runs&q=retail&sort=-reward&open=3&task=7``), so a view can be linked, and checked by a
headless browser.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from envace_gym import records
from envace_gym.fidelity import flatten
from envace_gym.messages import escape_tags, loads_bounded


def _diff(real, rehearsed) -> dict:
    """The leaf paths where the two responses differ (``fidelity.flatten``'s paths)."""
    try:
        a, b = flatten(loads_bounded(real)), flatten(loads_bounded(rehearsed))
    except ValueError:
        return {"real": [], "rehearsed": []}
    return {
        "real": sorted(k for k, v in a.items() if k not in b or b[k] != v),
        "rehearsed": sorted(k for k, v in b.items() if k not in a or a[k] != v),
    }


def _episode(r: dict, source: str) -> dict:
    messages = r.get("messages") if isinstance(r.get("messages"), list) else []
    return {
        "source": source,
        "task_id": str(r.get("task_id")),
        "seed": r.get("seed"),
        "reward": r.get("reward"),
        "reward_source": r.get("reward_source"),
        "dynamics": r.get("dynamics"),
        "agent": r.get("agent"),
        "turns": r.get("turns"),
        "real_calls": r.get("real_calls"),
        "tool_calls": r.get("tool_calls"),
        "ended_by": r.get("ended_by"),
        "error": r.get("error"),
        "attempts": r.get("rehearsal_attempts"),
        "reward_info": r.get("reward_info"),
        "messages": messages,
        "opening": r.get("opening_messages", 0),
        "private_context": r.get("private_context") or [],
    }


def _call(r: dict, source: str) -> dict:
    real, rehearsed = str(r.get("real", "")), str(r.get("rehearsed", ""))
    return {
        "source": source,
        "task_id": str(r.get("task_id")),
        "tool": str(r.get("tool")),
        "arguments": r.get("arguments"),
        "real": real,
        "rehearsed": rehearsed,
        **{k: r.get(k) for k in ("parsed", "shape", "leaf_match", "error_agree", "exact")},
        "diff": _diff(real, rehearsed),
    }


def _training_svg(rows: list[dict], title: str) -> str:
    """Training curves (:func:`records.training_figure`) as one inline SVG (matplotlib's SVG backend
    writes its text XML-escaped); empty without a curve."""
    fig = records.training_figure(rows, title)
    if fig is None:
        return ""
    import matplotlib.pyplot as plt

    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg") :]


def collect(paths: Sequence[str | Path]) -> dict:
    """The page's data from ``run`` and ``compare`` JSONL files, ``train``/``sft`` output folders and
    ``eval`` output folders (their runs' records and world-model calls)."""
    data: dict = {"episodes": [], "calls": [], "training": []}
    for path in map(Path, paths):
        if path.is_dir() and (path / "results.json").is_file():  # an eval's folder: records/ENV/..., world/ENV/...
            for file in sorted((path / "records").rglob("*.jsonl")) + sorted((path / "world").rglob("*.jsonl")):
                _add(data, file, str(file.relative_to(path)))
            continue
        if path.is_dir():
            metrics = path / "metrics.jsonl"
            if not metrics.is_file():
                raise ValueError(f"{path}: a training folder holds metrics.jsonl; this one does not")
            rows = records.rows(metrics)
            data["training"].append({"name": str(path), "steps": len(rows), "svg": _training_svg(rows, str(path))})
            continue
        _add(data, path, path.name)
    return data


def _add(data: dict, path: Path, source: str) -> None:
    """The records of a ``run`` or ``compare`` file into ``data``, each labelled with ``source``."""
    for r in records.rows(path):
        if "rehearsed" in r and "real" in r and "tool" in r:
            data["calls"].append(_call(r, source))
        else:
            data["episodes"].append(_episode(r, source))


def _standard(value):
    """``value`` with each NaN or infinity as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``:
    standard JSON, which a browser's ``JSON.parse`` reads (``records.rows`` bounds the depth)."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if isinstance(value, dict):
        return {k: _standard(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_standard(v) for v in value]
    return value


def render(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Write the viewer of ``paths`` to ``out``; returns ``out``."""
    data = collect(paths)
    svgs = "".join(f'<section class="train"><h3></h3>{t["svg"]}</section>' for t in data["training"] if t["svg"])
    for t in data["training"]:
        t.pop("svg")
    parts = {"__DATA__": escape_tags(json.dumps(_standard(data), allow_nan=False)), "__SVGS__": svgs}
    html = PLACEHOLDER.sub(lambda m: parts[m[0]], PAGE)  # one pass: what is put in is never searched again
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out


PLACEHOLDER = re.compile("__DATA__|__SVGS__")
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>envace-gym view</title>
<style>
body{font:13px system-ui,sans-serif;margin:0;color:#222}header{background:#24324a;color:#fff;padding:8px 14px}
header span{color:#b8c2d6;margin-left:8px}main{padding:10px 14px}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}th{cursor:pointer;background:#f3f5f8}
tr.row:hover{outline:2px solid #8ab;cursor:pointer}tr.sel{outline:2px solid #24324a}
.msg{border-left:4px solid #999;margin:6px 0;padding:4px 8px;white-space:pre-wrap}
.system{border-color:#888;background:#f6f6f6}.user{border-color:#2b7}.assistant{border-color:#36c}.tool{border-color:#c83}
.err{color:#b00;font-weight:bold}.role{font-weight:bold;font-size:11px;text-transform:uppercase;color:#555}
.call{font-family:monospace;background:#eef;padding:2px 4px;margin:2px 0}.side{display:flex;gap:12px}
.side>div{flex:1;min-width:0}.json{font-family:monospace;white-space:pre-wrap;overflow-wrap:anywhere}.diff{background:#ffd24d}
details{margin:4px 0}.pager{margin:6px 0}.muted{color:#777}
#summary{display:flex;flex-wrap:wrap;gap:12px 32px;align-items:flex-start;padding-bottom:10px;margin-bottom:8px;border-bottom:1px solid #ddd}
#summary h2{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:#555;margin:0 0 6px}
#summary table{width:auto}#summary th{cursor:default}
.tiles{display:grid;grid-template-columns:auto auto;gap:6px}.tile{background:#f3f5f8;border-radius:4px;padding:4px 10px}
.tile b{display:block;font-size:18px}.tile.zero b{color:#aaa}.tile.bad b{color:#b00}
.chart text{font-size:11px;fill:#222}.chart g.bar{cursor:pointer}.chart g.bar:hover .track{fill:#dde8ff}
nav button.on{background:#24324a;color:#fff;border:1px solid #24324a}
#work{display:flex;gap:14px;align-items:flex-start}#list{flex:1;min-width:0;overflow-x:auto}
#detail{flex:0 0 56%;min-width:0;box-sizing:border-box;position:sticky;top:0;max-height:100vh;overflow:auto;
  border-left:3px solid #24324a;padding:0 10px 10px}#detail:empty{display:none}#detail h3{margin:8px 0}
#detail .links a{margin-right:14px}
@media (max-width:900px){#work{display:block}#detail{position:static;max-height:none;border-left:0;border-top:3px solid #24324a}}
</style></head><body>
<header><b>envace-gym view</b><span id="counts"></span></header>
<main>
<section id="summary"></section>
<nav><button data-tab="runs">Episodes</button><button data-tab="calls">Real vs rehearsed</button>
<button data-tab="tools">Per tool</button><button data-tab="training">Training</button>
<input id="q" placeholder="filter" size="30"></nav>
<div id="work"><div id="list"><div class="pager" id="pager"></div>
<table id="table"><thead></thead><tbody></tbody></table></div>
<div id="detail"></div></div>
<div id="training" hidden>__SVGS__</div>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const PAGE = 100;
const FIDELITY = ["parsed", "shape", "leaf_match", "error_agree", "exact"];
const COLUMNS = {
  runs: ["i", "task_id", "reward", "reward_source", "dynamics", "agent", "turns", "real_calls", "ended_by", "error", "attempts"],
  calls: ["i", "task_id", "tool", "parsed", "leaf_match", "exact", "shape", "error_agree"],
  tools: ["tool", "calls", "parsed", "leaf_match", "exact", "shape", "error_agree"],
};
const BESIDE = {  // the columns shown while a detail is open beside the list
  runs: ["i", "task_id", "reward", "dynamics", "agent", "ended_by", "error"],
  calls: ["i", "task_id", "tool", "parsed", "leaf_match", "exact"],
};
DATA.episodes.forEach((e, i) => e.i = i);
DATA.calls.forEach((c, i) => c.i = i);
// the tab with data opens first, unless the URL fragment names one
const FIRST = DATA.episodes.length ? "runs" : DATA.calls.length ? "calls" : DATA.training.length ? "training" : "runs";
function mean(rows, k) {  // over the finite values (a boolean counts 0 or 1); null without one
  const xs = rows.map(r => typeof r[k] === "boolean" ? Number(r[k]) : r[k])
    .filter(v => typeof v === "number" && isFinite(v));
  return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null;
}
function groups(rows, key) {
  const by = new Map();
  for (const r of rows) {
    const k = key(r);
    if (!by.has(k)) by.set(k, []);
    by.get(k).push(r);
  }
  return by;
}
const TOOLS = [...groups(DATA.calls, c => c.tool)].map(([tool, rows]) =>
  Object.assign({tool, calls: rows.length}, ...FIDELITY.map(k => ({[k]: mean(rows, k)}))));
function shade(v, light) {  // red (0) to green (1); "" for what is not a number
  if (typeof v === "boolean") v = Number(v);
  if (typeof v !== "number" || !isFinite(v)) return "";
  return `hsl(${Math.round(120 * Math.min(1, Math.max(0, v)))}, 65%, ${light}%)`;
}
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = String(text);
  return node;
}
function state() {
  const s = {tab: FIRST, q: "", sort: "", page: "0", open: "", task: ""};
  for (const part of location.hash.slice(1).split("&")) {
    const [k, v] = part.split("=");
    if (k in s && v !== undefined) s[k] = decodeURIComponent(v);
  }
  return s;
}
function fragment(change) {  // a link to the view with ``change``, the rest reset
  const s = Object.assign({tab: FIRST, q: "", sort: "", page: "0", open: "", task: ""}, change);
  return "#" + Object.entries(s).map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
}
function go(change) { location.hash = fragment(Object.assign(state(), change)); }
function link(text, change) {
  const a = el("a", "", text);
  a.href = fragment(change);
  return a;
}
function cell(v) {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
  if (typeof v === "boolean") return v ? "yes" : "no";
  return v === null || v === undefined ? "" : String(v);
}
function summary() {
  const box = document.getElementById("summary");
  const failed = DATA.episodes.filter(e => e.error).length;
  const counts = el("div");
  const tiles = el("div", "tiles");
  for (const [n, label, bad] of [[DATA.episodes.length, "episodes"], [failed, "failed (error)", failed > 0],
                                 [DATA.calls.length, "compared calls"], [DATA.training.length, "training runs"]]) {
    const tile = el("div", bad ? "tile bad" : n ? "tile" : "tile zero");
    tile.append(el("b", "", n), el("span", "muted", label));
    tiles.append(tile);
  }
  counts.append(el("h2", "", "counts"), tiles);
  box.append(counts);
  if (DATA.episodes.length) {
    const part = el("div"), table = el("table");
    part.id = "by-dynamics";
    const head = el("tr");
    for (const c of ["dynamics", "agent", "episodes", "mean reward", "failed"]) head.append(el("th", "", c));
    table.append(head);
    for (const rows of groups(DATA.episodes, e => cell(e.dynamics) + "\\u0000" + cell(e.agent)).values()) {
      const r = mean(rows, "reward"), tr = el("tr");
      const td = el("td", "", r === null ? "" : r.toFixed(3));
      if (r !== null) td.style.background = shade(r, 82);
      tr.append(el("td", "", cell(rows[0].dynamics)), el("td", "", cell(rows[0].agent)), el("td", "", rows.length), td,
                el("td", "", rows.filter(e => e.error).length));
      table.append(tr);
    }
    part.append(el("h2", "", "reward by dynamics"), table);
    box.append(part);
  }
  if (DATA.calls.length) box.append(fidelityChart());
}
function fidelityChart() {  // mean leaf_match per tool (the most-called first), all calls on top
  const MAX = 12, LABEL = 200, BAR = 200, ROW = 18, num = v => v === null ? "–" : v.toFixed(2);
  const tools = [...TOOLS].sort((a, b) => b.calls - a.calls || a.tool.localeCompare(b.tool));
  const all = Object.assign({tool: "all calls", all: true, calls: DATA.calls.length},
                            ...FIDELITY.map(k => ({[k]: mean(DATA.calls, k)})));
  const rows = [all, ...tools.slice(0, MAX)];
  const chart = svg("svg", {class: "chart", id: "fidelity-chart", width: LABEL + BAR + 170, height: rows.length * ROW + 4});
  rows.forEach((r, n) => {
    const y = n * ROW + 2, v = r.leaf_match, g = svg("g", {class: "bar"});
    if (!r.all) g.dataset.tool = r.tool;
    g.append(svg("title", {}, `${r.tool}: ${r.calls} calls, leaf_match ${num(v)}, exact ${num(r.exact)}, parsed ${num(r.parsed)}`),
             svg("text", {x: LABEL - 6, y: y + 12, "text-anchor": "end", "font-weight": r.all ? "bold" : "normal"},
                 r.tool.length > 30 ? r.tool.slice(0, 29) + "…" : r.tool),
             svg("rect", {class: "track", x: LABEL, y, width: BAR, height: ROW - 4, fill: "#eef0f3"}));
    if (v !== null) {
      const width = Math.max(1, BAR * Math.min(1, Math.max(0, v)));
      g.append(svg("rect", {x: LABEL, y, width, height: ROW - 4, fill: shade(v, 50)}));
    }
    g.append(svg("text", {x: LABEL + BAR + 6, y: y + 12},
                 `${num(v)} · exact ${num(r.exact)} · ${r.calls} call${r.calls === 1 ? "" : "s"}`));
    g.addEventListener("click", () => go({tab: "calls", q: r.all ? "" : r.tool, sort: "", page: "0", open: "", task: ""}));
    chart.append(g);
  });
  const part = el("div"), more = tools.length > MAX ? ` (the ${MAX} most-called of ${tools.length})` : "";
  part.append(el("h2", "", "fidelity per tool: mean leaf_match" + more), chart);
  return part;
}
function rowsFor(s) {
  let rows = s.tab === "runs" ? DATA.episodes : s.tab === "calls" ? DATA.calls : TOOLS;
  if (s.task && s.tab !== "tools") rows = rows.filter(r => r.task_id === s.task);
  if (s.q) {
    const q = s.q.toLowerCase();
    rows = rows.filter(r => COLUMNS[s.tab].some(k => cell(r[k]).toLowerCase().includes(q)));
  }
  if (s.sort) {
    const key = s.sort.replace(/^-/, ""), sign = s.sort.startsWith("-") ? -1 : 1;
    rows = [...rows].sort((a, b) => {
      const x = a[key], y = b[key];
      if (typeof x === "number" && typeof y === "number") return sign * (x - y);
      return sign * cell(x).localeCompare(cell(y));
    });
  }
  return rows;
}
function draw() {
  const s = state();
  document.getElementById("q").value = s.q;
  const sizes = {runs: DATA.episodes.length, calls: DATA.calls.length, tools: TOOLS.length, training: DATA.training.length};
  document.querySelectorAll("nav button").forEach(b => {
    b.classList.toggle("on", b.dataset.tab === s.tab);
    b.hidden = !sizes[b.dataset.tab] && b.dataset.tab !== s.tab;  // no empty tab on offer
  });
  const training = s.tab === "training";
  document.getElementById("training").hidden = !training;
  document.getElementById("work").hidden = training;
  const table = document.getElementById("table"), head = table.tHead, body = table.tBodies[0];
  const pager = document.getElementById("pager"), box = document.getElementById("detail");
  head.replaceChildren(); body.replaceChildren(); pager.replaceChildren(); box.replaceChildren();
  if (training) {
    document.querySelectorAll("#training h3").forEach((h, i) => h.textContent = DATA.training[i] ? DATA.training[i].name : "");
    return;
  }
  const open = s.open !== "" && s.tab !== "tools", columns = (open ? BESIDE : COLUMNS)[s.tab], rows = rowsFor(s);
  const tr = el("tr");
  for (const c of columns) {
    const th = el("th", "", c + (s.sort === c ? " ▲" : s.sort === "-" + c ? " ▼" : ""));
    th.addEventListener("click", () => go({sort: s.sort === c ? "-" + c : c, page: "0"}));
    tr.append(th);
  }
  head.append(tr);
  const page = Number(s.page) || 0, shown = rows.slice(page * PAGE, (page + 1) * PAGE);
  for (const r of shown) {
    const row = el("tr", s.tab !== "tools" && String(r.i) === s.open ? "row sel" : "row");
    row.dataset.key = s.tab === "tools" ? r.tool : r.i;
    for (const c of columns) {
      const td = el("td", c === "error" && r[c] ? "err" : "", cell(r[c]));
      const bg = FIDELITY.includes(c) || c === "reward" ? shade(r[c], 82) : "";
      if (bg) td.style.background = bg;
      row.append(td);
    }
    row.addEventListener("click", () => s.tab === "tools" ? go({tab: "calls", q: r.tool, page: "0", open: "", task: ""})
                                                           : go({open: String(r.i)}));
    body.append(row);
  }
  table.dataset.rows = rows.length;
  pager.append(el("span", "muted", `${rows.length} rows · page ${page + 1} of ${Math.max(1, Math.ceil(rows.length / PAGE))} `));
  if (s.task && s.tab !== "tools") {
    pager.append(el("b", "", `task ${s.task} only `));
    const clear = el("button", "", "show all tasks");
    clear.onclick = () => go({task: "", page: "0", open: ""});
    pager.append(clear, " ");
  }
  if (page > 0) { const b = el("button", "", "previous"); b.onclick = () => go({page: String(page - 1)}); pager.append(b); }
  if ((page + 1) * PAGE < rows.length) { const b = el("button", "", "next"); b.onclick = () => go({page: String(page + 1)}); pager.append(b); }
  if (open) {
    const close = el("button", "", "close ✕");
    close.onclick = () => go({open: ""});
    box.append(close);
    (s.tab === "runs" ? showEpisode : showCall)(Number(s.open), s);
    const at = box.getBoundingClientRect();  // stacked under the list (a narrow window): bring it into view
    if (at.top > innerHeight / 2 || at.bottom < 0) box.scrollIntoView({block: "start"});
  }
}
function jsonTree(value, path, marked) {
  const out = el("div", "json");
  const walk = (v, p, indent) => {
    const pad = "  ".repeat(indent);
    if (v !== null && typeof v === "object" && Object.keys(v).length) {
      const isArray = Array.isArray(v);
      out.append(document.createTextNode(isArray ? "[\\n" : "{\\n"));
      Object.entries(v).forEach(([k, x], n, all) => {
        out.append(document.createTextNode(pad + "  " + (isArray ? "" : JSON.stringify(k) + ": ")));
        walk(x, isArray ? `${p}[${k}]` : (p ? `${p}.${k}` : k), indent + 1);
        out.append(document.createTextNode(n < all.length - 1 ? ",\\n" : "\\n"));
      });
      out.append(document.createTextNode(pad + (isArray ? "]" : "}")));
    } else {
      const leaf = el("span", marked.has(p) ? "diff" : "", JSON.stringify(v));
      if (marked.has(p)) leaf.dataset.path = p;
      out.append(leaf);
    }
  };
  walk(value, path, 0);
  return out;
}
function parsed(text) { try { return JSON.parse(text); } catch (e) { return text; } }
function showCall(i, s) {
  const c = DATA.calls[i], box = document.getElementById("detail");
  if (!c) return;
  box.append(el("h3", "", `${c.tool} · task ${c.task_id}`), el("div", "call", JSON.stringify(c.arguments)));
  box.append(el("p", "", `parsed ${cell(c.parsed)} · leaf_match ${cell(c.leaf_match)} · exact ${cell(c.exact)} · ` +
                         `${c.diff.real.length + c.diff.rehearsed.length} differing leaves`));
  const episodes = DATA.episodes.filter(e => e.task_id === c.task_id), links = el("p", "links");
  if (episodes.length === 1) links.append(link("open this task's episode", {tab: "runs", open: String(episodes[0].i)}));
  if (episodes.length > 1) links.append(link(`this task's ${episodes.length} episodes`, {tab: "runs", task: c.task_id}));
  if (s.task !== c.task_id) links.append(link("this task's compared calls", {tab: "calls", task: c.task_id}));
  box.append(links);
  const side = el("div", "side");
  for (const [name, text, marked] of [["real", c.real, c.diff.real], ["rehearsed", c.rehearsed, c.diff.rehearsed]]) {
    const col = el("div");
    let tree;
    try { tree = jsonTree(parsed(text), "", new Set(marked)); }
    catch (e) { tree = el("div", "json", text); }  // nested past the stack: the text as it is
    col.append(el("h4", "", name), tree);
    side.append(col);
  }
  box.append(side);
}
function showEpisode(i) {
  const e = DATA.episodes[i], box = document.getElementById("detail");
  if (!e) return;
  box.append(el("h3", "", `task ${e.task_id} · reward ${cell(e.reward)} (${cell(e.reward_source)}) · ${cell(e.ended_by)}`));
  box.append(el("p", "muted", `${cell(e.dynamics)} dynamics · agent ${cell(e.agent)} · ${cell(e.source)}`));
  const calls = DATA.calls.filter(c => c.task_id === e.task_id).length;
  if (calls) {
    const links = el("p", "links");
    links.append(link(`this task's ${calls} compared call${calls === 1 ? "" : "s"}`, {tab: "calls", task: e.task_id}));
    box.append(links);
  }
  if (e.error) box.append(el("p", "err", e.error));
  const info = el("details");
  info.append(el("summary", "", "reward_info"), el("div", "json", JSON.stringify(e.reward_info, null, 1)));
  box.append(info);
  const attempts = new Map(e.private_context.map(p => [p.position, p]));
  e.messages.forEach((m, n) => {
    const turn = attempts.get(n);
    if (turn) {
      const d = el("details");
      d.append(el("summary", "", `private rehearsal: ${turn.attempts.length} attempt(s), chosen ${cell(turn.chosen)}`));
      turn.attempts.forEach((a, k) => d.append(el("div", "json", `attempt ${k + 1}: ` + JSON.stringify(a, null, 1))));
      box.append(d);
    }
    const role = ["system", "user", "assistant", "tool"].includes(m.role) ? m.role : "system";
    const div = el("div", "msg " + role);
    div.append(el("div", "role", m.role + (m.name ? " · " + m.name : "")));
    const content = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
    const value = role === "tool" ? parsed(content) : null;
    const code = value && typeof value === "object" && value.error && value.error.code;
    if (code) div.append(el("div", "err", "error: " + code));
    if (content) div.append(el("div", "", content));
    for (const call of m.tool_calls || []) {
      const f = call.function || {};
      div.append(el("div", "call", `${f.name}(${typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments)})`));
    }
    if (role === "system") {  // the long policy prompt: folded
      const fold = el("details");
      fold.append(el("summary", "role", "system prompt"), div);
      box.append(fold);
    } else box.append(div);
  });
}
document.getElementById("counts").textContent =
  [...new Set([...DATA.episodes, ...DATA.calls].map(r => r.source).concat(DATA.training.map(t => t.name)))].join(" · ");
document.querySelectorAll("nav button").forEach(b => b.addEventListener("click", () =>
  go({tab: b.dataset.tab, q: "", sort: "", page: "0", open: "", task: ""})));
document.getElementById("q").addEventListener("change", ev => go({q: ev.target.value, page: "0", open: ""}));
window.addEventListener("hashchange", draw);
summary();
draw();
document.body.dataset.ready = "1";
</script></body></html>
"""
