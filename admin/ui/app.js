// Haltline control-plane page: the runs table and each run's timeline,
// read from /api/v1 only. Plain JS, no dependency, no CDN.
"use strict";

const FINAL = ["completed", "completed_with_degradation", "terminated", "failed", "cancelled"];
const TOKEN_KEY = "haltline.adminToken";
let pollTimer = null;

const $ = (sel) => document.querySelector(sel);

// el builds an element; text goes through textContent, so run data is never
// parsed as HTML.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}

function showError(msg) {
  const p = $("#error");
  p.textContent = msg || "";
  p.hidden = !msg;
}

// api calls the control plane with the token, if one was given. A 401 asks
// for the token once, then retries.
async function api(path, opts = {}) {
  const headers = Object.assign({ "Content-Type": "application/json" }, opts.headers || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const resp = await fetch(path, Object.assign({}, opts, { headers }));
  if (resp.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    await askToken();
    return api(path, opts);
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok && resp.status !== 409) {
    const m = body && body.error && (body.error.message || body.error);
    throw new Error(`${opts.method || "GET"} ${path}: ${resp.status} ${typeof m === "string" ? m : ""}`);
  }
  return { status: resp.status, body };
}

let tokenWaiters = null;
function askToken() {
  if (tokenWaiters) return new Promise((res) => tokenWaiters.push(res));
  tokenWaiters = [];
  $("#login").hidden = false;
  $("#token").focus();
  return new Promise((res) => {
    tokenWaiters.push(res);
    $("#login-form").onsubmit = (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("#token").value);
      $("#token").value = "";
      $("#login").hidden = true;
      const w = tokenWaiters;
      tokenWaiters = null;
      w.forEach((f) => f());
    };
  });
}

const fmtUSD = (v) => (v || 0).toFixed(6);
const fmtMs = (ms) => (ms >= 60000 ? (ms / 60000).toFixed(1) + " min" : ms >= 1000 ? (ms / 1000).toFixed(1) + " s" : (ms || 0) + " ms");
const badge = (status) => el("span", { class: "badge st-" + status, text: status });
const fmtTime = (s) => (s || "").replace("T", " ").replace(/\.\d+Z$/, "Z");

// idleAfterMs is the threshold of the "Idle after" field: a run that has not
// ended and has had no activity for longer most likely lost its agent (a
// crash, a closed laptop) and is not working, whatever its state says.
function idleAfterMs() {
  const v = Number(new FormData($("#filters")).get("idle"));
  return (Number.isFinite(v) && v >= 0 ? v : 2) * 60000;
}
const isIdle = (r) => !FINAL.includes(r.status) && (r.idle_ms || 0) > idleAfterMs();
const idleMark = (r) => el("span", { class: "idle-mark", title: "no activity since " + fmtTime(r.last_activity), text: "idle " + fmtMs(r.idle_ms) });

// Live counts from the unfiltered list: active runs and termination reasons.
async function refreshCounts() {
  const { body } = await api("/api/v1/runs");
  const runs = body.runs || [];
  $("#count-active").textContent = runs.filter((r) => !FINAL.includes(r.status)).length;
  const reasons = {};
  for (const r of runs) if (r.reason && r.reason !== "completed") reasons[r.reason] = (reasons[r.reason] || 0) + 1;
  const box = $("#count-reasons");
  box.replaceChildren(...Object.entries(reasons).sort((a, b) => b[1] - a[1])
    .map(([k, n]) => el("span", { class: "reason-count", "data-reason": k }, el("b", { text: n }), " " + k)));
}

function filterQuery() {
  const f = new FormData($("#filters"));
  const q = new URLSearchParams();
  for (const k of ["status", "reason", "tenant"]) if (f.get(k)) q.set(k, f.get(k));
  const since = Number(f.get("since"));
  if (since) q.set("since", new Date(Date.now() - since * 60000).toISOString().replace(/\.\d+Z$/, "Z"));
  return q.toString();
}

async function renderList() {
  const { body } = await api("/api/v1/runs?" + filterQuery());
  const runs = body.runs || [];
  const rows = runs.map((r) => el("tr", Object.assign({ "data-run": r.run_id }, isIdle(r) ? { class: "idle" } : {}),
    el("td", {}, el("a", { href: runHash(r) }, el("code", { text: r.run_id }))),
    el("td", { text: r.tenant || "" }), el("td", { text: r.team || "" }), el("td", { class: "model", text: r.model || "" }),
    el("td", { class: "status" }, badge(r.status), ...(isIdle(r) ? [idleMark(r)] : [])),
    el("td", { class: "reason", text: r.reason || "" }),
    el("td", { class: "num", text: r.agent_steps }), el("td", { class: "num", text: r.total_tokens }),
    el("td", { class: "num", text: fmtUSD(r.actual_cost_usd) }), el("td", { class: "num", text: fmtMs(r.elapsed_ms) }),
    el("td", { text: fmtTime(r.created) }), el("td", { class: "last-activity", text: fmtTime(r.last_activity) })));
  $("#runs-table tbody").replaceChildren(...rows);
  $("#runs-empty").hidden = runs.length > 0;
}

