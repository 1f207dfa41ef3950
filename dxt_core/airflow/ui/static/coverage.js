// Archive coverage: metrics x days, archive state (cell) + Airflow state (stripe).
// One canvas draws only the visible part of the grid, so 300,000 cells cost what a screenful
// costs. Refill sends the plan from /api/refill/plan to Airflow's REST API with the
// signed-in user's own session cookie. Reconcile asks /api/reconcile for the source's counts of
// the range (counts only) and marks the cells whose source has more (late data).
"use strict";
(() => {
  const CFG = window.DXT_CONFIG || {};
  const $ = (id) => document.getElementById(id);
  const ARCHIVE = { A: "archived", E: "empty", M: "missing", C: "corrupt", K: "kept" };
  const AIRFLOW = { s: "success", f: "failed", r: "running", q: "queued", u: "up for retry",
                    n: "no run", o: "skipped" };
  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim();
  const ACOL = { A: color("--archived"), E: color("--empty"), M: color("--missing"),
                 C: color("--corrupt"), K: color("--kept") };
  const TCOL = { s: color("--ti-s"), f: color("--ti-f"), r: color("--ti-r"), q: color("--ti-q"),
                 u: color("--ti-u"), o: color("--ti-o") };
  const LABEL_W = 250, HEADER_H = 34, ROW_H = 18;
  const canvas = $("grid"), scroller = $("scroller"), ctx = canvas.getContext("2d");
  let data = null, rows = [], cw = 12, selected = new Set(), collapsed = new Set();
  let hover = null, current = null, refreshTimer = null, rendered = null;
  // "unit:day" -> what the last reconcile found for the cell (equal / more / fewer / error)
  let reconciled = new Map(), holes = new Set(), notOver = new Set();
  const MARK = { more: color("--late") || "#d69e2e", holes: color("--holes") || "#1a202c",
                 notOver: color("--not-over") || "#805ad5",
                 error: color("--ti-f") || "#e53e3e" };

  const api = async (path, init) => {
    const r = await fetch(path, { credentials: "same-origin", ...init,
      headers: { "Content-Type": "application/json", Accept: "application/json",
                 ...(init && init.headers) } });
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) {
      const d = body && body.detail;
      const msg = typeof d === "string" ? d : JSON.stringify(d || body || r.statusText);
      const err = new Error(`${r.status}: ${msg}`); err.status = r.status;
      err.reason = d && typeof d === "object" ? d.reason : undefined; throw err;
    }
    return body;
  };
  const status = (text, error) => { const s = $("status"); s.textContent = text;
                                    s.className = error ? "error" : ""; };
  const iso = (d) => d.toISOString().slice(0, 10);
  const key = (u, d) => `${u}:${d}`;

  // whether the group and name filters let unit u through
  function passes(name, u) {
    const filter = $("filter").value.trim().toLowerCase(), group = $("group").value;
    return (!group || data.groups[u] === group) && (!filter || name.toLowerCase().includes(filter));
  }

  function buildRows() {
    rows = [];
    let head = null;
    data.units.forEach((name, u) => {
      const g = data.groups[u];
      if (!passes(name, u)) return;
      if (!head || head.group !== g) { head = { group: g, count: 0 }; rows.push(head); }
      head.count++;
      if (!collapsed.has(g)) rows.push({ u });
    });
    const days = data.days.length;
    const avail = scroller.clientWidth - LABEL_W - 4;
    cw = Math.max(6, Math.min(24, Math.floor(avail / Math.max(days, 1))));
    $("spacer").style.width = `${LABEL_W + days * cw}px`;
    $("spacer").style.height = `${HEADER_H + rows.length * ROW_H}px`;
  }

  function resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = scroller.clientWidth, h = scroller.clientHeight;
    canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    canvas.style.width = `${w}px`; canvas.style.height = `${h}px`;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }

  function draw() {
    if (!data) return;
    const w = scroller.clientWidth, h = scroller.clientHeight;
    const sx = scroller.scrollLeft, sy = scroller.scrollTop;
    ctx.clearRect(0, 0, w, h);
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const r0 = Math.max(0, Math.floor(sy / ROW_H)), r1 = Math.min(rows.length, r0 + Math.ceil(h / ROW_H) + 1);
    const c0 = Math.max(0, Math.floor(sx / cw)), c1 = Math.min(data.days.length, c0 + Math.ceil(w / cw) + 1);
    const fg = color("--fg"), muted = color("--muted"), line = color("--line"), panel = color("--panel");
    for (let r = r0; r < r1; r++) {
      const row = rows[r], y = HEADER_H + r * ROW_H - sy;
      if (row.u === undefined) {
        ctx.fillStyle = panel; ctx.fillRect(0, y, w, ROW_H);
        ctx.fillStyle = fg;
        ctx.fillText(`${collapsed.has(row.group) ? "▸" : "▾"} ${row.group} (${row.count})`, 4, y + ROW_H / 2);
        continue;
      }
      const a = data.archive[row.u], t = data.airflow[row.u];
      for (let c = c0; c < c1; c++) {
        const x = LABEL_W + c * cw - sx;
        ctx.fillStyle = ACOL[a[c]]; ctx.fillRect(x + 1, y + 1, cw - 2, ROW_H - 7);
        const tc = t[c];
        if (tc !== "n") { ctx.fillStyle = TCOL[tc]; ctx.fillRect(x + 1, y + ROW_H - 5, cw - 2, 4); }
        const k = key(row.u, c), rec = reconciled.get(`${data.units[row.u]}:${data.days[c]}`);
        if (holes.has(k)) {  // archived with holes: a dark corner
          ctx.fillStyle = MARK.holes; ctx.beginPath(); ctx.moveTo(x + cw - 1, y + 1);
          ctx.lineTo(x + cw - 1, y + 7); ctx.lineTo(x + cw - 7, y + 1); ctx.fill();
        }
        if (notOver.has(k)) {  // archived before its day ended: a corner on the left
          ctx.fillStyle = MARK.notOver; ctx.beginPath(); ctx.moveTo(x + 1, y + 1);
          ctx.lineTo(x + 1, y + 7); ctx.lineTo(x + 7, y + 1); ctx.fill();
        }
        if (rec && (rec.state === "more" || rec.state === "error")) {  // late data: a ring
          ctx.strokeStyle = MARK[rec.state]; ctx.lineWidth = 2; ctx.strokeRect(x + 2, y + 2, cw - 4, ROW_H - 9);
        }
        if (selected.has(key(row.u, c))) {
          ctx.strokeStyle = color("--sel"); ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, cw - 2, ROW_H - 2);
        }
      }
      if (hover && hover.r === r) { ctx.fillStyle = "rgba(128,128,128,.12)"; ctx.fillRect(LABEL_W, y, w, ROW_H); }
    }
    if (hover && hover.c !== undefined) {
      ctx.fillStyle = "rgba(128,128,128,.12)";
      ctx.fillRect(LABEL_W + hover.c * cw - sx, HEADER_H, cw, Math.min(h, rows.length * ROW_H - sy));
    }
    // labels column and day header on top of the cells
    ctx.fillStyle = color("--bg"); ctx.fillRect(0, HEADER_H, LABEL_W, h);
    for (let r = r0; r < r1; r++) {
      const row = rows[r], y = HEADER_H + r * ROW_H - sy;
      if (row.u === undefined) {
        ctx.fillStyle = panel; ctx.fillRect(0, y, LABEL_W, ROW_H); ctx.fillStyle = fg;
        ctx.fillText(`${collapsed.has(row.group) ? "▸" : "▾"} ${row.group} (${row.count})`, 4, y + ROW_H / 2);
      } else {
        ctx.fillStyle = hover && hover.r === r ? fg : muted;
        const name = data.units[row.u], g = data.groups[row.u];
        let label = name.startsWith(`${g}/`) ? name.slice(g.length + 1) : name;
        while (label.length > 3 && ctx.measureText(label).width > LABEL_W - 24) label = `${label.slice(0, -2)}…`.replace(/……$/, "…");
        ctx.fillText(label, 16, y + ROW_H / 2);
      }
    }
    ctx.fillStyle = color("--bg"); ctx.fillRect(0, 0, w, HEADER_H);
    ctx.strokeStyle = line; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(0, HEADER_H - 0.5); ctx.lineTo(w, HEADER_H - 0.5); ctx.stroke();
    ctx.fillStyle = muted;
    const every = cw >= 22 ? 1 : cw >= 12 ? 2 : 7;
    for (let c = c0; c < c1; c++) {
      const day = data.days[c], x = LABEL_W + c * cw - sx;
      if (x < LABEL_W - 2) continue;
      const dom = Number(day.slice(8, 10));
      const monthDays = new Date(Date.UTC(+day.slice(0, 4), +day.slice(5, 7), 0)).getUTCDate();
      const roomy = (monthDays - dom + 1) * cw > 56;  // the month's name fits before the next
      if (dom === 1 || (c === c0 && roomy)) { ctx.fillStyle = fg; ctx.fillText(day.slice(0, 7), Math.max(x, LABEL_W), 9); ctx.fillStyle = muted; }
      // the last column always has its label; a regular one too close to it gives way
      const last = c === data.days.length - 1, room = (data.days.length - 1 - c) * cw >= 18;
      if (last || ((dom - 1) % every === 0 && dom <= 29 && room)) ctx.fillText(String(dom), x, 25);
    }
    ctx.fillStyle = fg; ctx.fillText(data.group_label, 4, 25);
  }

  function cellAt(ev) {
    const rect = scroller.getBoundingClientRect();
    const x = ev.clientX - rect.left + scroller.scrollLeft, y = ev.clientY - rect.top + scroller.scrollTop;
    const r = Math.floor((y - HEADER_H) / ROW_H);
    const c = Math.floor((x - LABEL_W) / cw);
    const inHeader = ev.clientY - rect.top < HEADER_H, inLabels = ev.clientX - rect.left < LABEL_W;
    if (inHeader || r < 0 || r >= rows.length) return null;
    const row = rows[r];
    if (row.u === undefined) return { r, group: row.group };
    if (inLabels || c < 0 || c >= data.days.length) return { r, u: row.u };
    return { r, c, u: row.u };
  }

  function reconcileText(rec) {
    if (!rec) return "";
    const n = (v) => (v === null || v === undefined ? "?" : Number(v).toLocaleString());
    if (rec.state === "more") return `; source has more: ${n(rec.source_count)} counted, ${n(rec.archive_count)} archived (late data: refill it)`;
    if (rec.state === "fewer") return `; source has fewer: ${n(rec.source_count)} counted, ${n(rec.archive_count)} archived (retention: archive kept)`;
    if (rec.state === "equal") return `; source count equal (${n(rec.source_count)})`;
    return `; reconcile failed: ${rec.detail}`;
  }

  function describe(u, c) {
    const d = data.details[`${u}:${c}`];
    const holed = holes.has(key(u, c)) ? " with holes"
      : notOver.has(key(u, c)) ? " before its day ended" : "";
    const rec = reconcileText(reconciled.get(`${data.units[u]}:${data.days[c]}`));
    return `${data.units[u]} · ${data.days[c]}: ${ARCHIVE[data.archive[u][c]]}${holed}, Airflow ${AIRFLOW[data.airflow[u][c]]}${d ? ` (${d})` : ""}${rec}`;
  }

  function summary() {
    const a = data.counts, t = data.airflow_counts;
    const cells = data.units.length * data.days.length;
    const ms = rendered === null ? "" : ` Rendered in ${(rendered / 1000).toFixed(2)} s (server ${
      (data.seconds.units + data.seconds.archive + data.seconds.airflow).toFixed(2)} s).`;
    $("summary").innerHTML = `<b>${esc(data.title)}</b> (DAG <code>${esc(data.dag_id)}</code>${data.paused ? ", paused" : ""}): ` +
      `${data.units.length} ${data.units.length === 1 ? "unit" : "units"} × ${data.days.length} days = ${cells.toLocaleString()} cells. ` +
      `Archive: ${Object.entries(a).map(([k, v]) => `${esc(k)} ${esc(v.toLocaleString())}`).join(", ")}. ` +
      `Airflow: ${Object.entries(t).filter(([, v]) => v).map(([k, v]) => `${esc(k)} ${esc(v.toLocaleString())}`).join(", ")}.${ms}`;
  }

  function legend() {
    $("legend").innerHTML =
      Object.entries(ARCHIVE).map(([k, v]) => `<span><i style="background:${ACOL[k]}"></i>${v}</span>`).join("") +
      "<span>· Airflow:</span>" +
      Object.entries(AIRFLOW).filter(([k]) => k !== "n").map(([k, v]) =>
        `<span><i class="stripe" style="background:${TCOL[k]}"></i>${v}</span>`).join("") +
      "<span>(no stripe: no run)</span>" +
      `<span>· <i class="corner" style="border-color:${MARK.holes}"></i>h: archived with holes</span>` +
      `<span><i class="corner" style="border-color:${MARK.notOver}"></i>archived before its day ended</span>` +
      `<span><i class="ring" style="border-color:${MARK.more}"></i>source has more (late data, after Reconcile)</span>` +
      "<span>· click: details; shift/ctrl-click: select</span>";
  }

  function updateSelection() {
    $("selection-count").textContent = `${selected.size} ${selected.size === 1 ? "cell" : "cells"} selected`;
    $("refill").disabled = selected.size === 0 || !data || !data.can_clear;
    $("refill").title = data && !data.can_clear ? "You may not clear task instances of this DAG" : "";
    $("reconcile").disabled = !data || !data.can_reconcile;
    $("reconcile").title = data && !data.can_reconcile ? "This source's backend cannot count at the source" : "";
    if (current) $("toggle-cell").textContent = selected.has(key(current.u, current.c)) ? "Unselect this cell" : "Select this cell";
    draw();
  }

  async function load(keepSelection) {
    const source = $("source").value;
    if (!source) return;
    const q = new URLSearchParams({ source, start: $("start").value, end: $("end").value });
    status("loading…");
    const t = performance.now();
    try {
      const doc = await api(`api/grid?${q}`);
      const sameShape = data && data.source === doc.source && data.days.join() === doc.days.join();
      data = doc;
      if (!keepSelection || !sameShape) selected = new Set();
      if (!sameShape) reconciled = new Map();
      holes = new Set(data.holes || []);
      notOver = new Set(data.not_over || []);
      const groups = [...new Set(data.groups)];
      const sel = $("group"), was = sel.value;
      sel.replaceChildren(new Option("all", ""), ...groups.map((g) => new Option(g, g)));
      sel.value = groups.includes(was) ? was : "";
      $("group-label").textContent = data.group_label[0].toUpperCase() + data.group_label.slice(1);
      buildRows(); resize(); draw();
      if (rendered === null) rendered = performance.now();  // since navigation start
      window.dxtCoverage.lastLoadMs = performance.now() - t;
      summary(); updateSelection();
      // a source's warnings go when another source is shown
      notice([CFG.not_ours ? notOurs() : "", ...data.warnings].filter(Boolean).join("; "));
      status(`updated ${new Date().toLocaleTimeString()}`);
      window.dxtCoverage.ready = true;
      window.dxtCoverage.loads++;
      scheduleRefresh();
      health();
      if (current) showDetail(current.u, current.c, true);
    } catch (e) {
      if (e.status === 401) { status(`could not load the grid: ${e.message}`, true); signIn(); return; }
      // a load that failed for a passing reason (Airflow busy: 5xx, 408, 429; a network blip:
      // no status) does not end the periodic refresh; a refused question (4xx) is not asked again
      const passing = !e.status || e.status >= 500 || e.status === 408 || e.status === 429;
      const again = data && passing ? scheduleRefresh(true) : false;
      status(`could not load the grid: ${e.message}${again ? `; trying again in ${RETRY_MS / 1000} s` : ""}`, true);
    }
  }

  // While runs are queued or running (or after a failed load), the grid loads again after a
  // while, if "refresh" is ticked. Returns whether a load is scheduled.
  const REFRESH_MS = 5000, RETRY_MS = 15000;
  function scheduleRefresh(failed) {
    clearTimeout(refreshTimer);
    refreshTimer = null;
    const busy = failed || data.airflow.some((row) => /[qru]/.test(row));
    if (busy && $("auto").checked) refreshTimer = setTimeout(() => load(true), failed ? RETRY_MS : REFRESH_MS);
    return refreshTimer !== null;
  }

  const notOurs = () => `${CFG.dag_id} is not a dxt-archive DAG; the coverage view shows the dxt DAGs.`;
  function notice(text) { const n = $("notice"); n.textContent = text; n.hidden = !text; }
  function signIn() { notice("Your Airflow session has ended: sign in again."); window.top.location.href = `${CFG.base}/`; }

  const uiLink = (path) => `${CFG.base}${path}`;
  const esc = (s) => String(s).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

  async function showDetail(u, c, quiet) {
    current = { u, c };
    const pane = $("detail");
    pane.hidden = false;
    $("detail-title").textContent = `${data.units[u]} · ${data.days[c]}`;
    if (!quiet) { $("detail-states").textContent = describe(u, c); $("detail-table").innerHTML = ""; }
    updateSelection();
    try {
      const q = new URLSearchParams({ source: data.source, unit: data.units[u], day: data.days[c] });
      const d = await api(`api/cell?${q}`);
      if (!current || current.u !== u || current.c !== c) return;
      $("detail-states").innerHTML =
        `Archive: <span class="badge" data-archive-state="${esc(d.archive_state)}" style="background:${esc(ACOL[Object.keys(ARCHIVE).find((k) => ARCHIVE[k] === d.archive_state)] || "#a0aec0")}">${esc(d.archive_state)}</span> ` +
        `Airflow: <span class="badge" data-airflow-state="${esc(d.airflow_state)}" style="background:${esc(TCOL[Object.keys(AIRFLOW).find((k) => AIRFLOW[k] === d.airflow_state)] || "#a0aec0")}">${esc(d.airflow_state)}</span>` +
        (d.problem ? `<br><span class="error">${esc(d.problem)}</span>` : "") +
        (d.kept ? `<br>Kept: on ${esc(d.kept.at)} the source had ${esc(d.kept.source_rows)} rows, the archive ${esc(d.kept.archive_rows)}; the archived file stays (trigger with <code>replace</code> to take the smaller day).` : "") +
        (d.check ? `<br><span id="detail-check">Checked against the source on ${esc(d.check.checked_at)}: ${esc(d.check.state)} (source ${esc(count(d.check.source_count))}, archive ${esc(count(d.check.archive_count))}; ${esc(plural(d.check.checks, "check", "checks"))})</span>` : "");
      const t = d.task;
      if (t) {
        const base = `/dags/${encodeURIComponent(d.dag_id)}/runs/${encodeURIComponent(t.run_id)}/tasks/${encodeURIComponent(d.task_id)}/mapped/${encodeURIComponent(t.map_index)}`;
        $("detail-links").innerHTML = `<a id="log-link" target="_top" href="${esc(uiLink(base))}">Log</a> · ` +
          `<a id="xcom-link" target="_top" href="${esc(uiLink(`${base}/xcom`))}">XCom</a> · try ${esc(t.try_number)} · run <code>${esc(t.run_id)}</code>`;
      } else {
        $("detail-links").textContent = d.runs.length ? "No task instance for this unit in the day's runs." : "No run archives this day yet.";
      }
      const m = d.manifest || {};
      const stats = m.requests && typeof m.requests === "object" ? m.requests : m;
      const fields = [
        ["manifest", d.manifest_path], ["data file", d.data_path], ["status", m.status], ["rows", m.rows],
        ["bytes", m.bytes], ["sha256", m.sha256],
        ["time span", m.first_timestamp || m.time_span ? JSON.stringify(m.time_span || [m.first_timestamp, m.last_timestamp]) : undefined],
        ["query window", m.window ? JSON.stringify(m.window) : m.query_window ? JSON.stringify(m.query_window) : undefined],
        ["requests", stats.requests], ["retries", stats.retries], ["splits", stats.splits],
        ["seconds", m.seconds], ["written at", m.written_at],
      ].filter(([, v]) => v !== undefined && v !== null);
      $("detail-table").innerHTML = fields.map(([k, v]) => `<tr><th>${k}</th><td>${esc(v)}</td></tr>`).join("");
      $("detail-runs").innerHTML = d.runs.length ? "<tr><th>run</th><th>run state</th><th>task</th></tr>" + d.runs.map((r) =>
        `<tr><td>${esc(r.run_id)}${r.day_from_param ? " (day param)" : ""}</td><td>${esc(r.run_state)}</td><td>${r.map_index === null ? "–" : `${esc(r.state)} (try ${esc(r.try_number)})`}</td></tr>`).join("") : "<tr><td>none</td></tr>";
      $("detail-json").textContent = d.manifest ? JSON.stringify(d.manifest, null, 2) : "(no manifest)";
    } catch (e) {
      $("detail-states").innerHTML = `<span class="error">${esc(e.message)}</span>`;
    }
  }

  function toggle(u, c) {
    const k = key(u, c);
    if (selected.has(k)) selected.delete(k); else selected.add(k);
    updateSelection();
  }

  async function planRefill(all) {
    // "all": the missing and failed cells of what the grid shows: its days (not the date
    // fields, which may have been edited without Show) and, with a filter, its rows only
    const body = { source: data.source, start: data.days[0], end: data.days[data.days.length - 1], cells: null };
    const filtered = $("filter").value.trim() || $("group").value;
    // (collapsed groups included: they are shown folded)
    if (all && filtered) body.units = data.units.filter(passes);
    if (!all) body.cells = [...selected].map((k) => { const [u, c] = k.split(":").map(Number); return [data.units[u], data.days[c]]; });
    const plan = await api("api/refill/plan", { method: "POST", body: JSON.stringify(body) });
    return plan;
  }

  const plural = (n, one, many) => `${n.toLocaleString()} ${n === 1 ? one : many}`;
  const count = (v) => (v === null || v === undefined ? "?" : Number(v).toLocaleString("en-US"));
  // "a, b and 3 more": the cells an action covers, escaped
  const cellList = (cells, n = 6) => {
    const shown = cells.slice(0, n).map(([u, d]) => `${esc(u)} ${esc(d)}`).join(", ");
    return cells.length > n ? `${shown} and ${(cells.length - n).toLocaleString()} more` : shown;
  };

  // The failed runs a backfill that reprocesses failed runs also reruns, whole (every task of
  // each: Airflow's _handle_clear_run), though no chosen cell lies in them: named, with counts.
  function otherFailed(b) {
    const runs = b.other_failed_runs || [];
    if (!runs.length) return "";
    const named = runs.slice(0, 6).map((r) => `<code>${esc(r.run_id)}</code> (${esc(r.day)})`).join(", ");
    return `; <b>Airflow also reruns whole ${plural(runs.length, "other failed run", "other failed runs")} of this range</b>, every task of ${runs.length === 1 ? "it" : "each"}: ` +
      named + (runs.length > 6 ? ` and ${(runs.length - 6).toLocaleString()} more` : "");
  }

  function showPlan(plan) {
    const items = [];
    for (const c of plan.clears) {
      items.push(c.whole_run
        ? `clear run <code>${esc(c.dag_run_id)}</code> whole: it ended before expanding its units, so Airflow expands them again (${cellList(c.cells)})`
        : `clear ${plural(c.task_ids.length, "task instance", "task instances")} of run <code>${esc(c.dag_run_id)}</code> (${cellList(c.cells)})`);
    }
    if (plan.backfill) {
      const b = plan.backfill, rerun = b.rerun_days || [], fresh = b.days.length - rerun.length;
      const what = [fresh ? `${plural(fresh, "day", "days")} with no run` : "",
                    rerun.length ? `${plural(rerun.length, "day", "days")} whose run failed in a cancelled backfill (Airflow does not start those runs again: the new backfill reruns them)` : ""].filter(Boolean).join(" and ");
      items.push(`backfill ${what} (${esc(b.from_date.slice(0, 10))} to ${esc(b.to_date.slice(0, 10))}; ` +
        (b.reprocess_behavior === "failed" ? "days in this range whose run failed are run again, the others left alone)" : "days that have a run are left alone)") +
        otherFailed(b));
    }
    for (const s of plan.skipped) items.push(`skip ${esc(s.unit)} ${esc(s.day)}: ${esc(s.reason)}`);
    if (!plan.can_clear) items.push(`<span class="error">you may not clear task instances of ${esc(plan.dag_id)}; Airflow would refuse the refill</span>`);
    $("plan").innerHTML = `<b>Refill ${plural(plan.cells, "cell", "cells")} of ${esc(plan.dag_id)}</b>` +
      (plan.paused ? ` <span class="error">(the DAG is paused: cleared tasks and the backfill's runs wait until it is unpaused)</span>` : "") +
      `<ul>${items.map((i) => `<li>${i}</li>`).join("") || "<li>nothing to do</li>"}</ul>`;
    $("confirm-refill").disabled = !(plan.clears.length || plan.backfill) || !plan.can_clear;
    $("confirm").hidden = false;
    window.dxtCoverage.plan = plan;
  }

  // The outcome of a refill stays on the page (the periodic refresh does not touch it) until
  // the user dismisses it: per action what Airflow answered, and every skipped cell's reason.
  function showResult(result) {
    const li = (cls, text) => `<li class="${cls}">${text}</li>`;
    const lines = [
      ...result.done.map((d) => li("ok", `${esc(d.what)} (${cellList(d.cells)})`)),
      ...result.failed.map((d) => li("error", `${esc(d.what)} (${cellList(d.cells)})`)),
      ...result.skipped.map((s) => li("skip", `not refilled: ${esc(s.unit)} ${esc(s.day)}: ${esc(s.reason)}`)),
    ];
    const n = (list) => list.reduce((k, d) => k + (d.cells ? d.cells.length : 1), 0);
    $("result-text").innerHTML = `<b>Refill of ${esc(result.dag_id)}: ${plural(n(result.done), "cell", "cells")} sent to Airflow, ` +
      `${n(result.failed).toLocaleString()} failed, ${result.skipped.length.toLocaleString()} not refilled</b><ul>${lines.join("")}</ul>`;
    $("result").className = result.failed.length ? "error" : "";
    $("result").hidden = false;
  }

  const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
  const sameDay = (a, b) => Date.parse(a) === Date.parse(b);

  // The DAG's backfills not completed yet, newest first (null if Airflow does not list them).
  async function openBackfills(dagId) {
    try {
      const r = await api(`${CFG.api}/backfills?dag_id=${encodeURIComponent(dagId)}&order_by=-id&limit=50`);
      return r.backfills.filter((x) => !x.completed_at);
    } catch (e) { return null; }
  }

  // Airflow's database was busy, not the request wrong: 503 "database is locked" (the
  // backfill route's answer, airflow/api_fastapi/core_api/routes/public/backfills.py), or 500
  // "Database error" (airflow/api_fastapi/common/exceptions.py, SQLAlchemyErrorHandler). On
  // SQLite the API server writes each changing request's action log on its event loop before
  // the route runs (logging/decorators.py, log_action), and that write gives up after 5 s when
  // a request of the same server holds the write lock (dxt_core/airflow/sqlite.py): a 500 the
  // route never saw. Both are tried again, 3 s apart, ten times.
  const dbBusy = (e) => e.status === 503 || (e.status === 500 && e.reason === "Database error");

  async function retried(call, label) {
    for (let busy = 0; ; busy++) {
      try {
        return { answer: await call(), busy };
      } catch (e) {
        if (!dbBusy(e) || busy >= 10) { e.busy = busy; throw e; }
        status(`${label}: ${e.message}; trying again (${busy + 1}/10)`);
        await sleep(3000);
      }
    }
  }
  const busyNote = (n) => n ? ` (Airflow's database was busy ${plural(n, "time", "times")} first)` : "";

  // One creation at a time, never two at once. On SQLite Airflow answers 503 ("database is
  // locked") while the scheduler holds the write lock; it may have committed the backfill's own
  // row before failing (airflow/models/backfill.py, _create_backfill commits it, then creates
  // the runs), and that empty backfill makes the next try a 409 ("already a running backfill")
  // until the scheduler completes it, which it does once an empty backfill is 2 minutes old
  // (jobs/scheduler_job_runner.py, _mark_backfills_complete). Tries again through both, and
  // says so; a backfill that was open before this refill is named, never touched.
  async function createBackfill(b, body, paused) {
    const before = await openBackfills(b.dag_id);
    const known = new Set((before || []).map((x) => x.id));
    const days = plural(b.days.length, "day", "days");
    const began = Date.now();
    let locked = 0, leftover = null;
    for (;;) {
      try {
        const r = await api(`${CFG.api}/backfills`, { method: "POST", body: JSON.stringify(body) });
        const notes = [locked ? `Airflow's database was busy ${plural(locked, "time", "times")} first` : "",
                       leftover ? `waited for Airflow to drop the empty backfill ${leftover} it kept from a locked try` : ""].filter(Boolean);
        const alsoRerun = (b.other_failed_runs || []).map((x) => `${x.run_id} (${x.day})`);
        if (paused) notes.push(`its runs wait until ${b.dag_id} is unpaused`);
        if (alsoRerun.length) notes.push(`it also reruns whole ${plural(alsoRerun.length, "other failed run", "other failed runs")} of its range: ${alsoRerun.slice(0, 6).join(", ")}${alsoRerun.length > 6 ? ` and ${alsoRerun.length - 6} more` : ""}`);
        return { ok: true, what: `backfill ${r.id} created over ${days}` + (notes.length ? ` (${notes.join("; ")})` : "") };
      } catch (e) {
        if (dbBusy(e) && locked < 10) {
          locked++;
          status(`backfill: ${e.message}; trying again (${locked}/10)`);
          await sleep(3000);
          continue;
        }
        if (e.status !== 409) return { ok: false, what: `backfill: ${e.message}` };
        const open = await openBackfills(b.dag_id);
        if (open === null) return { ok: false, what: `backfill: ${e.message}` };
        // ours: appeared during this refill's locked tries, over the same days
        const mine = locked && before !== null ? open.find((x) => !known.has(x.id) &&
          sameDay(x.from_date, b.from_date) && sameDay(x.to_date, b.to_date)) : undefined;
        if (mine && Date.now() - began < 240000) {
          leftover = mine.id;
          status(`backfill: Airflow kept an empty backfill ${mine.id} from a try it answered 'database is locked'; ` +
                 "its scheduler completes such a backfill once it is 2 minutes old: trying again");
          await sleep(5000);
          continue;
        }
        if (mine) return { ok: false, what: `backfill: Airflow still holds the empty backfill ${mine.id} it kept from a locked try, after 4 minutes: cancel it in Airflow's Backfills list, then refill again` };
        const others = open.map((x) => `${x.id} (${x.from_date.slice(0, 10)} to ${x.to_date.slice(0, 10)}${x.is_paused ? ", paused" : ""})`);
        return { ok: false, what: others.length
          ? `backfill: Airflow runs one backfill of a DAG at a time and backfill ${others.join(", ")} of ${b.dag_id} is not completed: let it finish or cancel it, then refill again` +
            (paused ? ` (${b.dag_id} is paused: Airflow starts none of its runs, backfill runs included, until it is unpaused)` : "")
          : `backfill: ${e.message}` };
      }
    }
  }

  async function runPlan(plan) {
    $("confirm").hidden = true;
    const done = [], failed = [];
    for (const c of plan.clears) {
      const body = { dry_run: false, dag_run_id: c.dag_run_id, only_failed: c.only_failed, reset_dag_runs: true,
                     include_upstream: false, include_downstream: false, note: "Refilled from the archive coverage view" };
      if (c.task_ids) body.task_ids = c.task_ids;
      try {
        const { answer: r, busy } = await retried(() => api(`${CFG.api}/dags/${encodeURIComponent(plan.dag_id)}/clearTaskInstances`,
                                                            { method: "POST", body: JSON.stringify(body) }), `clear ${c.dag_run_id}`);
        const want = c.task_ids ? c.task_ids.length : 1;
        const waits = plan.paused ? ` (they wait until ${plan.dag_id} is unpaused)` : "";
        if (r.total_entries >= want) done.push({ what: `cleared ${plural(r.total_entries, "task instance", "task instances")} in ${c.dag_run_id}${waits}${busyNote(busy)}`, cells: c.cells });
        else failed.push({ what: `Airflow cleared ${r.total_entries} of ${want} in ${c.dag_run_id}: reload and look at these cells' runs`, cells: c.cells });
      } catch (e) { failed.push({ what: `clear ${c.dag_run_id}: ${e.message}${busyNote(e.busy || 0)}`, cells: c.cells }); }
    }
    if (plan.backfill) {
      const b = plan.backfill, body = { dag_id: b.dag_id, from_date: b.from_date, to_date: b.to_date, reprocess_behavior: b.reprocess_behavior };
      if (b.max_active_runs) body.max_active_runs = b.max_active_runs;
      const made = await createBackfill(b, body, plan.paused);
      (made.ok ? done : failed).push({ what: made.what, cells: b.cells });
    }
    selected = new Set();
    const result = { dag_id: plan.dag_id, done, failed, skipped: plan.skipped };
    showResult(result);
    status(failed.length ? "refill: some actions failed (see above)" : "refill sent", failed.length > 0);
    await load(false);
    window.dxtCoverage.refills.push({ done: done.map((d) => d.what), failed: failed.map((d) => d.what), skipped: plan.skipped, result });
  }

  // Airflow's own health answer: a refill only queues work, the scheduler runs it.
  async function health() {
    try {
      const h = await api(`${CFG.api}/monitor/health`);
      const bad = ["scheduler", "triggerer", "dag_processor"].filter((k) => h[k] && h[k].status && h[k].status !== "healthy");
      $("health").textContent = bad.length ? `Airflow: ${bad.map((k) => `${k.replace("_", "-")} ${h[k].status}`).join(", ")}; queued work does not run until it is back` : "";
      $("health").hidden = !bad.length;
      window.dxtCoverage.health = h;
    } catch (e) {
      $("health").textContent = `Airflow's health is unknown: ${e.message}`;
      $("health").hidden = false;
    }
  }

  // the start field follows the source's start date until the user sets a range
  let defaultStart = null, autoStart = null, starts = {};
  function clampStart() {
    if (defaultStart === null || $("start").value !== autoStart) return;
    const first = starts[$("source").value];
    autoStart = first && first > defaultStart && first <= $("end").value ? first : defaultStart;
    $("start").value = autoStart;
  }

  async function reconcileRange() {
    if (!data) return;
    const body = { source: data.source, start: data.days[0], end: data.days[data.days.length - 1] };
    $("reconcile").disabled = true;
    status(`reconciling ${body.start}..${body.end} (counts at the source)…`);
    try {
      const doc = await api("api/reconcile", { method: "POST", body: JSON.stringify(body) });
      reconciled = new Map(doc.cells.map((r) => [`${r.unit}:${r.day}`, r]));
      // select the late-data cells, ready for a refill
      const late = doc.cells.filter((r) => r.state === "more")
        .map((r) => key(data.units.indexOf(r.unit), data.days.indexOf(r.day)))
        .filter((k) => !k.startsWith("-1:") && !k.endsWith(":-1"));
      if (late.length) selected = new Set(late);
      const counts = Object.entries(doc.counts).map(([k, v]) => `${v} ${k}`).join(", ") || "nothing archived";
      const kept = doc.counts.fewer && !doc.kept_recorded ? " (not recorded as kept: you may not edit this DAG)" : "";
      const compared = doc.cells.filter((r) => ["equal", "more", "fewer"].includes(r.state)).length;
      const recorded = compared ? (doc.kept_recorded
        ? `; ${doc.checks_recorded} of ${compared} ${compared === 1 ? "comparison" : "comparisons"} recorded in the archive`
        : "; comparisons not recorded (you may not edit this DAG)") : "";
      $("reconcile-result").textContent = `Reconcile ${doc.start}..${doc.end}: ${counts}${kept}${recorded}` +
        (late.length ? `; ${late.length} late-data ${late.length === 1 ? "cell" : "cells"} selected: Refill… fetches them again.` : ".");
      $("reconcile-result").hidden = false;
      window.dxtCoverage.reconciles.push(doc);
      status(`reconciled in ${doc.seconds.toFixed(1)} s`);
      await load(true);
    } catch (e) {
      status(`could not reconcile: ${e.message}`, true);
      if (e.status === 401) signIn();
    } finally {
      updateSelection();
    }
  }

  async function init() {
    legend();
    const end = new Date(Date.now() - 86400000), start = new Date(end.getTime() - 29 * 86400000);
    const qs = new URLSearchParams(location.search);
    $("start").value = qs.get("start") || iso(start);
    $("end").value = qs.get("end") || iso(end);
    if (CFG.not_ours) notice(notOurs());
    let doc;
    try { doc = await api("api/sources"); } catch (e) { status(e.message, true); if (e.status === 401) signIn(); return; }
    const sources = doc.sources;
    if (!sources.length) { notice("You may not read any dxt-archive DAG."); return; }
    $("source").replaceChildren(...sources.map((s) => new Option(`${s.title}${s.dag_exists ? "" : " (DAG not loaded)"}`, s.source)));
    const want = CFG.source || qs.get("source");
    if (want && sources.some((s) => s.source === want)) $("source").value = want;
    // the default range starts no earlier than the DAG's start date (days before it are
    // never scheduled: not missing)
    defaultStart = qs.get("start") ? null : iso(start);
    autoStart = $("start").value;
    starts = Object.fromEntries(sources.map((s) => [s.source, s.start_date]));
    clampStart();
    await load(false);
  }

  $("controls").addEventListener("submit", (e) => { e.preventDefault(); current = null; $("detail").hidden = true; load(false); });
  $("source").addEventListener("change", () => { current = null; $("detail").hidden = true; clampStart(); load(false); });
  $("filter").addEventListener("input", () => { if (data) { buildRows(); draw(); } });
  $("group").addEventListener("change", () => { if (data) { buildRows(); draw(); } });
  scroller.addEventListener("scroll", () => requestAnimationFrame(draw));
  window.addEventListener("resize", () => { if (data) { buildRows(); resize(); draw(); } });
  scroller.addEventListener("mousemove", (ev) => {
    if (!data) return;
    const cell = cellAt(ev), tip = $("tip");
    hover = cell && cell.c !== undefined ? cell : cell ? { r: cell.r } : null;
    if (cell && cell.c !== undefined) {
      tip.textContent = describe(cell.u, cell.c); tip.hidden = false;
      const rect = $("gridwrap").getBoundingClientRect();
      tip.style.left = `${Math.min(ev.clientX - rect.left + 12, rect.width - tip.offsetWidth - 4)}px`;
      tip.style.top = `${ev.clientY - rect.top + 14}px`;
    } else tip.hidden = true;
    draw();
  });
  scroller.addEventListener("mouseleave", () => { hover = null; $("tip").hidden = true; draw(); });
  scroller.addEventListener("click", (ev) => {
    if (!data) return;
    const cell = cellAt(ev);
    if (!cell) return;
    if (cell.group !== undefined) {
      if (collapsed.has(cell.group)) collapsed.delete(cell.group); else collapsed.add(cell.group);
      buildRows(); draw(); return;
    }
    if (cell.c === undefined) return;
    if (ev.shiftKey || ev.ctrlKey || ev.metaKey) toggle(cell.u, cell.c);
    else showDetail(cell.u, cell.c);
  });
  $("close-detail").addEventListener("click", () => { current = null; $("detail").hidden = true; });
  $("toggle-cell").addEventListener("click", () => { if (current) toggle(current.u, current.c); });
  $("clear-selection").addEventListener("click", () => { selected = new Set(); updateSelection(); });
  $("select-bad").addEventListener("click", async () => {
    try { showPlan(await planRefill(true)); } catch (e) { status(e.message, true); }
  });
  $("refill").addEventListener("click", async () => {
    try { showPlan(await planRefill(false)); } catch (e) { status(e.message, true); }
  });
  $("reconcile").addEventListener("click", reconcileRange);
  $("cancel-refill").addEventListener("click", () => { $("confirm").hidden = true; });
  $("auto").addEventListener("change", () => { if (data) scheduleRefresh(false); });
  $("dismiss-result").addEventListener("click", () => { $("result").hidden = true; });
  $("confirm-refill").addEventListener("click", () => runPlan(window.dxtCoverage.plan));

  // For tests and scripts: where a cell is drawn, and what the grid holds.
  window.dxtCoverage = {
    ready: false, loads: 0, refills: [], reconciles: [], plan: null, health: null,
    renderedMs: () => rendered,
    refreshPending: () => refreshTimer !== null,
    index(unit, day) { return { u: data.units.indexOf(unit), c: data.days.indexOf(day) }; },
    state(unit, day) {
      const { u, c } = this.index(unit, day);
      if (u < 0 || c < 0) return null;
      const rec = reconciled.get(`${unit}:${day}`);
      return { archive: ARCHIVE[data.archive[u][c]], airflow: AIRFLOW[data.airflow[u][c]],
               holes: holes.has(key(u, c)), reconcile: rec ? rec.state : null };
    },
    cellCenter(unit, day) {
      const { u, c } = this.index(unit, day);
      const r = rows.findIndex((row) => row.u === u);
      if (r < 0 || c < 0) return null;
      const y = HEADER_H + r * ROW_H, x = LABEL_W + c * cw;
      if (y < scroller.scrollTop + HEADER_H || y + ROW_H > scroller.scrollTop + scroller.clientHeight) scroller.scrollTop = y - HEADER_H - 40;
      if (x < scroller.scrollLeft + LABEL_W || x + cw > scroller.scrollLeft + scroller.clientWidth) scroller.scrollLeft = x - LABEL_W - 40;
      draw();
      // position inside the scroller element (what a click on it at that offset hits)
      return { x: x - scroller.scrollLeft + cw / 2, y: y - scroller.scrollTop + ROW_H / 2 };
    },
    selection: () => [...selected].map((k) => { const [u, c] = k.split(":").map(Number); return [data.units[u], data.days[c]]; }),
  };
  init();
})();
