// sandbox-agent inspector. Everything this page shows comes from a sandbox
// and is hostile: the DOM is built with createElement, setAttribute and
// text nodes only, never innerHTML or any other HTML parsing of data, and
// class names never come from data.
"use strict";

(function () {
  const POLL_MS = 2000;
  const CLIP = 20000; // characters of one output shown

  const state = {
    agents: [],
    agentsKey: "",
    selected: "", // agent id
    es: null, // EventSource of the selected agent
    groups: new Map(), // turn number -> live group
    loginRedirected: false,
    turnsTimer: 0,
  };

  const $ = (sel) => document.querySelector(sel);
  const enc = encodeURIComponent;

  // el builds an element: attrs are set with setAttribute (values as
  // text), children are nodes or strings (text nodes).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") e.className = v; // constants only
        else e.setAttribute(k, String(v));
      }
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false || c === "") continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  const str = (v) => (typeof v === "string" ? v : v === undefined || v === null ? "" : String(v));

  function clip(s) {
    s = str(s);
    if (s.length <= CLIP) return s;
    return s.slice(0, CLIP) + "\n… " + (s.length - CLIP) + " more characters";
  }

  function pretty(v) {
    try {
      return JSON.stringify(v, null, 2);
    } catch (e) {
      return str(v);
    }
  }

  function clock(t) {
    if (typeof t === "number") t = new Date(t * 1000);
    else t = new Date(str(t));
    return isNaN(t.getTime()) ? "" : t.toLocaleTimeString();
  }

  function when(t) {
    if (t === undefined || t === null || t === "") return "";
    const d = typeof t === "number" ? new Date(t * 1000) : new Date(str(t));
    return isNaN(d.getTime()) ? str(t) : d.toLocaleString();
  }

  function ms(v) {
    const n = Number(v);
    if (!isFinite(n)) return "";
    return n < 1000 ? n + " ms" : (n / 1000).toFixed(1) + " s";
  }

  // ---- errors -----------------------------------------------------------

  let errorTimer = 0;
  function showError(msg) {
    const box = $("#error");
    box.textContent = str(msg);
    box.hidden = false;
    clearTimeout(errorTimer);
    errorTimer = setTimeout(() => { box.hidden = true; }, 10000);
  }

  // ---- HTTP -------------------------------------------------------------

  class APIError extends Error {
    constructor(status, data) {
      super((data && typeof data.error === "string" && data.error) || "HTTP " + status);
      this.status = status;
      this.kind = data && typeof data.kind === "string" ? data.kind : "";
      this.data = data;
    }
  }

  async function api(method, path, body) {
    const opts = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        data = { error: text.slice(0, 200) };
      }
    }
    if (resp.status === 401 && !state.loginRedirected) {
      state.loginRedirected = true;
      location.assign("/"); // the login form
    }
    if (!resp.ok) throw new APIError(resp.status, data);
    return data;
  }

  const agentPath = (id) => "/v1/agents/" + enc(id);

  // ---- events -----------------------------------------------------------

  function kv(label, value, cls) {
    if (value === undefined || value === null || value === "") return null;
    return el("span", { class: "kv" + (cls ? " " + cls : "") }, el("span", { class: "k" }, label), " ", el("span", { class: "v" }, str(value)));
  }

  function usageBody(p) {
    const parts = [
      kv("in", p.input_tokens), kv("out", p.output_tokens),
      kv("cache read", p.cache_read_tokens), kv("cache write", p.cache_write_tokens),
      kv("reasoning", p.reasoning_tokens),
    ];
    if (typeof p.cost_usd === "number") parts.push(kv("cost", "$" + p.cost_usd.toFixed(4), "cost"));
    if (p.cumulative) parts.push(el("span", { class: "flag" }, "session total"));
    return el("div", { class: "usage" }, ...parts);
  }

  // eventRow renders one Event: <div class="event" data-kind="KIND">.
  function eventRow(ev) {
    ev = ev && typeof ev === "object" ? ev : {};
    const kind = str(ev.kind) || "unknown";
    const p = ev.payload && typeof ev.payload === "object" ? ev.payload : {};
    const row = el("div", { class: "event", "data-kind": kind });
    if (typeof ev.turn === "number") row.setAttribute("data-turn", String(ev.turn));
    row.append(el("div", { class: "ev-head" },
      el("span", { class: "ev-kind" }, kind),
      ev.time ? el("time", { class: "ev-time", datetime: str(ev.time) }, clock(ev.time)) : null,
      ev.line ? el("span", { class: "ev-line" }, "line " + str(ev.line)) : null));
    const body = el("div", { class: "ev-body" });
    switch (kind) {
      case "tool_call":
        body.append(el("span", { class: "tool" }, str(p.tool) || "tool"));
        if (p.call_id) body.append(el("span", { class: "call-id" }, str(p.call_id)));
        if (p.command) body.append(el("pre", { class: "command" }, clip(p.command)));
        if (p.path) body.append(el("div", { class: "path" }, str(p.path)));
        if (!p.command && p.input !== undefined) body.append(el("pre", { class: "input" }, clip(pretty(p.input))));
        break;
      case "tool_result": {
        const code = p.exit_code;
        const failed = p.is_error || (typeof code === "number" && code !== 0);
        if (failed) row.classList.add("failed");
        body.append(el("span", { class: "tool" }, str(p.tool) || "result"));
        if (p.call_id) body.append(el("span", { class: "call-id" }, str(p.call_id)));
        if (code !== undefined && code !== null) {
          body.append(el("span", { class: "exit-code" + (failed ? " bad" : " good"), "data-exit": str(code) }, "exit " + str(code)));
        } else if (p.is_error) {
          body.append(el("span", { class: "exit-code bad" }, "error"));
        }
        if (p.path) body.append(el("div", { class: "path" }, str(p.path)));
        if (p.output) body.append(el("pre", { class: "output" }, clip(p.output)));
        break;
      }
      case "text":
      case "thinking":
      case "done":
      case "error":
        if (p.delta) row.setAttribute("data-delta", "1");
        body.append(el("div", { class: "text" }, clip(p.text)));
        break;
      case "usage":
        body.append(usageBody(p));
        break;
      case "egress_denied":
        body.append(el("span", { class: "host" }, str(p.host)), " ", el("span", { class: "text" }, str(p.text)));
        break;
      case "session":
        body.append(el("span", { class: "session-id" }, str(ev.session_id || p.text)));
        break;
      case "raw":
        body.append(el("pre", { class: "raw" }, clip(p.raw || p.text)));
        break;
      default:
        body.append(el("pre", { class: "raw" }, clip(pretty(p))));
    }
    row.append(body);
    return row;
  }

  // appendEvent adds ev to box, joining a text/thinking delta to the
  // delta row before it.
  function appendEvent(box, ev) {
    const p = ev && ev.payload && typeof ev.payload === "object" ? ev.payload : {};
    const kind = str(ev && ev.kind);
    const last = box.lastElementChild;
    if (p.delta && (kind === "text" || kind === "thinking") && last &&
        last.getAttribute("data-kind") === kind && last.getAttribute("data-delta") === "1") {
      const t = last.querySelector(".text");
      if (t) {
        t.textContent = clip(t.textContent + str(p.text));
        return last;
      }
    }
    // A whole part after its deltas: the part replaces them.
    if (!p.delta && (kind === "text" || kind === "thinking") && last &&
        last.getAttribute("data-kind") === kind && last.getAttribute("data-delta") === "1") {
      const t = last.querySelector(".text");
      if (t && t.textContent === clip(p.text)) last.remove();
    }
    const row = eventRow(ev);
    box.append(row);
    return row;
  }

  function renderEvents(box, events) {
    box.replaceChildren();
    if (!Array.isArray(events) || events.length === 0) {
      box.append(el("p", { class: "empty" }, "no events"));
      return;
    }
    for (const ev of events) appendEvent(box, ev);
  }

  function resultSummary(r, cls) {
    r = r && typeof r === "object" ? r : {};
    const failed = !!r.error || (typeof r.exit_code === "number" && r.exit_code !== 0);
    return el("div", { class: cls + (failed ? " failed" : ""), "data-turn": typeof r.turn === "number" ? String(r.turn) : null },
      el("div", { class: "summary" },
        kv("turn", r.turn), kv("exit", r.exit_code), kv("took", r.duration_ms !== undefined ? ms(r.duration_ms) : ""),
        kv("session", r.session_id), r.error ? kv("error", (r.kind ? r.kind + ": " : "") + str(r.error), "bad") : null),
      r.reply !== undefined && r.reply !== "" ? el("div", { class: "reply" }, el("span", { class: "k" }, "reply"), " ", el("span", { class: "reply-text" }, clip(r.reply))) : null);
  }

  // ---- agents -----------------------------------------------------------

  function statusBadge(status) {
    const s = str(status);
    return el("span", { class: "status " + (s === "busy" ? "busy" : s === "idle" ? "idle" : "other"), "data-status": s }, s || "?");
  }

  function renderAgents(list) {
    const key = JSON.stringify(list) + "|" + state.selected;
    if (key === state.agentsKey) return;
    state.agentsKey = key;
    const box = $("#agents");
    if (list.length === 0) {
      box.replaceChildren(el("p", { class: "empty" }, "no agents (POST /v1/agents creates one)"));
      return;
    }
    box.replaceChildren(...list.map((a) => {
      const id = str(a.id);
      const row = el("div", { class: "agent" + (id === state.selected ? " selected" : ""), "data-id": id, "data-status": str(a.status), role: "button", tabindex: "0" },
        el("div", { class: "agent-head" }, el("span", { class: "agent-id" }, id), statusBadge(a.status)),
        el("div", { class: "agent-meta" }, el("span", { class: "driver" }, str(a.driver)), a.model ? el("span", { class: "model" }, str(a.model)) : null,
          kv("turns", a.turns)),
        el("div", { class: "agent-image", title: str(a.image) }, str(a.image)),
        el("div", { class: "agent-session" }, el("span", { class: "k" }, "session"), " ", el("span", { class: "v" }, str(a.session_id) || "—")));
      row.addEventListener("click", () => selectAgent(id));
      row.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); selectAgent(id); } });
      return row;
    }));
  }

  function renderAgentInfo() {
    const a = state.agents.find((x) => str(x.id) === state.selected);
    const box = $("#agent-info");
    if (!a) {
      box.replaceChildren(el("h2", null, state.selected), el("p", { class: "empty" }, "this agent is gone"));
      return;
    }
    box.replaceChildren(
      el("h2", null, "Agent ", el("span", { class: "agent-id" }, str(a.id)), " ", statusBadge(a.status)),
      el("div", { class: "info" },
        kv("driver", a.driver), kv("model", a.model), kv("image", a.image), kv("container", a.container),
        kv("session", a.session_id), kv("turns", a.turns), kv("created", when(a.created))));
  }

  async function refresh() {
    try {
      const [agents, health] = await Promise.all([api("GET", "/v1/agents"), api("GET", "/v1/health")]);
      state.agents = agents && Array.isArray(agents.agents) ? agents.agents : [];
      renderAgents(state.agents);
      if (health) $("#health").textContent = str(health.agents) + " agent(s) · " + (str(health.version) || "dev");
      if (state.selected) renderAgentInfo();
    } catch (e) {
      showError("agents: " + e.message);
    } finally {
      setTimeout(refresh, POLL_MS);
    }
  }

  // ---- selection and the live stream ------------------------------------

  function selectAgent(id) {
    if (id === state.selected && state.es) return;
    state.selected = id;
    state.agentsKey = "";
    history.replaceState(null, "", "#agent=" + enc(id));
    renderAgents(state.agents);
    $("#no-selection").hidden = true;
    $("#detail").hidden = false;
    $("#turn-status").textContent = "";
    $("#turn-detail").replaceChildren();
    $("#session-events").replaceChildren();
    renderAgentInfo();
    openLive(id);
    loadTurns();
    loadSessions();
  }

  function setLiveState(s) {
    const b = $("#live-state");
    b.textContent = s;
    b.setAttribute("data-state", s);
  }

  function openLive(id) {
    if (state.es) state.es.close();
    state.groups = new Map();
    $("#live").replaceChildren(el("p", { class: "empty" }, "Waiting for the next turn…"));
    $("#live").removeAttribute("data-running");
    setLiveState("connecting");
    const es = new EventSource(agentPath(id) + "/events", { withCredentials: true });
    state.es = es;
    const parse = (m) => {
      if (state.es !== es) return null;
      try {
        return JSON.parse(m.data);
      } catch (e) {
        return null;
      }
    };
    es.onopen = () => { if (state.es === es) setLiveState("connected"); };
    es.onerror = () => { if (state.es === es) setLiveState(es.readyState === EventSource.CLOSED ? "closed" : "reconnecting"); };
    es.addEventListener("turn_start", (m) => {
      const d = parse(m);
      if (d) liveTurnStart(d);
    });
    es.addEventListener("event", (m) => {
      const d = parse(m);
      if (d) liveEvent(d);
    });
    es.addEventListener("turn_end", (m) => {
      const d = parse(m);
      if (d) liveTurnEnd(d);
    });
  }

  // liveGroup is the block of one turn in #live.
  function liveGroup(turn, prompt) {
    const n = typeof turn === "number" ? turn : 0;
    let g = state.groups.get(n);
    if (g) return g;
    const live = $("#live");
    const empty = live.querySelector(":scope > .empty");
    if (empty) empty.remove();
    const events = el("div", { class: "events" });
    const head = el("div", { class: "turn-start", "data-turn": String(n) }, el("span", { class: "k" }, "turn " + n), " ", el("span", { class: "prompt" }, clip(prompt)));
    const node = el("div", { class: "live-turn", "data-turn": String(n), "data-state": "running" }, head, events);
    live.append(node);
    g = { node, head, events, seen: new Set() };
    state.groups.set(n, g);
    return g;
  }

  function scrollLive() {
    const live = $("#live");
    if (live.scrollHeight - live.scrollTop - live.clientHeight < 120) live.scrollTop = live.scrollHeight;
  }

  function liveTurnStart(d) {
    const g = liveGroup(d.turn, d.prompt);
    g.head.querySelector(".prompt").textContent = clip(d.prompt);
    $("#live").setAttribute("data-running", str(d.turn));
    scrollLive();
    loadTurns();
  }

  // liveEvent appends one event of the stream. A reconnected stream
  // replays the running turn from its start: what was shown is skipped.
  function liveEvent(ev) {
    const g = liveGroup(ev.turn, "");
    const key = JSON.stringify(ev);
    if (g.seen.has(key)) return;
    g.seen.add(key);
    appendEvent(g.events, ev);
    if (g.node.getAttribute("data-state") === "running") $("#live").setAttribute("data-running", str(ev.turn));
    scrollLive();
  }

  function liveTurnEnd(r) {
    const g = liveGroup(r.turn, r.prompt);
    if (r.prompt) g.head.querySelector(".prompt").textContent = clip(r.prompt);
    const old = g.node.querySelector(":scope > .turn-end");
    if (old) old.remove();
    g.node.append(resultSummary(r, "turn-end"));
    g.node.setAttribute("data-state", "done");
    $("#live").removeAttribute("data-running");
    scrollLive();
    loadTurns();
    loadSessions();
  }

  // ---- turns ------------------------------------------------------------

  async function loadTurns() {
    const id = state.selected;
    if (!id) return;
    let data;
    try {
      data = await api("GET", agentPath(id) + "/turns");
    } catch (e) {
      showError("turns: " + e.message);
      return;
    }
    if (state.selected !== id) return;
    const turns = data && Array.isArray(data.turns) ? data.turns : [];
    const box = $("#turns");
    if (turns.length === 0) {
      box.replaceChildren(el("p", { class: "empty" }, "no turns yet"));
    } else {
      box.replaceChildren(...turns.slice().reverse().map((t) => {
        const failed = !!t.error || (typeof t.exit_code === "number" && t.exit_code !== 0);
        const row = el("div", { class: "turn" + (failed ? " failed" : "") + (t.running ? " running" : ""), "data-turn": str(t.turn), role: "button", tabindex: "0" },
          el("div", { class: "turn-head" }, el("span", { class: "k" }, "#" + str(t.turn)),
            t.running ? el("span", { class: "status busy" }, "running") : kv("exit", t.exit_code),
            kv("took", t.duration_ms !== undefined && !t.running ? ms(t.duration_ms) : ""), kv("events", typeof t.events === "number" ? t.events : t.event_count),
            t.error ? el("span", { class: "bad" }, (t.kind ? str(t.kind) + ": " : "") + str(t.error)) : null),
          el("div", { class: "turn-prompt" }, str(t.prompt)),
          t.reply ? el("div", { class: "turn-reply" }, str(t.reply)) : null);
        const open = () => showTurn(id, t.turn);
        row.addEventListener("click", open);
        row.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
        return row;
      }));
    }
  }

  async function showTurn(id, n) {
    const box = $("#turn-detail");
    try {
      const r = await api("GET", agentPath(id) + "/turns/" + enc(n));
      if (state.selected !== id) return;
      const events = el("div", { class: "events" });
      renderEvents(events, r.events);
      box.replaceChildren(
        el("h3", null, "Turn " + str(r.turn), r.running ? " (running)" : ""),
        el("div", { class: "turn-prompt" }, el("span", { class: "k" }, "prompt"), " ", str(r.prompt)),
        resultSummary(r, "turn-result"),
        r.audit_dir ? el("div", { class: "audit" }, kv("audit", r.audit_dir)) : null,
        events);
    } catch (e) {
      showError("turn " + n + ": " + e.message);
    }
  }

  // ---- sessions ---------------------------------------------------------

  async function loadSessions() {
    const id = state.selected;
    if (!id) return;
    let data;
    try {
      data = await api("GET", agentPath(id) + "/sessions");
    } catch (e) {
      if (state.selected === id) $("#sessions").replaceChildren(el("p", { class: "empty" }, "sessions: " + e.message));
      return;
    }
    if (state.selected !== id) return;
    const current = str(data && data.current);
    const list = data && Array.isArray(data.sessions) ? data.sessions : [];
    const box = $("#sessions");
    if (list.length === 0) {
      box.replaceChildren(el("p", { class: "empty" }, "no sessions yet"));
      return;
    }
    box.replaceChildren(...list.map((s) => {
      const sid = str(s.id);
      const row = el("div", { class: "session" + (sid === current ? " current" : ""), "data-id": sid, role: "button", tabindex: "0" },
        el("div", { class: "session-head" }, el("span", { class: "session-id" }, sid), sid === current ? el("span", { class: "flag" }, "current") : null),
        s.title ? el("div", { class: "session-title" }, str(s.title)) : null,
        el("div", { class: "session-meta" }, kv("updated", when(s.updated))));
      const open = () => showSession(id, sid);
      row.addEventListener("click", open);
      row.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
      return row;
    }));
  }

  async function showSession(id, sid) {
    const box = $("#session-events");
    try {
      const data = await api("GET", agentPath(id) + "/sessions/" + enc(sid) + "/events");
      if (state.selected !== id) return;
      const events = el("div", { class: "events" });
      renderEvents(events, data && data.events);
      box.replaceChildren(el("h3", null, "Session ", el("span", { class: "session-id" }, sid)), events);
      box.setAttribute("data-id", sid);
    } catch (e) {
      showError("session " + sid + ": " + e.message);
    }
  }

  // ---- the turn form ----------------------------------------------------

  async function sendTurn(e) {
    e.preventDefault();
    const id = state.selected;
    const promptBox = $("#turn-prompt");
    const prompt = promptBox.value.trim();
    if (!id || !prompt) return;
    const body = { prompt };
    const timeout = Number($("#turn-timeout").value);
    if (timeout > 0) body.timeout = timeout;
    const send = $("#turn-send");
    const status = $("#turn-status");
    send.disabled = true;
    status.className = "running";
    status.textContent = "running on " + id + "…";
    try {
      const r = await api("POST", agentPath(id) + "/turns", body);
      promptBox.value = "";
      status.className = "ok";
      status.textContent = "turn " + str(r && r.turn) + " done: " + clip(r && r.reply).slice(0, 200);
    } catch (err) {
      status.className = "bad";
      const t = err.data && err.data.turn;
      status.textContent = (err.kind ? err.kind + ": " : "") + err.message + (t && typeof t.turn === "number" ? " (turn " + t.turn + ")" : "");
    } finally {
      send.disabled = false;
      if (state.selected === id) {
        loadTurns();
        loadSessions();
      }
    }
  }

  // ---- start ------------------------------------------------------------

  function start() {
    $("#turn-form").addEventListener("submit", sendTurn);
    $("#turn-prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("#turn-form").requestSubmit();
    });
    const m = /^#agent=(.+)$/.exec(location.hash);
    refresh().then(() => {
      if (m && !state.selected) {
        try {
          selectAgent(decodeURIComponent(m[1]));
        } catch (e) { /* a bad hash */ }
      }
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
