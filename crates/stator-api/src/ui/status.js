// Stator's status page. Polls the admin API's JSON endpoints and renders them; rates and the
// small graphs are computed here from successive answers. No framework, no build step.
//
// Authentication: with api.token set, every JSON request needs `Authorization: Bearer`. The
// token comes from the URL fragment (#token=..., never sent to a server) or from the form the
// page shows on a 401, and is kept in sessionStorage (this tab only). No cookie is used.
"use strict";

(() => {
  const params = new URLSearchParams(location.search);
  const INTERVAL_MS = Math.min(60000, Math.max(500, 1000 * (parseFloat(params.get("interval")) || 2)));
  const HISTORY = 90; // samples kept per graph (3 minutes at the default interval)
  const EVENTS_SHOWN = 50;
  const TOKEN_KEY = "stator-token";

  const $ = (id) => document.getElementById(id);
  const state = {
    polls: 0,
    lastOk: 0,
    series: new Map(), // key -> {t, packets, bytes, pps, bps, history: []}
    events: [],
    lastEvent: 0,
    listeners: true, // false once /v1/listeners answered 404
    timer: null,
  };

  // ---- token ----
  (function tokenFromFragment() {
    const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
  })();

  async function api(path, { optional = false } = {}) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
    if (r.status === 401) throw Object.assign(new Error("unauthorized"), { auth: true });
    if (optional && r.status === 404) return null;
    if (!r.ok) {
      let reason = r.statusText;
      try { reason = (await r.json()).error || reason; } catch (_) { /* not JSON */ }
      throw new Error(`${path}: ${r.status} ${reason}`);
    }
    return r.json();
  }

  // ---- DOM helpers (text only: names come from the configuration, never as HTML) ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.setAttribute(k, String(v));
      else if (k === "title") e.title = String(v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const td = (content, cls, attrs) => el("td", Object.assign({ class: cls }, attrs || {}), content);
  const badge = (text, cls, title) => el("span", { class: "badge " + cls, title }, text);
  const setText = (id, text) => { $(id).textContent = text; };

  function fmtRate(v, unit) {
    if (v === undefined || v === null || !isFinite(v)) return "–";
    const steps = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
    for (const [n, p] of steps) if (Math.abs(v) >= n) return (v / n).toFixed(v / n >= 100 ? 0 : 1) + " " + p + unit;
    return (v >= 10 || v === 0 ? v.toFixed(0) : v.toFixed(1)) + (unit ? " " + unit : "");
  }
  const fmtInt = (n) => (n === undefined || n === null ? "–" : Number(n).toLocaleString("en"));
  function fmtAgo(unixSeconds) {
    if (!unixSeconds) return "never";
    const s = Math.max(0, Date.now() / 1000 - unixSeconds);
    if (s < 90) return s.toFixed(0) + " s ago";
    if (s < 5400) return (s / 60).toFixed(0) + " min ago";
    if (s < 172800) return (s / 3600).toFixed(1) + " h ago";
    return (s / 86400).toFixed(1) + " days ago";
  }
  const fmtTime = (unixSeconds) => new Date(unixSeconds * 1000).toLocaleTimeString([], { hour12: false });

  // ---- rates and graphs ----
  // Feeds a counter pair; returns {pps, bps} (undefined on the first sample or after a reset).
  function rate(key, now, packets, bytes) {
    let s = state.series.get(key);
    if (!s) {
      s = { history: [] };
      state.series.set(key, s);
    }
    if (s.t !== undefined && now > s.t && packets >= s.packets && bytes >= s.bytes) {
      const dt = (now - s.t) / 1000;
      s.pps = (packets - s.packets) / dt;
      s.bps = (8 * (bytes - s.bytes)) / dt;
      s.history.push(s.pps);
      if (s.history.length > HISTORY) s.history.shift();
    } else if (s.t !== undefined) {
      s.pps = s.bps = undefined; // counter reset (restart, recycled id): start again
    }
    s.t = now; s.packets = packets; s.bytes = bytes; s.seen = state.polls;
    return s;
  }

  function spark(svg, history) {
    const NS = "http://www.w3.org/2000/svg";
    svg = svg || document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 120 24");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.classList.add("spark");
    svg.replaceChildren();
    if (history.length >= 2) {
      // The newest sample at the right edge; until the window is full, the samples there
      // are spread over the whole width.
      const max = Math.max(...history, 1e-9);
      const step = 120 / (history.length - 1);
      const x0 = 0;
      const pts = history.map((v, i) => `${(x0 + i * step).toFixed(1)},${(23 - (22 * v) / max).toFixed(1)}`);
      const area = document.createElementNS(NS, "polygon");
      area.setAttribute("points", `${x0.toFixed(1)},24 ${pts.join(" ")} 120,24`);
      const line = document.createElementNS(NS, "polyline");
      line.setAttribute("points", pts.join(" "));
      svg.append(area, line);
      svg.setAttribute("aria-label", `peak ${fmtRate(max, "")} per second`);
    }
    return svg;
  }

  // ---- rendering ----
  function renderStatus(st, dp, now) {
    document.title = `Stator ${st.node}: ${st.phase}`;
    setText("node", st.node);
    const phase = $("phase");
    phase.textContent = st.phase;
    phase.className = "badge " + (st.phase === "running" ? "ok" : st.phase === "starting" ? "warn" : "bad");
    setText("version", "v" + st.version + (st.commit && st.commit !== "unknown" ? " · " + st.commit : ""));

    const f = st.forwarder;
    const ph = $("plane-health");
    ph.replaceChildren(`${f.kind} `, badge(f.healthy ? "healthy" : "unhealthy", f.healthy ? "ok" : "bad", f.reason || ""));
    setText("plane-detail", [
      f.interfaces && f.interfaces.length ? "on " + f.interfaces.join(", ") : "not attached",
      f.healthy ? "since " + fmtAgo(f.since) : (f.reason || ""),
    ].filter(Boolean).join(" · "));
    if (dp) {
      const c = dp.counters;
      const fwd = rate("plane:fwd", now, (c.act_tx || 0) + (c.act_redirect || 0), 0);
      const dropped = rate("plane:drop", now, c.act_drop || 0, 0);
      setText("plane-pps", fmtRate(fwd.pps, ""));
      setText("plane-drops", fmtRate(dropped.pps, ""));
      spark($("plane-graph"), fwd.history);
    }

    setText("config-generation", "generation " + st.config.generation);
    setText("config-detail", `from ${st.config.source} · applied ${fmtAgo(st.config.applied_at)} · snapshot ${st.snapshot.generation}`);
    setText("config-reloads", `${fmtInt(st.config.reloads_ok)} reloads applied, ${fmtInt(st.config.reloads_failed)} refused`);

    const h = st.health;
    $("health-summary").replaceChildren(
      badge(`${h.up} up`, h.up ? "ok" : "idle"), " ",
      badge(`${h.down} down`, h.down ? "bad" : "idle"), " ",
      badge(`${h.unknown} unknown`, h.unknown ? "warn" : "idle"));
    setText("health-detail", `${h.checks} deduplicated checks`);

    const b = st.bgp;
    if (!b.enabled) {
      $("bgp-summary").replaceChildren(badge("off", "idle"));
      setText("bgp-detail", "no [bgp] in the configuration");
    } else if (!b.running) {
      $("bgp-summary").replaceChildren(badge("not running", "bad"));
      setText("bgp-detail", "");
    } else {
      const est = (b.sessions || []).filter((s) => s.established).length;
      $("bgp-summary").replaceChildren(
        badge(b.bird_reachable ? "BIRD up" : "BIRD unreachable", b.bird_reachable ? "ok" : "bad", b.last_error || ""), " ",
        badge(`${est}/${(b.sessions || []).length} sessions`, est === (b.sessions || []).length && est > 0 ? "ok" : "warn"));
      setText("bgp-detail", `${(b.announced || []).length} VIP routes announced` + (b.bird_version ? ` · BIRD ${b.bird_version}` : ""));
    }
    const sessions = (b.sessions || []).map((s) => el("tr", { "data-session": s.name },
      td(s.name), td(s.neighbor), td(badge(s.state, s.established ? "ok" : "bad")), td(fmtInt(s.exported), "num")));
    if (!sessions.length) sessions.push(el("tr", {}, td(b.enabled ? "no sessions" : "BGP is off", "empty", { colspan: 4 })));
    $("sessions").tBodies[0].replaceChildren(...sessions);
    setText("announced", b.enabled && b.running ? "Announced: " + ((b.announced || []).join(", ") || "nothing") : "");

    const le = $("last-error");
    le.hidden = !st.last_error;
    if (st.last_error) le.textContent = `Last error (${fmtAgo(st.last_error.at_unix_seconds)}): ${st.last_error.message}`;
  }

  function renderVips(vips, now) {
    const rows = vips.vips.map((v) => {
      const r = rate("vip:" + v.name, now, v.traffic.packets, v.traffic.bytes);
      const usable = v.backends.usable;
      const announced = v.announced === null || v.announced === undefined
        ? badge("no BGP", "idle", v.announce ? "would be announced: usable backends, forwarder healthy" : "would be withdrawn")
        : badge(v.announced ? "yes" : "no", v.announced ? "ok" : (v.announce ? "warn" : "bad"),
          v.announce === v.announced ? "" : (v.announce ? "wanted, not yet offered by BIRD" : "withdrawing"));
      const addr = v.address.includes(":") ? `[${v.address}]` : v.address;
      return el("tr", { "data-vip": v.name, "data-usable": usable },
        td(v.name),
        td(`${v.protocol} ${addr}:${v.port === 0 ? "any" : v.port}`),
        td(el("span", { class: usable ? "ok" : "bad" }, `${usable}`, v.backends.draining ? ` (+${v.backends.draining} draining)` : ""), "num"),
        td(announced),
        td(fmtRate(r.pps, ""), "num"),
        td(fmtRate(r.bps, "bit/s"), "num opt"),
        td(spark(null, r.history), "opt"));
    });
    if (!rows.length) rows.push(el("tr", {}, td("no VIPs configured", "empty", { colspan: 7 })));
    $("vips").tBodies[0].replaceChildren(...rows);
  }

  function healthBadge(b) {
    const drain = b.drain && b.drain.state !== "none";
    const cls = b.health === "up" ? (drain ? "warn" : "ok") : b.health === "down" ? "bad" : "warn";
    let text = b.health;
    if (b.drain && b.drain.state === "draining") text += `, draining ${Math.ceil(b.drain.remaining_seconds)} s`;
    if (b.drain && b.drain.state === "drained") text += ", drained";
    const failing = (b.checks || []).filter((c) => c.state !== "up").map((c) => `${c.url}: ${c.last_error || c.state}`);
    return badge(text, cls, failing.join("\n"));
  }

  function renderBackends(bs, now) {
    const rows = [];
    for (const b of bs.backends) {
      const vips = b.vips.length ? b.vips : [null];
      vips.forEach((v, i) => {
        const first = i === 0;
        const r = v ? rate(`real:${v.vip}/${b.id}`, now, v.traffic.packets, v.traffic.bytes) : null;
        const plan = v ? (v.plan.state === "usable" ? "" : ` (${v.plan.state}${v.plan.cause ? ": " + v.plan.cause : ""})`) : "";
        rows.push(el("tr", {
          class: first ? "group-start" : undefined,
          "data-backend": first ? b.id : undefined,
          "data-health": first ? b.health : undefined,
          "data-real": v ? `${v.vip}/${b.id}` : undefined,
        },
        td(first ? el("span", { title: b.address + (b.port ? ":" + b.port : "") }, b.id) : ""),
        td(first ? healthBadge(b) : ""),
        td(v ? v.vip + plan : "in no VIP"),
        td(v ? fmtInt(v.weight) : "", "num opt"),
        td(v ? (100 * v.table_share).toFixed(1) + " %" : "", "num"),
        td(v ? fmtInt(v.connections) : "", "num"),
        td(r ? fmtRate(r.pps, "") : "", "num"),
        td(r ? fmtRate(r.bps, "bit/s") : "", "num opt"),
        td(r ? spark(null, r.history) : "", "opt")));
      });
      const failing = (b.checks || []).filter((c) => c.state !== "up");
      if (failing.length) {
        rows.push(el("tr", { "data-checks": b.id }, td(""),
          td(failing.map((c) => `${c.url} ${c.state}${c.last_error ? ": " + c.last_error : ""}`).join(" · "), "detail", { colspan: 8 })));
      }
    }
    if (!rows.length) rows.push(el("tr", {}, td("no backends configured", "empty", { colspan: 9 })));
    $("backends").tBodies[0].replaceChildren(...rows);
    const note = $("conntrack-note");
    note.hidden = bs.conntrack.complete;
    note.textContent = `Connections counted over the first ${fmtInt(bs.conntrack.flows_walked)} flows of the connection table only.`;
  }

  function renderDrops(dp, now) {
    const rows = [];
    for (const [reason, total] of Object.entries(dp.drops)) {
      if (reason === "none") continue;
      const r = rate("drop:" + reason, now, total, 0);
      if (!total) continue;
      rows.push(el("tr", { "data-drop": reason }, td(reason), td(fmtInt(total), "num"), td(fmtRate(r.pps, ""), "num")));
    }
    if (!rows.length) rows.push(el("tr", {}, td("no packet dropped since the data plane was loaded", "empty", { colspan: 3 })));
    $("drops").tBodies[0].replaceChildren(...rows);
  }

  // The proxy tier's listeners (GET /v1/listeners), shown when the node has the endpoint:
  // one row per listener, then one per upstream backend with its state and load.
  function renderListeners(ls, now) {
    const list = Array.isArray(ls) ? ls : (ls.listeners || []);
    $("listeners-section").hidden = list.length === 0;
    const num = (...vals) => vals.find((x) => typeof x === "number");
    const rows = [];
    for (const l of list) {
      const conns = num(l.connections && l.connections.total, l.connections) || 0;
      const reqs = num(l.requests && l.requests.total, l.requests) || 0;
      const bytes = l.bytes || {};
      const rc = rate("listener-conn:" + l.name, now, conns, (bytes.in || 0) + (bytes.out || 0));
      const rr = rate("listener-req:" + l.name, now, reqs, 0);
      rows.push(el("tr", { class: "group-start", "data-listener": l.name },
        td(l.name), td(l.address), td(l.protocol + (l.steering === "source" ? " (steered)" : "")),
        td(l.scheduler || ""), td(fmtInt(l.workers), "num"),
        td(fmtInt(num(l.connections && l.connections.active)), "num"),
        td(fmtRate(rc.pps, ""), "num"),
        td(l.protocol === "http" ? fmtRate(rr.pps, "") : "", "num"),
        td(fmtRate(rc.bps, "bit/s"), "num opt")));
      for (const u of l.backends || []) {
        const ur = rate(`upstream:${l.name}/${u.id}`, now, num(u.requests, u.connections) || 0, 0);
        const ok = u.state === "up" || u.state === "usable";
        // passive health: left out of picks after failures, whatever the checks say
        const out = u.passive && u.passive.excluded;
        const state = out ? "failed" : (u.state || "?");
        const title = out ? `left out for ${(u.passive.excluded_for_seconds || 0).toFixed(1)} s after failures (max_fails)` : "";
        rows.push(el("tr", { "data-upstream": `${l.name}/${u.id}`, "data-state": state, title },
          td(""), td(u.id + (u.port ? ` (${u.address}:${u.port})` : "")),
          td(badge(state, ok && !out ? "ok" : "bad")), td("weight " + fmtInt(u.weight)), td(""),
          td(fmtInt(u.active), "num"), td(""), td(fmtRate(ur.pps, ""), "num"), td("", "opt")));
      }
    }
    $("listeners").tBodies[0].replaceChildren(...rows);
  }

  const EVENT_CLASS = {
    start: "ok", reload: "ok", reload_failed: "bad", backend_up: "ok", backend_down: "bad",
    drain: "warn", undrain: "ok", drain_timeout: "warn", forwarder_healthy: "ok",
    forwarder_unhealthy: "bad", announce: "ok", withdraw: "warn", commit_failed: "bad", stopping: "warn",
  };

  function renderEvents(page) {
    if (page.events.length) {
      state.events = state.events.concat(page.events).slice(-EVENTS_SHOWN);
    }
    state.lastEvent = page.last;
    const items = state.events.slice().reverse().map((e) => el("li", { "data-kind": e.kind, "data-seq": e.seq },
      el("time", { datetime: new Date(e.at * 1000).toISOString(), title: new Date(e.at * 1000).toString() }, fmtTime(e.at)),
      badge(e.kind.replace(/_/g, " "), EVENT_CLASS[e.kind] || "idle"),
      el("span", { class: "msg" }, e.message)));
    if (!items.length) items.push(el("li", {}, el("span", { class: "muted" }, "no events yet")));
    $("events").replaceChildren(...items);
  }

  // Series not seen in this poll (a VIP or backend removed by a reload) are forgotten.
  function pruneSeries() {
    for (const [k, s] of state.series) if (s.seen !== state.polls) state.series.delete(k);
  }

  // ---- the poll loop ----
  function showBanner(text) {
    const b = $("banner");
    b.hidden = !text;
    b.textContent = text || "";
  }

  async function poll() {
    clearTimeout(state.timer);
    const now = Date.now();
    try {
      const [st, vips, bs, dp, ev, ls] = await Promise.all([
        api("/v1/status"),
        api("/v1/vips"),
        api("/v1/backends"),
        api("/v1/dataplane"),
        api("/v1/events?since=" + state.lastEvent),
        state.listeners ? api("/v1/listeners", { optional: true }) : Promise.resolve(null),
      ]);
      state.polls += 1;
      renderStatus(st, dp, now);
      renderVips(vips, now);
      renderBackends(bs, now);
      renderDrops(dp, now);
      if (ls === null) {
        state.listeners = false;
        $("listeners-section").hidden = true;
      } else {
        renderListeners(ls, now);
      }
      renderEvents(ev);
      pruneSeries();
      state.lastOk = now;
      $("login").hidden = true;
      $("main").hidden = false;
      showBanner("");
      document.body.dataset.state = "ok";
    } catch (e) {
      if (e.auth) {
        document.body.dataset.state = "auth";
        $("login").hidden = false;
        $("main").hidden = true;
        if (sessionStorage.getItem(TOKEN_KEY)) showBanner("The token was refused.");
        return; // polling resumes when a token is entered
      }
      document.body.dataset.state = "error";
      showBanner(`Cannot reach the node's API: ${e.message}. Retrying every ${INTERVAL_MS / 1000} s; what is shown is from ${state.lastOk ? fmtAgo(state.lastOk / 1000) : "no poll yet"}.`);
    }
    document.body.dataset.polls = String(state.polls);
    state.timer = setTimeout(poll, INTERVAL_MS);
  }

  function tick() {
    setText("updated", state.lastOk ? `updated ${((Date.now() - state.lastOk) / 1000).toFixed(0)} s ago · poll ${state.polls}` : "not polled yet");
  }

  document.addEventListener("DOMContentLoaded", () => {
    setText("interval", String(INTERVAL_MS / 1000));
    $("login").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = $("token").value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      $("token").value = "";
      showBanner("");
      poll();
    });
    setInterval(tick, 1000);
    poll();
  });
})();
