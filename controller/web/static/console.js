// OpenGate console: fetches JSON from /console/data and draws tables and SVG charts.
// No framework, no build step; every page is a small HTML shell (controller/web/pages/).
"use strict";

const DATA = "/console/data";
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#0b5cad", "#c2410c", "#1b7a3a", "#7c3aed", "#b3261e", "#0e7490", "#a16207", "#be185d"];

// -- helpers ------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function td(value, cls) {
  return el("td", { class: cls }, value === null || value === undefined ? "–" : String(value));
}

function notice(message) {
  const box = document.getElementById("notice");
  box.textContent = message;
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => { box.textContent = ""; }, 6000);
}

class HttpError extends Error {
  constructor(status, body) {
    super(body && body.detail ? String(body.detail) : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

async function api(path, options) {
  const init = { credentials: "same-origin", headers: {} , ...(options || {}) };
  if (init.method && init.method !== "GET") init.headers["X-OpenGate-Console"] = "1";
  if (init.json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(init.json);
    delete init.json;
  }
  const response = await fetch(DATA + path, init);
  if (response.status === 401) {
    location.assign(`/console/login?next=${encodeURIComponent(location.pathname + location.search)}`);
    throw new HttpError(401, { detail: "logged out" });
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new HttpError(response.status, body);
  return body;
}

// An address and port: `10.0.1.10:5000`, `[2001:db8:1::10]:5000`.
function endpoint(address, port) {
  return address.includes(":") ? `[${address}]:${port}` : `${address}:${port}`;
}

function number(value, digits) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en", { maximumFractionDigits: digits === undefined ? 1 : digits });
}

function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${i ? v.toFixed(1) : v} ${units[i]}`;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

function params() {
  return new URLSearchParams(location.search);
}

function keepParams(values) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) if (value !== "" && value !== null) query.set(key, value);
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

// -- charts -------------------------------------------------------------------------------------

// series: [{name, points: [[t, value], ...]}]; the x axis spans [t0, t1] (seconds).
function drawChart(svg, series, t0, t1, unit) {
  const width = svg.clientWidth || 400, height = svg.clientHeight || 150;
  const left = 42, right = 6, top = 8, bottom = 18;
  const max = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const x = (t) => left + ((t - t0) / Math.max(1, t1 - t0)) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  for (const fraction of [0, 0.5, 1]) {
    const value = max * fraction;
    svg.append(svgEl("line", { class: "grid", x1: left, x2: width - right, y1: y(value), y2: y(value) }));
    const label = svgEl("text", { x: left - 4, y: y(value) + 3, "text-anchor": "end" });
    label.textContent = number(value, max < 10 ? 1 : 0);
    svg.append(label);
  }
  const span = svgEl("text", { x: width - right, y: height - 4, "text-anchor": "end" });
  span.textContent = `${Math.round((t1 - t0) / 60)} min${unit ? " · " + unit : ""}`;
  svg.append(span);
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const line = svgEl("polyline", {
      stroke: COLOURS[i % COLOURS.length],
      points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
    });
    const title = svgEl("title", {});
    title.textContent = `${s.name}: ${number(s.points[s.points.length - 1][1])} now`;
    line.append(title);
    svg.append(line);
  });
  let legend = svg.nextElementSibling;
  if (!legend || !legend.classList.contains("legend")) {
    legend = el("div", { class: "legend" });
    svg.after(legend);
  }
  legend.replaceChildren(...(series.length > 1 || (series[0] && series[0].name !== "")
    ? series.map((s, i) => {
      const key = el("i", {});
      key.style.background = COLOURS[i % COLOURS.length];
      return el("span", {}, key, s.name);
    })
    : []));
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function seriesOf(samples, pick) {
  return samples.map((s) => [s.t, pick(s) || 0]);
}

function spmSeries(samples, field) {
  const names = [...new Set(samples.flatMap((s) => Object.keys(s.spms || {})))].sort();
  return names.map((name) => ({
    name,
    points: samples.filter((s) => s.spms && s.spms[name]).map((s) => [s.t, s.spms[name][field]]),
  }));
}

// -- overview -----------------------------------------------------------------------------------

function spmRow(spm, withActions) {
  const status = spm.drained ? "drained" : spm.status;
  const report = spm.report || {};
  const row = el("tr", { "data-spm": spm.name },
    el("th", { scope: "row" }, spm.name),
    withActions ? td(spm.port) : null,
    el("td", { class: `status-${status}` }, status),
    td(`${spm.weight} / ${spm.max_weight}`, "num"),
    td(number(spm.load * 100, 0) + " %", "num"),
    td(number(report.cpu), "num"),
    td(number(report.queue_depth, 0), "num"),
    td(number(report.queue_dropped, 0), "num"),
    withActions ? td(number(report.flows, 0), "num") : null);
  if (withActions) {
    const action = spm.drained ? "restore" : "drain";
    row.append(el("td", {}, el("button", {
      type: "button",
      class: spm.drained ? null : "danger",
      "aria-label": `${spm.drained ? "Restore" : "Drain"} ${spm.name}`,
      onclick: async (event) => {
        event.target.disabled = true;
        try {
          const result = await api(`/spms/${encodeURIComponent(spm.name)}/${action}`, { method: "POST" });
          notice(`${spm.name}: ${result.drained ? "drained" : "restored"}, weight ${result.weight}`);
        } catch (error) {
          notice(`${spm.name}: ${error.message}`);
        }
        await spmsPage.refresh();
      },
    }, spm.drained ? "Restore" : "Drain")));
  }
  return row;
}

const overviewPage = {
  async start() {
    this.minutes = document.getElementById("minutes");
    this.minutes.addEventListener("change", () => this.refresh());
    await this.refresh();
    setInterval(() => { if (!document.hidden) this.refresh(); }, 1000);
  },
  async refresh() {
    if (this.busy) return;
    this.busy = true;
    try {
      this.render(await api(`/overview?minutes=${this.minutes.value}`));
    } catch (error) {
      document.getElementById("updated").textContent = `not updated: ${error.message}`;
    } finally {
      this.busy = false;
    }
  },
  render(data) {
    const samples = data.samples;
    const last = samples[samples.length - 1] || {};
    const drops = Object.values(last.drops_per_s || {}).reduce((a, b) => a + b, 0);
    document.getElementById("kpi-sessions").textContent = number(data.sessions.active, 0);
    document.getElementById("kpi-new").textContent = number(last.new_per_s);
    document.getElementById("kpi-rx").textContent = number(last.rx_per_s, 0);
    document.getElementById("kpi-drops").textContent = number(drops);
    document.getElementById("kpi-alerts").textContent = number(last.alerts_per_min, 0);
    document.getElementById("kpi-policy").textContent = `v${data.policy.version ?? "?"} ${data.policy.name}`;
    document.getElementById("updated").textContent = `updated ${new Date(data.now * 1000).toLocaleTimeString()}`;
    const t1 = data.now, t0 = t1 - Number(this.minutes.value) * 60;
    const one = (name, pick) => [{ name: "", points: seriesOf(samples, pick) }];
    drawChart(document.getElementById("chart-sessions"), one("sessions", (s) => s.sessions), t0, t1);
    drawChart(document.getElementById("chart-new"), one("new", (s) => s.new_per_s), t0, t1, "/s");
    drawChart(document.getElementById("chart-rx"), one("rx", (s) => s.rx_per_s), t0, t1, "/s");
    const reasons = [...new Set(samples.flatMap((s) => Object.entries(s.drops_per_s || {})
      .filter(([, v]) => v > 0).map(([k]) => k)))].sort();
    drawChart(document.getElementById("chart-drops"),
      reasons.length ? reasons.map((r) => ({ name: r, points: seriesOf(samples, (s) => (s.drops_per_s || {})[r]) }))
        : [{ name: "no drops", points: seriesOf(samples, () => 0) }], t0, t1, "/s");
    drawChart(document.getElementById("chart-alerts"), one("alerts", (s) => s.alerts_per_min), t0, t1);
    drawChart(document.getElementById("chart-load"), spmSeries(samples, "load"), t0, t1);
    const npms = document.getElementById("npms");
    npms.replaceChildren(...data.npms.map((npm) => el("div", { class: "card" },
      el("h3", {}, `${npm.name} `, el("span", { class: "hint" }, `${npm.address} · ${npm.role} · ${number(npm.sessions, 0)} sessions`)),
      el("table", {},
        el("thead", {}, el("tr", {}, ...["Port", "Name", "Role", "Packets in", "Packets out"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, ...npm.ports.map((p) => el("tr", {},
          td(p.port), td(p.name), td(p.role), td(number(p.rx, 0), "num"), td(number(p.tx, 0), "num"))))))));
    document.querySelector("#spm-table tbody").replaceChildren(...data.spms.map((s) => spmRow(s, false)));
  },
};

// -- sessions -----------------------------------------------------------------------------------

const sessionsPage = {
  async start() {
    const query = params();
    this.state = {
      q: query.get("q") || "",
      sort: query.get("sort") || "id",
      order: query.get("order") || "asc",
      page: Number(query.get("page") || 1),
      size: Number(query.get("size") || 50),
    };
    this.form = document.getElementById("session-search");
    this.form.q.value = this.state.q;
    this.form.size.value = String(this.state.size);
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      Object.assign(this.state, { q: this.form.q.value.trim(), size: Number(this.form.size.value), page: 1 });
      this.refresh();
    });
    for (const th of document.querySelectorAll("#sessions th[data-sort]")) {
      th.querySelector("button").addEventListener("click", () => {
        const key = th.dataset.sort;
        this.state.order = this.state.sort === key && this.state.order === "asc" ? "desc" : "asc";
        this.state.sort = key;
        this.state.page = 1;
        this.refresh();
      });
    }
    document.getElementById("prev").addEventListener("click", () => { this.state.page -= 1; this.refresh(); });
    document.getElementById("next").addEventListener("click", () => { this.state.page += 1; this.refresh(); });
    await this.refresh();
  },
  async refresh() {
    const s = this.state;
    keepParams(s);
    const query = new URLSearchParams({ q: s.q, sort: s.sort, order: s.order, page: s.page, size: s.size });
    let data;
    try {
      data = await api(`/sessions?${query}`);
    } catch (error) {
      document.getElementById("session-count").textContent = error.message;
      return;
    }
    for (const th of document.querySelectorAll("#sessions th[data-sort]")) {
      if (th.dataset.sort === s.sort) th.setAttribute("aria-sort", s.order === "asc" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
    const pages = Math.max(1, Math.ceil(data.total / s.size));
    document.getElementById("session-count").textContent =
      `${number(data.total, 0)} session${data.total === 1 ? "" : "s"}${s.q ? ` matching “${s.q}”` : ""}`;
    document.getElementById("page-info").textContent = `page ${s.page} of ${pages}`;
    document.getElementById("prev").disabled = s.page <= 1;
    document.getElementById("next").disabled = s.page >= pages;
    document.querySelector("#sessions tbody").replaceChildren(...data.sessions.map((row) => this.row(row)));
  },
  row(row) {
    const nat = row.nat_addr ? `${row.nat === "REWRITE_SRC" ? "src" : "dst"} → ${row.nat_addr}:${row.nat_port}` : "–";
    const blocked = row.state === "blocked";
    return el("tr", { "data-id": row.id },
      td(row.id, "num"), td(row.npm), td(row.proto),
      td(endpoint(row.src, row.sport)), td(endpoint(row.dst, row.dport)), td(nat),
      td(row.class ? `${row.class} (${row.class_id})` : row.class_id), td(row.spm),
      td(bytes(row.bytes), "num"), td(age(row.age_seconds), "num"),
      el("td", { class: `state-${row.state}` }, row.state),
      el("td", {}, el("button", {
        type: "button", class: "danger", disabled: blocked,
        "aria-label": `Block session ${row.id}`,
        onclick: async (event) => {
          event.target.disabled = true;
          try {
            await api(`/sessions/${row.id}/block`, { method: "POST" });
            notice(`session ${row.id} blocked`);
          } catch (error) {
            notice(`session ${row.id}: ${error.message}`);
          }
          await this.refresh();
        },
      }, "Block")));
  },
};

// -- alerts -------------------------------------------------------------------------------------

const alertsPage = {
  async start() {
    const query = params();
    this.form = document.getElementById("alert-filter");
    this.state = { sid: query.get("sid") || "", classtype: query.get("classtype") || "", host: query.get("host") || "", page: 1 };
    this.form.sid.value = this.state.sid;
    this.form.host.value = this.state.host;
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.state = { sid: this.form.sid.value.trim(), classtype: this.form.classtype.value, host: this.form.host.value.trim(), page: 1 };
      this.refresh();
    });
    document.getElementById("prev").addEventListener("click", () => { this.state.page -= 1; this.refresh(); });
    document.getElementById("next").addEventListener("click", () => { this.state.page += 1; this.refresh(); });
    await this.refresh();
    setInterval(() => { if (!document.hidden && this.state.page === 1) this.refresh(); }, 3000);
  },
  async refresh() {
    const s = this.state;
    keepParams({ sid: s.sid, classtype: s.classtype, host: s.host });
    const query = new URLSearchParams({ page: s.page, size: 50 });
    for (const key of ["sid", "classtype", "host"]) if (s[key]) query.set(key, s[key]);
    let data;
    try {
      data = await api(`/alerts?${query}`);
    } catch (error) {
      document.getElementById("alert-count").textContent = error.message;
      return;
    }
    const select = this.form.classtype;
    const chosen = s.classtype;
    select.replaceChildren(el("option", { value: "" }, "any"),
      ...data.classtypes.map((c) => el("option", { value: c, selected: c === chosen }, c)));
    const pages = Math.max(1, Math.ceil(data.total / data.size));
    document.getElementById("alert-count").textContent = `${number(data.total, 0)} alert${data.total === 1 ? "" : "s"}`;
    document.getElementById("page-info").textContent = `page ${s.page} of ${pages}`;
    document.getElementById("prev").disabled = s.page <= 1;
    document.getElementById("next").disabled = s.page >= pages;
    document.querySelector("#alerts tbody").replaceChildren(...data.alerts.map((a) => this.row(a)));
  },
  row(alert) {
    const flow = alert.src ? `${alert.proto || ""} ${alert.src}:${alert.sport ?? 0} → ${alert.dst}:${alert.dport ?? 0}` : null;
    const search = alert.session_id ? `id:${alert.session_id}` : `${alert.src}:${alert.sport ?? 0} ${alert.dst}:${alert.dport ?? 0}`;
    return el("tr", { "data-sid": alert.sid },
      td(when(alert.received_at)), td(alert.spm),
      el("td", {}, alert.sid === null ? "–" : el("a", {
        href: `#rule-${alert.sid}`, "aria-label": `Rule ${alert.sid}`,
        onclick: (event) => { event.preventDefault(); this.showRule(alert.sid); },
      }, String(alert.sid))),
      td(alert.msg, "msg"), td(alert.classtype), td(alert.action),
      el("td", {}, flow ? el("a", { href: `/console/sessions?q=${encodeURIComponent(search)}` }, flow) : "–"));
  },
  async showRule(sid) {
    const box = document.getElementById("rule");
    box.hidden = false;
    document.getElementById("rule-title").textContent = `Rule ${sid}`;
    try {
      const rule = await api(`/rules/${sid}`);
      document.getElementById("rule-where").textContent = `${rule.path}:${rule.line}`;
      document.getElementById("rule-text").textContent = rule.text;
    } catch (error) {
      document.getElementById("rule-where").textContent = "";
      document.getElementById("rule-text").textContent = error.message;
    }
    box.focus();
  },
};

