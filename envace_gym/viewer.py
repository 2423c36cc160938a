"""``envace-gym view``: run records, compare records and training folders as one self-contained HTML file.

Everything the page shows comes from the records, which are untrusted: they travel as one standard
JSON document (a NaN or infinity as a string) inside a ``<script type="application/json">`` block
(every ``<`` written ``\\u003c``, so nothing in them can close it), put in the page in one pass with
the training plots (so text naming a placeholder stays text), and the page's own script puts them on
screen as text nodes only, never as markup. Tables are paginated and transcripts built when opened,
so a thousand long episodes open in a few seconds. No CDN, no network: the file opens from disk.

The page's state lives in its URL fragment (``#tab=runs&q=retail&sort=-reward&open=3``), so a
view can be linked, and checked by a headless browser.
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

from envace_gym import records
from envace_gym.fidelity import flatten
from envace_gym.messages import escape_tags, loads_bounded

TRAINING_PANELS = (  # (title, metric keys of metrics.jsonl)
    ("reward by role", ("reward", "reward/act", "reward/rehearse")),
    ("loss", ("loss/act", "loss/rehearse", "eval/loss/act", "eval/loss/rehearse")),
    ("KL and clip fraction", ("kl/act", "kl/rehearse", "clip_fraction/act", "clip_fraction/rehearse")),
    ("held-out evaluation", ("eval/reward", "eval/leaf_match", "eval/parsed")),
)


def _diff(real, rehearsed) -> dict:
    """The leaf paths where the two responses differ (``fidelity.flatten``'s paths)."""
    try:
        a, b = flatten(loads_bounded(real)), flatten(loads_bounded(rehearsed))
    except ValueError:
        return {"real": [], "rehearsed": []}
    return {"real": sorted(k for k, v in a.items() if k not in b or b[k] != v),
            "rehearsed": sorted(k for k, v in b.items() if k not in a or a[k] != v)}


def _episode(r: dict, source: str) -> dict:
    messages = r.get("messages") if isinstance(r.get("messages"), list) else []
    return {"source": source, "task_id": str(r.get("task_id")), "seed": r.get("seed"), "reward": r.get("reward"),
            "reward_source": r.get("reward_source"), "dynamics": r.get("dynamics"), "agent": r.get("agent"),
            "turns": r.get("turns"), "real_calls": r.get("real_calls"), "tool_calls": r.get("tool_calls"),
            "ended_by": r.get("ended_by"), "error": r.get("error"),
            "attempts": r.get("rehearsal_attempts"), "reward_info": r.get("reward_info"),
            "messages": messages, "opening": r.get("opening_messages", 0),
            "private_context": r.get("private_context") or []}


def _call(r: dict, source: str) -> dict:
    real, rehearsed = str(r.get("real", "")), str(r.get("rehearsed", ""))
    return {"source": source, "task_id": str(r.get("task_id")), "tool": str(r.get("tool")),
            "arguments": r.get("arguments"), "real": real, "rehearsed": rehearsed,
            **{k: r.get(k) for k in ("parsed", "shape", "leaf_match", "error_agree", "exact")},
            "diff": _diff(real, rehearsed)}


def _training_svg(rows: list[dict], title: str) -> str:
    """Training curves as one inline SVG (matplotlib's SVG backend writes its text XML-escaped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, [k for k in keys if any(isinstance(r.get(k), (int, float)) for r in rows)])
              for name, keys in TRAINING_PANELS]
    panels = [(name, keys) for name, keys in panels if keys]
    if not panels:
        return ""
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.8), squeeze=False)
    for ax, (name, keys) in zip(axes[0], panels):
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and "step" in r]
            if points:
                ax.plot(*zip(*points), marker="o", ms=2, label=key)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = out.getvalue()
    return svg[svg.index("<svg"):]


def collect(paths: list[str | Path]) -> dict:
    """The page's data from ``run`` and ``compare`` JSONL files and ``train``/``sft`` output folders."""
    data: dict = {"episodes": [], "calls": [], "training": []}
    for path in map(Path, paths):
        if path.is_dir():
            metrics = path / "metrics.jsonl"
            if not metrics.is_file():
                raise ValueError(f"{path}: a training folder holds metrics.jsonl; this one does not")
            rows = records.rows(metrics)
            data["training"].append({"name": str(path), "steps": len(rows), "svg": _training_svg(rows, str(path))})
            continue
        for r in records.rows(path):
            if "rehearsed" in r and "real" in r and "tool" in r:
                data["calls"].append(_call(r, path.name))
            else:
                data["episodes"].append(_episode(r, path.name))
    return data


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


def render(paths: list[str | Path], out: str | Path) -> Path:
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
nav button{margin-right:6px}main{padding:10px 14px}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}th{cursor:pointer;background:#f3f5f8}
tr.row:hover{background:#eef4ff;cursor:pointer}.msg{border-left:4px solid #999;margin:6px 0;padding:4px 8px;white-space:pre-wrap}
.system{border-color:#888;background:#f6f6f6}.user{border-color:#2b7}.assistant{border-color:#36c}.tool{border-color:#c83}
.err{color:#b00;font-weight:bold}.role{font-weight:bold;font-size:11px;text-transform:uppercase;color:#555}
.call{font-family:monospace;background:#eef;padding:2px 4px;margin:2px 0}.side{display:flex;gap:12px}
.side>div{flex:1;min-width:0}.json{font-family:monospace;white-space:pre-wrap}.diff{background:#ffd24d}
#detail{margin-top:12px}details{margin:4px 0}.pager{margin:6px 0}.muted{color:#777}
</style></head><body>
<header><b>envace-gym view</b> <span id="counts"></span></header>
<main>
<nav><button data-tab="runs">Episodes</button><button data-tab="calls">Real vs rehearsed</button>
<button data-tab="tools">Per tool</button><button data-tab="training">Training</button>
<input id="q" placeholder="filter" size="30"></nav>
<div class="pager" id="pager"></div>
<table id="table"><thead></thead><tbody></tbody></table>
<div id="detail"></div>
<div id="training" hidden>__SVGS__</div>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const PAGE = 100;
const COLUMNS = {
  runs: ["i", "task_id", "reward", "reward_source", "dynamics", "turns", "real_calls", "ended_by", "error", "attempts"],
  calls: ["i", "task_id", "tool", "parsed", "leaf_match", "exact", "shape", "error_agree"],
  tools: ["tool", "calls", "parsed", "leaf_match", "exact"],
};
DATA.episodes.forEach((e, i) => e.i = i);
DATA.calls.forEach((c, i) => c.i = i);
function toolRows() {
  const by = new Map();
  for (const c of DATA.calls) {
    if (!by.has(c.tool)) by.set(c.tool, []);
    by.get(c.tool).push(c);
  }
  const mean = (rows, k) => rows.reduce((s, r) => s + Number(r[k] || 0), 0) / rows.length;
  return [...by].map(([tool, rows]) => ({tool, calls: rows.length, parsed: mean(rows, "parsed"),
    leaf_match: mean(rows, "leaf_match"), exact: mean(rows, "exact")}));
}
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function state() {
  const s = {tab: "runs", q: "", sort: "", page: "0", open: ""};
  for (const part of location.hash.slice(1).split("&")) {
    const [k, v] = part.split("=");
    if (k in s && v !== undefined) s[k] = decodeURIComponent(v);
  }
  return s;
}
function go(change) {
  const s = Object.assign(state(), change);
  location.hash = Object.entries(s).map(([k, v]) => k + "=" + encodeURIComponent(v)).join("&");
}
function cell(v) {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
  if (typeof v === "boolean") return v ? "yes" : "no";
  return v === null || v === undefined ? "" : String(v);
}
function rowsFor(s) {
  let rows = s.tab === "runs" ? DATA.episodes : s.tab === "calls" ? DATA.calls : toolRows();
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
  document.getElementById("counts").textContent =
    `${DATA.episodes.length} episodes · ${DATA.calls.length} compared calls · ${DATA.training.length} training runs`;
  document.getElementById("q").value = s.q;
  const training = s.tab === "training";
  document.getElementById("training").hidden = !training;
  const table = document.getElementById("table"), head = table.tHead, body = table.tBodies[0];
  head.replaceChildren(); body.replaceChildren();
  document.getElementById("pager").replaceChildren();
  document.getElementById("detail").replaceChildren();
  table.hidden = training;
  if (training) {
    document.querySelectorAll("#training h3").forEach((h, i) => h.textContent = DATA.training[i] ? DATA.training[i].name : "");
    return;
  }
  const columns = COLUMNS[s.tab], rows = rowsFor(s);
  const tr = el("tr");
  for (const c of columns) {
    const th = el("th", "", c + (s.sort === c ? " ▲" : s.sort === "-" + c ? " ▼" : ""));
    th.addEventListener("click", () => go({sort: s.sort === c ? "-" + c : c, page: "0"}));
    tr.append(th);
  }
  head.append(tr);
  const page = Number(s.page) || 0, shown = rows.slice(page * PAGE, (page + 1) * PAGE);
  for (const r of shown) {
    const row = el("tr", "row");
    row.dataset.key = s.tab === "tools" ? r.tool : r.i;
    for (const c of columns) {
      const td = el("td", c === "error" && r[c] ? "err" : "", cell(r[c]));
      row.append(td);
    }
    row.addEventListener("click", () => s.tab === "tools" ? go({tab: "calls", q: r.tool, page: "0", open: ""})
                                                           : go({open: String(r.i)}));
    body.append(row);
  }
  table.dataset.rows = rows.length;
  const pager = document.getElementById("pager");
  pager.append(el("span", "muted", `${rows.length} rows · page ${page + 1} of ${Math.max(1, Math.ceil(rows.length / PAGE))} `));
  if (page > 0) { const b = el("button", "", "previous"); b.onclick = () => go({page: String(page - 1)}); pager.append(b); }
  if ((page + 1) * PAGE < rows.length) { const b = el("button", "", "next"); b.onclick = () => go({page: String(page + 1)}); pager.append(b); }
  if (s.open !== "") (s.tab === "runs" ? showEpisode : showCall)(Number(s.open));
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
function showCall(i) {
  const c = DATA.calls[i], box = document.getElementById("detail");
  if (!c) return;
  box.append(el("h3", "", `${c.tool} · task ${c.task_id}`), el("div", "call", JSON.stringify(c.arguments)));
  box.append(el("p", "", `parsed ${cell(c.parsed)} · leaf_match ${cell(c.leaf_match)} · exact ${cell(c.exact)} · ` +
                         `${c.diff.real.length + c.diff.rehearsed.length} differing leaves`));
  const episode = DATA.episodes.find(e => e.task_id === c.task_id);
  if (episode) {
    const link = el("a", "", "open this task's episode");
    link.href = `#tab=runs&q=&sort=&page=0&open=${episode.i}`;
    box.append(link);
  }
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
document.querySelectorAll("nav button").forEach(b => b.addEventListener("click", () =>
  go({tab: b.dataset.tab, q: "", sort: "", page: "0", open: ""})));
document.getElementById("q").addEventListener("change", ev => go({q: ev.target.value, page: "0", open: ""}));
window.addEventListener("hashchange", draw);
draw();
document.body.dataset.ready = "1";
</script></body></html>
"""