function fact(dl, name, value) {
  if (value === undefined || value === null || value === "") return;
  dl.append(el("dt", { text: name }), el("dd", { text: typeof value === "object" ? JSON.stringify(value) : value }));
}

async function renderRun(ref) {
  const [{ body: rec }, { body: evb }] = await Promise.all([
    api(runURL(ref, "")),
    api(runURL(ref, "/events")),
  ]);
  $("#run-id").textContent = rec.run_id;
  $("#run-status").replaceWith(Object.assign(el("span", {}, badge(rec.status), ...(isIdle(rec) ? [idleMark(rec)] : [])), { id: "run-status" }));
  const ended = FINAL.includes(rec.status);
  $("#run-ending").hidden = !ended;
  $("#run-ending").className = "ending" + (rec.status.startsWith("completed") ? " ok" : "");
  $("#run-reason").textContent = rec.reason || "";
  $("#run-detail").textContent = rec.detail ? "— " + rec.detail : "";
  const ev = [];
  if (rec.detector) ev.push("detector " + rec.detector);
  if (rec.terminated_at_step) ev.push("at step " + rec.terminated_at_step);
  if (rec.evidence && rec.evidence.length) ev.push("evidence " + rec.evidence.join(", "));
  if (rec.last_action) ev.push(`last action ${rec.last_action.tool} (arguments ${rec.last_action.arguments_hash})`);
  $("#run-evidence").textContent = ev.join(" · ");
  $("#btn-cancel").disabled = ended;
  $("#resume-box").hidden = !(ended && rec.recoverable);
  $("#btn-resume").dataset.token = rec.resume_token || "";

  const dl = $("#run-facts");
  dl.replaceChildren();
  fact(dl, "session", rec.session_id); fact(dl, "tenant", rec.tenant); fact(dl, "team", rec.team);
  fact(dl, "agent", rec.agent_id); fact(dl, "parent run", rec.parent_run_id); fact(dl, "task type", rec.task_type);
  fact(dl, "model", rec.model);
  fact(dl, "last activity", fmtTime(rec.last_activity) + (FINAL.includes(rec.status) ? "" : " (" + fmtMs(rec.idle_ms) + " ago)"));
  fact(dl, "steps", rec.agent_steps + (rec.max_steps ? " of " + rec.max_steps : ""));
  fact(dl, "model calls", rec.model_calls); fact(dl, "tool calls", rec.tool_calls);
  fact(dl, "input tokens", rec.input_tokens); fact(dl, "output tokens", rec.output_tokens);
  fact(dl, "reasoning tokens", rec.reasoning_tokens); fact(dl, "cached tokens", rec.cached_tokens);
  fact(dl, "cost USD", fmtUSD(rec.actual_cost_usd) + " (reserved, worst case " + fmtUSD(rec.estimated_cost_usd) + ")");
  fact(dl, "elapsed", fmtMs(rec.elapsed_ms) + (rec.deadline_ms ? " of " + fmtMs(rec.deadline_ms) : ""));
  fact(dl, "loop detector hits", rec.loop_detector_hits);
  fact(dl, "partial result", rec.partial_result_available ? "available" : "");
  fact(dl, "would terminate (shadow)", rec.would_terminate);

  drawTimeline(evb.events || [], rec);
}