// -- policy -------------------------------------------------------------------------------------

const policyPage = {
  async start() {
    this.text = document.getElementById("policy-text");
    this.gutter = document.getElementById("gutter");
    this.fileName = "";
    this.text.addEventListener("input", () => this.numberLines());
    this.text.addEventListener("scroll", () => { this.gutter.scrollTop = this.text.scrollTop; });
    document.getElementById("upload").addEventListener("change", (event) => this.upload(event.target.files[0]));
    document.getElementById("reset").addEventListener("click", () => this.load());
    for (const action of ["validate", "diff", "apply"]) {
      document.getElementById(action).addEventListener("click", () => this.check(action));
    }
    await this.load();
    await this.hsm();
  },
  async load() {
    const data = await api("/policy");
    this.running = data;
    this.setText(data.text, "");
    document.getElementById("running").textContent =
      `Running: version ${data.version ?? "?"}, ${data.name}, from ${data.path}; ` +
      `${data.summary.acl_rules} ACL rules, ${data.summary.ids_rules} IDS header rules, ${data.summary.spms} SPMs`;
    document.querySelector("#versions tbody").replaceChildren(...data.versions.map((v) => el("tr", {},
      td(v.version, "num"),
      el("td", { class: v.status === "failed" ? "error" : null, title: v.error || null }, v.status),
      td(v.source), td(when(v.created_at)),
      el("td", {}, el("button", {
        type: "button", "aria-label": `Open version ${v.version} in the editor`,
        onclick: async () => {
          const stored = await api(`/policy/versions/${v.version}`);
          this.setText(stored.text, `version ${stored.version}`);
        },
      }, "Open")))));
  },
  setText(text, name) {
    this.text.value = text;
    this.fileName = name;
    document.getElementById("file-name").textContent = name ? `editing ${name}` : "editing the running policy";
    document.getElementById("result").replaceChildren();
    this.numberLines();
  },
  numberLines(bad) {
    const count = this.text.value.split("\n").length;
    const lines = [];
    for (let i = 1; i <= count; i += 1) lines.push(i === bad ? el("b", {}, String(i)) : `${i}\n`);
    this.gutter.replaceChildren(...lines);
  },
  upload(file) {
    if (!file) return;
    const reader = new FileReader();
    reader.onload = () => this.setText(String(reader.result), file.name);
    reader.readAsText(file);
  },
  async check(action) {
    const result = document.getElementById("result");
    result.replaceChildren(el("p", { class: "hint" }, `${action}…`));
    // errors name this file; the files it names are read beside the running policy
    const uploaded = this.fileName && !this.fileName.startsWith("version ");
    this.sentName = uploaded ? this.fileName : this.running.path.split("/").pop();
    try {
      const data = await api(`/policy/${action}`, { method: "POST", json: { text: this.text.value, name: this.sentName } });
      this.numberLines();
      if (action === "validate") {
        result.replaceChildren(el("p", { class: "status-up" }, "Valid. ", el("span", { class: "hint" },
          `${data.summary.acl_rules} ACL rules, ${data.summary.ids_rules} IDS header rules`)));
      } else if (action === "diff") {
        result.replaceChildren(this.diffView(data));
      } else {
        const held = Object.entries(data.rematched || {}).filter(([, n]) => n).map(([outcome, n]) => `${n} ${outcome.replaceAll("_", " ")}`);
        const sessions = held.length ? ` Open sessions held to it: ${held.join(", ")}.` : "";
        result.replaceChildren(el("p", { class: "status-up", role: "alert" }, `Applied: version ${data.version}.${sessions}`));
        const message = result.firstChild;
        await this.load();
        result.replaceChildren(message);
        await this.hsm();
      }
    } catch (error) {
      this.showError(error);
    }
  },
  diffView(data) {
    const pre = el("pre", { class: "diff" });
    const text = data.text_diff || "";
    for (const line of text.split("\n")) {
      const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : null;
      pre.append(el("span", { class: cls }, line + "\n"));
    }
    const writes = Object.entries(data.npms || {}).map(([npm, s]) => el("li", {}, `${npm}: ${JSON.stringify(s)}`));
    return el("div", {},
      el("p", {}, data.changed ? "Changes against the running policy:" : "No change against the running policy."),
      text ? pre : null,
      writes.length ? el("details", {}, el("summary", {}, "What the NPMs would be written"), el("ul", {}, ...writes)) : null);
  },
  showError(error) {
    const body = error.body || {};
    const where = body.path ? `${body.path}${body.line ? ":" + body.line : ""}` : "";
    const inEditor = body.line && body.path && body.path.split("/").pop() === this.sentName;
    let text = String(body.detail || error.message);
    if (where && text.startsWith(`${where}: `)) text = text.slice(where.length + 2);
    const item = el("li", {});
    if (inEditor) {
      item.append(el("button", { type: "button", onclick: () => this.goTo(body.line) }, `${this.sentName}:${body.line}`), ": ");
      this.numberLines(body.line);
    } else if (where) {
      item.append(el("code", {}, where), ": ");
    }
    item.append(text);
    document.getElementById("result").replaceChildren(el("div", { role: "alert", class: "error" },
      el("p", {}, `Refused (HTTP ${error.status}):`), el("ul", { class: "errors" }, item)));
  },
  goTo(line) {
    const lines = this.text.value.split("\n");
    const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
    this.text.focus();
    this.text.setSelectionRange(start, start + (lines[line - 1] || "").length);
    const height = this.text.scrollHeight / Math.max(1, lines.length);
    this.text.scrollTop = Math.max(0, (line - 5) * height);
  },
  async hsm() {
    const data = await api("/hsm");
    const box = document.getElementById("hsm");
    box.replaceChildren(...Object.entries(data).map(([npm, h]) => {
      const stats = h.stats || {};
      const rows = [
        ["Active bank", h.active_bank],
        ["Entries per bank", Object.entries(h.entries || {}).map(([b, n]) => `${b}: ${n}`).join(", ")],
        ["Lookups per packet", h.lookups_per_packet],
        ["Memory accesses per packet", h.memory_accesses_per_packet],
        ...Object.entries(stats).filter(([, v]) => typeof v !== "object").map(([k, v]) => [k.replaceAll("_", " "), v]),
      ];
      const fill = Object.entries(h.fill || {}).map(([t, f]) => el("tr", {}, td(t), td(`${(f * 100).toFixed(1)} %`, "num")));
      return el("div", { class: "card" }, el("h3", {}, npm),
        el("table", {}, el("tbody", {}, ...rows.map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), td(v, "num"))))),
        fill.length ? el("details", {}, el("summary", {}, "Table fill (active bank)"), el("table", {}, el("tbody", {}, ...fill))) : null);
    }));
  },
};

