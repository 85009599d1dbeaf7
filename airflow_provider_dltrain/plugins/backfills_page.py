"""The backfills page: a form, the plan table and the verdict grid, fetched from the plugin's endpoints.

Plain HTML and JS (no build step). It calls the endpoints with the page's own origin, so the Airflow
UI's ``_token`` cookie authenticates it; text from the responses is inserted as text, never as HTML.
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dltrain backfills</title>
<style>
 body{font-family:system-ui,sans-serif;margin:1rem;color:#1a202c}
 form{display:flex;gap:.5rem;align-items:end;flex-wrap:wrap;margin-bottom:1rem}
 label{display:flex;flex-direction:column;font-size:.8rem}
 table{border-collapse:collapse;margin:.5rem 0;width:100%}
 td,th{border:1px solid #cbd5e0;padding:.25rem .5rem;text-align:left;vertical-align:top;font-size:.85rem}
 .v{font-weight:600;white-space:nowrap} .skip,.reproduced{background:#c6f6d5}
 .recompute,.changed,.computed,.recomputed{background:#feebc8} .missing,.failed,.refused,.unknown{background:#fed7d7}
 .progress{background:#bee3f8} #grid{display:flex;flex-wrap:wrap;gap:4px}
 #grid button{min-width:7.5rem;border:1px solid #a0aec0;border-radius:4px;padding:.3rem;cursor:pointer}
 pre{white-space:pre-wrap;background:#f7fafc;padding:.5rem} .error{color:#c53030}
</style></head><body>
<h1>Backfills</h1>
<form id="f"><label>DAG <input id="dag" required></label>
 <label>From <input id="start" type="date" required></label><label>To <input id="end" type="date" required></label>
 <button id="planBtn" type="submit">Plan</button><button id="gridBtn" type="button">Verdicts</button></form>
<p id="status" role="status"></p>
<section id="planSection" hidden><h2>Plan</h2><p id="totals"></p>
 <table><thead><tr><th>date</th><th>will</th><th>why</th><th>trainings / cloud jobs / Spark stages</th></tr></thead>
 <tbody id="plan"></tbody></table></section>
<section id="gridSection" hidden><h2>Verdicts</h2><div id="grid"></div></section>
<section id="dateSection" hidden><h2 id="dateTitle"></h2><div id="date"></div></section>
<script>
const $ = (id) => document.getElementById(id);
const q = new URLSearchParams(location.search);
$("dag").value = q.get("dag_id") || "";
const today = new Date(); const weekAgo = new Date(today - 6 * 864e5);
$("start").value = q.get("start") || weekAgo.toISOString().slice(0, 10);
$("end").value = q.get("end") || today.toISOString().slice(0, 10);
const base = location.pathname.replace(/\\/$/, "") + "/api/dags/";
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function cls(verdict) { return (verdict || "").split(" ").pop(); }
async function get(path) {
  $("status").textContent = "loading…"; $("status").className = "";
  const r = await fetch(base + path, {credentials: "same-origin", headers: {Accept: "application/json"}});
  const body = await r.json().catch(() => ({}));
  if (!r.ok) { $("status").textContent = r.status + ": " + (body.detail || r.statusText); $("status").className = "error"; throw new Error(r.status); }
  $("status").textContent = ""; return body;
}
function range() { return encodeURIComponent($("dag").value) + "/%s?start=" + $("start").value + "&end=" + $("end").value; }
async function showPlan() {
  const plan = await get(range().replace("%s", "plan")); const body = $("plan"); body.replaceChildren();
  for (const d of plan.dates) {
    const tr = el("tr"); tr.dataset.testid = "plan-" + d.ds;
    tr.append(el("td", d.ds), el("td", d.verdict, "v " + cls(d.verdict)));
    const why = el("td"); const lines = d.reasons.length ? d.reasons : d.tasks.filter(t => t.decision === "skip").map(t => t.task_id + ": " + t.reason);
    for (const line of lines) why.append(el("div", line));
    for (const t of d.tasks) for (const c of t.changes) why.append(el("div", "  " + c.fact + ": " + JSON.stringify(c.before) + " → " + JSON.stringify(c.after)));
    tr.append(why, el("td", d.cost.trainings + " / " + d.cost.cloud_jobs + " / " + d.cost.spark_stages)); body.append(tr);
  }
  const t = plan.totals;
  $("totals").textContent = `${t["will skip"]} will skip, ${t["will recompute"]} will recompute, ${t.missing} missing, ${t.failed} failed, ${t["in progress"]} in progress; ${t.trainings} training(s), ${t.cloud_jobs} cloud job(s), ${t.spark_stages} Spark stage(s)`;
  $("planSection").hidden = false;
}
async function showGrid() {
  const grid = await get(range().replace("%s", "verdicts")); const box = $("grid"); box.replaceChildren();
  for (const d of grid.dates) {
    const b = el("button", d.ds + "\\n" + d.verdict, cls(d.verdict)); b.type = "button"; b.dataset.testid = "verdict-" + d.ds;
    b.style.whiteSpace = "pre"; b.onclick = () => showDate(d.ds); box.append(b);
  }
  $("gridSection").hidden = false;
}
async function showDate(ds) {
  const d = await get(encodeURIComponent($("dag").value) + "/dates/" + ds); const box = $("date"); box.replaceChildren();
  $("dateTitle").textContent = ds + ": " + d.report.verdict;
  const list = (title, items) => { if (!items || !items.length) return; box.append(el("h3", title)); const ul = el("ul"); for (const i of items) ul.append(el("li", i)); box.append(ul); };
  list("What changed", d.report.changes); list("Jobs submitted", d.report.jobs); list("Notes", d.report.notes);
  list("What a backfill would do now", d.plan.tasks.map(t => t.task_id + " (" + t.decision + "): " + t.reason));
  if (d.lineage) { box.append(el("h3", "Lineage: prediction → model → run → Delta version")); box.append(el("pre", JSON.stringify(d.lineage, null, 2))); }
  if (d.links.length) { box.append(el("h3", "Links")); for (const l of d.links) { const a = el("a", l.name); a.href = l.url; a.target = "_blank"; a.rel = "noopener"; box.append(a, el("br")); } }
  $("dateSection").hidden = false;
}
$("f").onsubmit = (e) => { e.preventDefault(); showPlan().catch(() => {}); };
$("gridBtn").onclick = () => showGrid().catch(() => {});
if ($("dag").value) { showPlan().catch(() => {}); showGrid().catch(() => {}); }
</script></body></html>
"""