// drawTimeline shows the run as it moved: a bar of the time spent in each
// state, and every event with tokens and cost accumulating.
function drawTimeline(events, rec) {
  const bar = $("#state-bar");
  bar.replaceChildren();
  const total = Math.max(rec.elapsed_ms || 0, events.length ? events[events.length - 1].elapsed_ms : 0, 1);
  let state = null, since = 0;
  const segment = (to, at) => {
    if (state !== null && at >= since) {
      const d = el("div", { class: "bar-" + (FINAL.includes(state) ? "final" : state), title: `${state} ${fmtMs(at - since)}`, text: state });
      d.style.flexGrow = String(Math.max(at - since, total / 200));
      bar.append(d);
    }
    state = to; since = at;
  };
  let tokens = 0, cost = 0;
  const rows = [];
  for (const e of events) {
    if ((e.type === "transition" || e.type === "resumed") && e.to) segment(e.to, e.elapsed_ms);
    let detail = e.detail || "";
    switch (e.type) {
      case "transition": case "resumed":
        detail = `${e.from || "·"} → ${e.to}${e.detail ? " (" + e.detail + ")" : ""}`; break;
      case "model_call":
        tokens += (e.input_tokens || 0) + (e.output_tokens || 0); cost += e.cost_usd || 0;
        detail = `${e.model || ""} HTTP ${e.status || ""} in=${e.input_tokens || 0} out=${e.output_tokens || 0}${e.detail ? " " + e.detail : ""}`; break;
      case "tool_call":
        detail = `${e.tool} (arguments ${e.arguments_hash || "–"})`; break;
    }
    rows.push(el("tr", { class: "event ev-" + e.type, "data-type": e.type },
      el("td", { class: "num", text: e.elapsed_ms }), el("td", { class: "num", text: e.step }),
      el("td", { text: e.type }), el("td", { text: detail }),
      el("td", { class: "num", text: tokens }), el("td", { class: "num", text: fmtUSD(cost) })));
  }
  if (state !== null && !FINAL.includes(state)) segment(null, total);
  else if (state !== null) segment(null, Math.max(since + total / 100, since));
  $("#timeline tbody").replaceChildren(...rows);
}

async function act(method, path, body) {
  const res = $("#action-result");
  try {
    const { status, body: b } = await api(path, { method, body: body ? JSON.stringify(body) : undefined });
    res.textContent = status === 409 ? "refused: " + (b.error || "") : "done";
  } catch (e) {
    res.textContent = e.message;
  }
  route();
}

async function showApprovals(ref) {
  const box = $("#approvals");
  box.hidden = false;
  box.replaceChildren(el("p", { class: "muted", text: "Loading approvals…" }));
  try {
    const { body } = await api("/api/v1/approvals");
    const list = (body.approvals || body || []).filter((a) => (!a.run_id || (a.run_id === ref.id && (a.tenant || "") === ref.tenant)) && (!a.status || a.status === "pending"));
    if (!list.length) { box.replaceChildren(el("p", { class: "muted", text: "No pending approval for this run." })); return; }
    box.replaceChildren(...list.map((a) => {
      const ticket = a.ticket || a.id;
      const row = el("div", { class: "approval" }, el("code", { text: ticket }), " ",
        `${a.tool || a.server || ""} ${a.level || ""} ${a.arguments_hash ? "(arguments " + a.arguments_hash + ")" : ""} `);
      for (const d of ["approve", "deny"]) {
        const b = el("button", { type: "button", "data-decision": d, text: d });
        b.onclick = () => act("POST", "/api/v1/approvals/" + encodeURIComponent(ticket), { decision: d, by: "web ui" });
        row.append(b, " ");
      }
      return row;
    }));
  } catch (e) {
    box.replaceChildren(el("p", { class: "muted", text: "Approvals unavailable: " + e.message }));
  }
}

async function route() {
  clearTimeout(pollTimer);
  const ref = currentRun();
  $("#list-view").hidden = !!ref;
  $("#run-view").hidden = !ref;
  try {
    await refreshCounts();
    if (ref) await renderRun(ref); else await renderList();
    showError("");
    document.body.dataset.ready = "true";
  } catch (e) {
    showError(e.message);
  }
  pollTimer = setTimeout(route, 2000);
}

// A run is named by its id within its tenant (two tenants may use one id):
// the view of a run is #/runs/ID?tenant=TENANT.
function runHash(rec) {
  return "#/runs/" + encodeURIComponent(rec.run_id) + "?tenant=" + encodeURIComponent(rec.tenant || "");
}

function currentRun() {
  const m = location.hash.match(/^#\/runs\/([^?]+)(?:\?tenant=(.*))?$/);
  return m ? { id: decodeURIComponent(m[1]), tenant: decodeURIComponent(m[2] || "") } : null;
}

function runURL(ref, suffix) {
  const q = ref.tenant ? "?tenant=" + encodeURIComponent(ref.tenant) : "";
  return "/api/v1/runs/" + encodeURIComponent(ref.id) + suffix + q;
}

$("#filters").addEventListener("change", route);
$("#filters").addEventListener("submit", (e) => { e.preventDefault(); route(); });
$("#btn-cancel").onclick = () => act("POST", runURL(currentRun(), "/cancel"));
$("#btn-resume").onclick = () => act("POST", runURL(currentRun(), "/resume"),
  { add_budget: $("#resume-budget").value, resume_token: $("#btn-resume").dataset.token });
$("#btn-approvals").onclick = () => showApprovals(currentRun());
window.addEventListener("hashchange", () => { document.body.dataset.ready = ""; $("#approvals").hidden = true; route(); });
route();