// -- SPMs ---------------------------------------------------------------------------------------

const spmsPage = {
  async start() {
    await this.refresh();
    setInterval(() => { if (!document.hidden) this.refresh(); }, 2000);
  },
  async refresh() {
    let data;
    try {
      data = await api("/spms");
    } catch (error) {
      notice(error.message);
      return;
    }
    const body = document.querySelector("#spm-table tbody");
    const focused = document.activeElement && document.activeElement.closest("tr[data-spm]");
    const focusName = focused ? focused.dataset.spm : null;
    body.replaceChildren(...data.spms.map((s) => spmRow(s, true)));
    if (focusName) {
      const again = body.querySelector(`tr[data-spm="${CSS.escape(focusName)}"] button`);
      if (again) again.focus();
    }
    const samples = data.history;
    const t1 = samples.length ? samples[samples.length - 1].t : Date.now() / 1000;
    drawChart(document.getElementById("chart-load"), spmSeries(samples, "load"), t1 - 900, t1);
    drawChart(document.getElementById("chart-weight"), spmSeries(samples, "weight"), t1 - 900, t1);
  },
};

// -- start --------------------------------------------------------------------------------------

const PAGES = { overview: overviewPage, sessions: sessionsPage, alerts: alertsPage, policy: policyPage, spms: spmsPage };

document.addEventListener("DOMContentLoaded", () => {
  const page = PAGES[document.body.dataset.page];
  if (page) page.start().catch((error) => notice(error.message));
});
