// The logstore console: a hash-routed page whose every number comes from the public /v1 API.
// Views: #/ (overview), #/cluster, #/topics/<t>, #/groups, #/groups/<g>, #/transactions. Each view renders its skeleton once, then
// refresh() fills in data every REFRESH_MS, so forms keep what the user typed.
import uPlot from "./vendor/uPlot.esm.js";

const REFRESH_MS = 2000;
const PAGE_SIZE = 50; // topics per page of the overview's table
const KEY = "logstore.apiKey";
const view = document.getElementById("view");
let timer = null;
let charts = [];

// ---------------------------------------------------------------- API
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

let askingKey = null;

function askKey(message) {
  // one dialog for every call that needs the key; they all retry once it is entered
  if (!askingKey) {
    askingKey = new Promise((resolve) => {
      const dialog = document.getElementById("key-dialog");
      document.getElementById("key-error").textContent = message || "";
      const form = document.getElementById("key-form");
      form.onsubmit = () => {
        sessionStorage.setItem(KEY, document.getElementById("key-input").value.trim());
        askingKey = null;
        showKeyState();
        resolve();
      };
      dialog.showModal();
    });
  }
  return askingKey;
}

async function api(path, { method = "GET", body } = {}) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    const data = text ? JSON.parse(text) : null;
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      await askKey(key ? "That key was not accepted." : "");
      continue;
    }
    if (!r.ok) throw new ApiError(r.status, data);
    return data;
  }
}

function showKeyState() {
  document.getElementById("forget-key").hidden = !sessionStorage.getItem(KEY);
}

document.getElementById("forget-key").onclick = () => {
  sessionStorage.removeItem(KEY);
  showKeyState();
  route();
};

// ---------------------------------------------------------------- formatting
const esc = (s) =>
  String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const fmtInt = (n) => String(n);
const fmtRate = (n) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}
const topicHref = (t) => `#/topics/${encodeURIComponent(t)}`;
const groupHref = (g) => `#/groups/${encodeURIComponent(g)}`;

function errorText(e) {
  if (e instanceof ApiError && e.status === 403) return `Not authorized: ${e.message}`;
  return e.message;
}

// ---------------------------------------------------------------- charts
function chart(el, title, series, points) {
  // points: [{time_ms, ...}]; series: [{label, value: (p) => number, stroke}]
  const data = [points.map((p) => p.time_ms / 1000), ...series.map((s) => points.map(s.value))];
  el.dataset.samples = String(points.length);
  el.dataset.last = points.length ? String(series[0].value(points[points.length - 1])) : "";
  el.dataset.max = String(Math.max(0, ...points.map(series[0].value)));
  let plot = el._plot;
  if (!plot) {
    const width = Math.max(300, el.clientWidth || 800);
    plot = new uPlot(
      {
        title,
        width,
        height: 220,
        scales: { x: { time: true } },
        series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: s.stroke, width: 2, scale: i ? "y2" : "y" }))],
        axes: [{}, { scale: "y" }, ...(series.length > 1 ? [{ scale: "y2", side: 1, grid: { show: false } }] : [])],
      },
      data,
      el,
    );
    el._plot = plot;
    charts.push(plot);
  } else {
    plot.setData(data);
  }
}

// ---------------------------------------------------------------- views
function section(title, inner, id = "") {
  return `<section ${id ? `id="${id}"` : ""}><h2>${esc(title)}</h2>${inner}</section>`;
}

// ---------------------------------------------------------------- cluster metadata
async function metadata(topic) {
  // /v1/metadata needs DESCRIBE on the cluster: without it the pages show no leaders, not an error
  try {
    return await api(topic === undefined ? "/v1/metadata" : `/v1/metadata?topic=${encodeURIComponent(topic)}`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) return null;
    throw e;
  }
}

function leadership(md) {
  // per node: partitions led; the partitions whose leader is none (-1) or not a live node are under-led
  const live = new Map(md.nodes.map((n) => [n.node_id, n]));
  const led = new Map(md.nodes.map((n) => [n.node_id, 0]));
  const under = [];
  let total = 0;
  for (const t of md.topics) {
    for (const p of t.partitions) {
      total++;
      if (live.has(p.leader)) led.set(p.leader, led.get(p.leader) + 1);
      else under.push({ topic: t.name, ...p });
    }
  }
  return { live, led, under, total };
}

const nodeName = (md, id) => {
  const n = md && md.nodes.find((x) => x.node_id === id);
  return n ? `node ${id} (${new URL(n.url).host})` : id === -1 ? "none" : `node ${id} (not live)`;
};

function nodeCards(md) {
  if (!md) return `<p class="muted">Not authorized to describe the cluster.</p>`;
  const { led, under, total } = leadership(md);
  const cards = md.nodes.map((n) => {
    const role = n.node_id === md.controller ? " · controller" : "";
    const count = led.get(n.node_id);
    const leads = count === total && total > 0 ? "leader of every partition" : `leader of ${count} of ${total} partitions`;
    return `<div class="card" data-node="${n.node_id}"><b>node ${n.node_id}</b> <a href="${esc(n.url)}/ui/">${esc(n.url)}</a>
      <div class="muted">${leads}${role}</div></div>`;
  });
  const warn = under.length
    ? `<div class="card under-led"><b>${under.length} under-led</b><div>partitions without a live leader</div></div>`
    : "";
  return `${cards.join("")}${warn}`;
}

async function clusterPage() {
  view.innerHTML = `<h1>Cluster</h1>
    ${section("Nodes", `<p data-testid="controller"></p><div class="cards" data-testid="nodes"></div>`)}
    ${section(
      "Under-led partitions",
      `<table data-testid="under-led"><thead><tr><th>Topic</th><th class="num">Partition</th><th>Leader</th>
        <th class="num">Epoch</th></tr></thead><tbody></tbody></table>`,
    )}
    ${section(
      "Partition leaders",
      `<table data-testid="leaders"><thead><tr><th>Topic</th><th class="num">Partition</th><th>Leader</th>
        <th class="num">Epoch</th></tr></thead><tbody></tbody></table>`,
    )}`;
  async function refresh() {
    const md = await metadata();
    if (!md) throw new ApiError(403, { message: "describing the cluster needs DESCRIBE on the cluster" });
    const { live, under } = leadership(md);
    const controller = md.controller === null ? "none (election under way)" : nodeName(md, md.controller);
    const p = document.querySelector("[data-testid=controller]");
    p.dataset.controller = String(md.controller);
    p.dataset.epoch = String(md.controller_epoch);
    p.innerHTML = `Controller: <b>${esc(controller)}</b>, controller epoch ${md.controller_epoch}`;
    document.querySelector("[data-testid=nodes]").innerHTML = nodeCards(md);
    const row = (t, q) => `<tr data-tp="${esc(t)}-${q.partition}" data-leader="${q.leader}" data-epoch="${q.leader_epoch}"
        ${live.has(q.leader) ? "" : `class="under-led"`}><td><a href="${topicHref(t)}">${esc(t)}</a></td>
        <td class="num">${q.partition}</td><td>${esc(nodeName(md, q.leader))}</td><td class="num">${q.leader_epoch}</td></tr>`;
    document.querySelector("[data-testid=under-led] tbody").innerHTML =
      under.map((q) => row(q.topic, q)).join("") || `<tr><td colspan="4" class="muted">none: every partition has a live leader</td></tr>`;
    document.querySelector("[data-testid=leaders] tbody").innerHTML = md.topics
      .flatMap((t) => t.partitions.map((q) => row(t.name, q)))
      .join("");
  }
  return refresh;
}

async function overview() {
  view.innerHTML = `<h1>Overview</h1>
    ${section("Nodes", `<div class="cards" data-testid="nodes"></div>`)}
    ${section(
      "Throughput",
      `<form class="inline"><label>Topic<select id="chart-topic"></select></label>
        <span id="rate-now" data-testid="rate-now" class="muted"></span></form><div id="chart" class="chart"></div>`,
    )}
    ${section(
      "Topics",
      `<form class="inline" id="topic-filter"><label>Filter<input name="filter" type="search" data-testid="topic-filter"
          placeholder="part of a topic name" autocomplete="off"></label>
        <span class="pager"><button type="button" data-testid="prev-page">‹ Previous</button>
        <span data-testid="page"></span><button type="button" data-testid="next-page">Next ›</button></span></form>
        <table data-testid="topics"><thead><tr><th>Topic</th><th class="num">Partitions</th>
        <th class="num" title="records stored, from the data files' statistics">Records</th>
        <th class="num">Size</th><th class="num">Records/s</th></tr></thead><tbody></tbody></table>`,
    )}
    ${section(
      "Create topic",
      `<form class="inline" id="create-topic"><label>Name<input name="name" required pattern="[A-Za-z0-9._-]+"></label>
        <label>Partitions<input name="partitions" type="number" min="1" value="1" required></label>
        <button type="submit">Create</button><span id="create-result"></span></form>`,
    )}`;
  const select = document.getElementById("chart-topic");
  let page = 0;
  let shown = { topics: [], stats: { topics: [] } }; // the last listing, for filtering and paging without a call
  const filterInput = document.querySelector("[data-testid=topic-filter]");
  filterInput.oninput = () => {
    page = 0;
    renderTopics();
  };
  document.getElementById("topic-filter").onsubmit = (ev) => ev.preventDefault();
  document.querySelector("[data-testid=prev-page]").onclick = () => {
    page = Math.max(0, page - 1);
    renderTopics();
  };
  document.querySelector("[data-testid=next-page]").onclick = () => {
    page += 1;
    renderTopics();
  };

  function renderTopics() {
    // the topics whose name holds the filter text (any case), PAGE_SIZE a page
    const needle = filterInput.value.trim().toLowerCase();
    const matching = shown.topics.filter((t) => t.toLowerCase().includes(needle));
    const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
    page = Math.min(page, pages - 1);
    const latest = new Map(shown.stats.topics.map((s) => [s.topic, s.latest]));
    const rows = matching.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).map((t) => {
      const s = latest.get(t);
      const cells = s
        ? `<td class="num">${s.partitions}</td><td class="num">${fmtInt(s.records)}</td>
           <td class="num" data-bytes="${s.size_bytes}">${fmtBytes(s.size_bytes)}</td>
           <td class="num">${fmtRate(s.records_per_s)}</td>`
        : `<td colspan="4" class="muted">not sampled yet</td>`;
      return `<tr data-topic="${esc(t)}"><td><a href="${topicHref(t)}">${esc(t)}</a></td>${cells}</tr>`;
    });
    document.querySelector("[data-testid=topics] tbody").innerHTML =
      rows.join("") || `<tr><td colspan="5" class="muted">${needle ? "no topic matches" : "no topics yet"}</td></tr>`;
    const label = document.querySelector("[data-testid=page]");
    label.dataset.page = String(page + 1);
    label.dataset.pages = String(pages);
    label.dataset.matching = String(matching.length);
    label.textContent = `page ${page + 1} of ${pages} (${matching.length} of ${shown.topics.length} topics)`;
    document.querySelector("[data-testid=prev-page]").disabled = page === 0;
    document.querySelector("[data-testid=next-page]").disabled = page >= pages - 1;
  }

  document.getElementById("create-topic").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const out = document.getElementById("create-result");
    try {
      const t = await api("/v1/topics", { method: "POST", body: { name: f.get("name"), partitions: +f.get("partitions") } });
      out.innerHTML = `created <a href="${topicHref(t.name)}">${esc(t.name)}</a>`;
      out.className = "";
      await refresh();
    } catch (e) {
      out.textContent = errorText(e);
      out.className = "error";
    }
  };
  select.onchange = () => refreshChart();

  async function refreshChart() {
    const t = select.value;
    const el = document.getElementById("chart");
    if (!t) return;
    try {
      const s = await api(`/v1/stats/topics/${encodeURIComponent(t)}`);
      throughput(el, s);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404)) throw e; // not sampled yet
    }
  }

  async function refresh() {
    const [list, stats, md] = await Promise.all([api("/v1/topics"), api("/v1/stats/topics"), metadata()]);
    document.querySelector("[data-testid=nodes]").innerHTML = nodeCards(md);
    shown = { topics: list.topics, stats };
    renderTopics();
    const chosen = select.value;
    if (select.options.length !== list.topics.length) {
      const busiest = [...stats.topics].sort((a, b) => b.latest.records_per_s - a.latest.records_per_s)[0];
      select.innerHTML = list.topics.map((t) => `<option>${esc(t)}</option>`).join("");
      select.value = chosen || (busiest ? busiest.topic : list.topics[0] || "");
    }
    await refreshChart();
  }
  return refresh;
}

function throughput(el, s) {
  chart(
    el,
    `${s.topic}: last 15 minutes`,
    [
      { label: "records/s", value: (p) => p.records_per_s, stroke: "#2a6fdb" },
      { label: "bytes/s", value: (p) => p.bytes_per_s, stroke: "#d97706" },
    ],
    s.samples,
  );
  const now = document.getElementById("rate-now");
  if (now) {
    now.dataset.recordsPerS = String(s.latest.records_per_s);
    now.textContent = `now: ${fmtRate(s.latest.records_per_s)} records/s, ${fmtBytes(s.latest.bytes_per_s)}/s`;
  }
}

async function topicPage(topic) {
  const enc = encodeURIComponent(topic);
  view.innerHTML = `<h1>Topic <code>${esc(topic)}</code></h1>
    <p class="muted">Topic ID <code data-testid="topic-id"></code></p>
    ${section(
      "Partitions",
      `<table data-testid="partitions"><thead><tr><th class="num">Partition</th><th class="num">Log start offset</th>
        <th class="num">High watermark</th><th class="num" title="records stored, from the data files' statistics;
        fewer than high watermark - log start offset after key compaction">Records</th><th class="num">Size</th>
        <th class="num">Files</th>
        <th>Leader</th><th class="num">Epoch</th></tr></thead><tbody></tbody></table>`,
    )}
    ${section("Throughput", `<span id="rate-now" data-testid="rate-now" class="muted"></span><div id="chart" class="chart"></div>`)}
    ${section(
      "Records",
      `<form class="inline" id="browse"><label>Partition<select name="partition"></select></label>
        <label>Offset<input name="offset" type="number" min="0"></label>
        <label>or from time (UTC)<input name="time" type="datetime-local" step="0.001"></label>
        <label>Count<input name="max" type="number" min="1" max="500" value="20"></label>
        <label>Show as<select name="as"><option value="auto">text / JSON</option><option value="hex">hex</option></select></label>
        <button type="submit">Fetch</button></form>
        <table data-testid="records"><thead><tr><th class="num">Offset</th><th>Timestamp</th><th>Key</th><th>Value</th>
        <th>Headers</th></tr></thead><tbody></tbody></table>`,
    )}
    ${section(
      "Maintenance history",
      `<table data-testid="maintenance"><thead><tr><th>When (UTC)</th><th>Operation</th><th class="num">Files removed</th>
        <th class="num">Files added</th><th class="num">Table version</th></tr></thead><tbody></tbody></table>`,
    )}
    ${section(
      "Configuration",
      `<table data-testid="config"><tbody></tbody></table>
        <form class="inline" id="alter"><label>Key<input name="key" required></label><label>Value<input name="value" required></label>
        <button type="submit">Set</button><span id="alter-result"></span></form>`,
    )}
    ${section(
      "Read it from Spark",
      `<p class="muted" data-testid="table-path"></p><pre data-testid="snippet"></pre>`,
    )}`;
  let info = null;
  document.getElementById("browse").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const body = document.querySelector("[data-testid=records] tbody");
    try {
      let offset = f.get("offset") || 0;
      if (f.get("time")) {
        // the first offset at or after that time (Kafka's ListOffsets), shown in the offset field
        const ms = Date.parse(`${f.get("time")}Z`);
        offset = (await api(`/v1/topics/${enc}/partitions/${f.get("partition")}/offsets?timestamp=${ms}`)).offset;
        ev.target.querySelector("input[name=offset]").value = offset;
        ev.target.querySelector("input[name=time]").value = "";
      }
      const r = await api(
        `/v1/topics/${enc}/partitions/${f.get("partition")}/records?offset=${offset}&max_records=${f.get("max") || 20}`,
      );
      const show = (v) => renderValue(v, f.get("as"));
      body.innerHTML = r.records
        .map(
          (x) => `<tr><td class="num">${x.offset}</td><td>${new Date(x.timestamp).toISOString()}</td>
            <td>${show(x.key)}</td><td>${show(x.value)}</td><td>${esc(JSON.stringify(x.headers))}</td></tr>`,
        )
        .join("") || `<tr><td colspan="5" class="muted">no records at this offset yet</td></tr>`;
    } catch (e) {
      body.innerHTML = `<tr><td colspan="5" class="error">${esc(errorText(e))}</td></tr>`;
    }
  };
  document.getElementById("alter").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const out = document.getElementById("alter-result");
    const raw = f.get("value");
    const value = /^-?\d+$/.test(raw) ? Number(raw) : raw;
    try {
      await api(`/v1/topics/${enc}`, { method: "PATCH", body: { config: { [f.get("key")]: value } } });
      out.textContent = "saved";
      out.className = "";
      await refresh();
    } catch (e) {
      out.textContent = errorText(e);
      out.className = "error";
    }
  };

  async function refresh() {
    const notSampled = (e) => {
      if (e instanceof ApiError && e.status === 404) return null;
      throw e;
    };
    const [described, history, stats, md] = await Promise.all([
      api(`/v1/topics/${enc}`),
      api(`/v1/topics/${enc}/maintenance`),
      api(`/v1/stats/topics/${enc}`).catch(notSampled),
      metadata(topic),
    ]);
    info = described;
    document.querySelector("[data-testid=topic-id]").textContent = info.topic_id || "none (created before topic IDs)";
    const leaders = new Map(((md && md.topics.find((t) => t.name === topic)) || { partitions: [] }).partitions.map((p) => [p.partition, p]));
    const live = new Set(md ? md.nodes.map((n) => n.node_id) : []);
    const leaderCells = (partition) => {
      const l = leaders.get(partition);
      if (!l) return `<td class="muted">${md ? "none" : "not authorized"}</td><td class="num">—</td>`;
      return `<td data-leader="${l.leader}" ${live.has(l.leader) ? "" : `class="under-led"`}>${esc(nodeName(md, l.leader))}</td>
        <td class="num">${l.leader_epoch}</td>`;
    };
    document.querySelector("[data-testid=partitions] tbody").innerHTML = info.partitions
      .map(
        (p) => `<tr data-partition="${p.partition}"><td class="num">${p.partition}</td>
          <td class="num">${p.log_start_offset}</td><td class="num">${p.high_watermark}</td>
          <td class="num" data-records="${p.num_records}">${fmtInt(p.num_records)}</td>
          <td class="num" data-bytes="${p.size_bytes}">${fmtBytes(p.size_bytes)}</td><td class="num">${p.num_files}</td>
          ${leaderCells(p.partition)}</tr>`,
      )
      .join("");
    const root = info.root || "<root>";
    document.querySelector("[data-testid=table-path]").innerHTML =
      `Delta table <code>${esc(root)}/topics/${esc(topic)}/</code> on the node's store.`;
    document.querySelector("[data-testid=snippet]").textContent = sparkSnippet(root, topic);
    document.querySelector("[data-testid=config] tbody").innerHTML = Object.entries(info.config)
      .map(([k, v]) => `<tr><td><code>${esc(k)}</code></td><td>${esc(JSON.stringify(v))}</td></tr>`)
      .join("");
    const sel = document.querySelector("#browse select[name=partition]");
    if (sel.options.length !== info.partitions.length) {
      sel.innerHTML = info.partitions.map((p) => `<option>${p.partition}</option>`).join("");
      const first = info.partitions[0];
      if (first) document.querySelector("#browse input[name=offset]").value = Math.max(first.log_start_offset, first.high_watermark - 20);
    }
    document.querySelector("[data-testid=maintenance] tbody").innerHTML =
      history.operations
        .map(
          (o) => `<tr><td>${new Date(o.time_ms).toISOString()}</td><td>${esc(o.operation)}</td>
            <td class="num">${o.files_removed}</td><td class="num">${o.files_added}</td><td class="num">${o.version}</td></tr>`,
        )
        .join("") || `<tr><td colspan="5" class="muted">no retention, compaction or vacuum yet</td></tr>`;
    if (stats) throughput(document.getElementById("chart"), stats);
  }
  return refresh;
}

function sparkSnippet(root, topic) {
  // Python string literals: JSON's quoting is valid Python for these
  return `from logstore.spark import session

spark = session()
df = (
    spark.read.format("logstore")
    .option("logstore.root", ${JSON.stringify(root)})
    .option("subscribe", ${JSON.stringify(topic)})
    .load()
)
df.show()`;
}

function renderValue(v, as) {
  if (v === null || v === undefined) return `<span class="muted">null</span>`;
  const bytes =
    typeof v === "object" && v.b64 !== undefined
      ? Uint8Array.from(atob(v.b64), (c) => c.charCodeAt(0))
      : new TextEncoder().encode(v);
  if (as === "hex" || typeof v === "object") {
    return `<code>${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join(" ")}</code>`;
  }
  try {
    const parsed = JSON.parse(v);
    if (parsed !== null && typeof parsed === "object") return `<pre>${esc(JSON.stringify(parsed, null, 2))}</pre>`;
  } catch {
    // not JSON: shown as text
  }
  return esc(v);
}

async function groupsPage() {
  view.innerHTML = `<h1>Consumer groups</h1>${section(
    "Groups",
    `<table data-testid="groups"><thead><tr><th>Group</th><th class="num">Lag</th></tr></thead><tbody></tbody></table>`,
  )}`;
  async function refresh() {
    const [list, stats] = await Promise.all([api("/v1/groups"), api("/v1/stats/groups")]);
    const lag = new Map(stats.groups.map((g) => [g.group, g.latest.lag]));
    document.querySelector("[data-testid=groups] tbody").innerHTML = list.groups
      .map(
        (g) => `<tr data-group="${esc(g)}"><td><a href="${groupHref(g)}">${esc(g)}</a></td>
          <td class="num">${lag.has(g) ? lag.get(g) : "—"}</td></tr>`,
      )
      .join("");
  }
  return refresh;
}

const OPEN_STATES = new Set(["Ongoing", "PrepareCommit", "PrepareAbort"]);

function fmtAge(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

// Open transactions (GET /v1/transactions, those in an open state): age since the transaction began (this browser's
// clock against the node's start time), against its timeout, and the partitions it wrote so far.
async function transactionsPage() {
  view.innerHTML = `<h1>Transactions</h1>${section(
    "Open transactions",
    `<table data-testid="transactions"><thead><tr><th>Transactional id</th><th>State</th><th class="num">Producer id</th>
      <th class="num">Epoch</th><th class="num">Age</th><th class="num">Timeout</th><th>Partitions</th></tr></thead>
      <tbody></tbody></table><p data-testid="no-transactions" hidden>No transaction is open.</p>`,
  )}`;
  async function refresh() {
    const list = await api("/v1/transactions");
    const open = list.transactions.filter((t) => OPEN_STATES.has(t.state));
    const now = Date.now();
    document.querySelector("[data-testid=transactions] tbody").innerHTML = open
      .map((t) => {
        const age = t.transaction_start_ms === null ? "—" : fmtAge(now - t.transaction_start_ms);
        const late = t.transaction_start_ms !== null && now - t.transaction_start_ms > t.transaction_timeout_ms;
        const parts = t.topics.map((x) => `${esc(x.topic)} [${x.partitions.join(", ")}]`).join("; ");
        return `<tr data-tid="${esc(t.transactional_id)}"${late ? ' class="late"' : ""}>
          <td>${esc(t.transactional_id)}</td><td>${esc(t.state)}</td><td class="num">${t.producer_id}</td>
          <td class="num">${t.producer_epoch}</td><td class="num">${age}</td>
          <td class="num">${fmtAge(t.transaction_timeout_ms)}</td><td>${parts || "—"}</td></tr>`;
      })
      .join("");
    document.querySelector("[data-testid=no-transactions]").hidden = open.length > 0;
  }
  return refresh;
}

async function groupPage(group) {
  const enc = encodeURIComponent(group);
  view.innerHTML = `<h1>Group <code>${esc(group)}</code></h1>
    ${section("Members", `<table data-testid="members"><thead><tr><th>Member</th><th class="num">Generation</th><th>Assignment</th></tr></thead><tbody></tbody></table>`)}
    ${section(
      "Offsets and lag",
      `<table data-testid="offsets"><thead><tr><th>Topic</th><th class="num">Partition</th><th class="num">Committed</th>
        <th class="num">High watermark</th><th class="num">Lag</th></tr></thead><tbody></tbody></table>
        <p>Total lag: <b data-testid="total-lag"></b></p>`,
    )}
    ${section("Lag over time", `<div id="chart" class="chart"></div>`)}
    ${section(
      "Reset offsets",
      `<form class="inline" id="reset"><label>Topic<select name="topic"></select></label>
        <label>To<select name="to"><option value="earliest">earliest</option><option value="latest">latest</option>
        <option value="offset">offset…</option></select></label><label>Offset<input name="offset" type="number" min="0"></label>
        <button type="submit">Preview</button></form><div id="preview"></div>`,
    )}`;
  let current = null;
  document.getElementById("reset").onsubmit = async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const topic = f.get("topic");
    const to = f.get("to") === "offset" ? { offset: Number(f.get("offset")) } : f.get("to");
    const preview = document.getElementById("preview");
    try {
      const info = await api(`/v1/topics/${encodeURIComponent(topic)}`);
      const committed = new Map(
        ((current.topics.find((t) => t.topic === topic) || {}).partitions || []).map((p) => [p.partition, p.committed_offset]),
      );
      const rows = info.partitions.map((p) => {
        let target = to === "earliest" ? p.log_start_offset : to === "latest" ? p.high_watermark : to.offset;
        target = Math.min(Math.max(target, p.log_start_offset), p.high_watermark);
        const now = committed.has(p.partition) ? committed.get(p.partition) : null;
        return `<tr data-partition="${p.partition}"><td class="num">${p.partition}</td><td class="num">${now ?? "—"}</td>
          <td class="num">${target}</td><td class="num">${now === null ? "—" : target - now}</td>
          <td class="num">${p.high_watermark - target}</td></tr>`;
      });
      preview.innerHTML = `<p>Reset <b>${esc(group)}</b> on <b>${esc(topic)}</b> to <b>${esc(JSON.stringify(to))}</b>:</p>
        <table data-testid="reset-preview"><thead><tr><th class="num">Partition</th><th class="num">Committed now</th>
        <th class="num">New offset</th><th class="num">Moves by</th><th class="num">Lag after</th></tr></thead>
        <tbody>${rows.join("")}</tbody></table>
        <button id="confirm-reset">Confirm reset</button> <button id="cancel-reset">Cancel</button>
        <span id="reset-result"></span>`;
      document.getElementById("cancel-reset").onclick = () => (preview.innerHTML = "");
      document.getElementById("confirm-reset").onclick = async () => {
        const out = document.getElementById("reset-result");
        try {
          await api(`/v1/groups/${enc}/reset`, { method: "POST", body: { topic, to } });
          preview.innerHTML = `<p data-testid="reset-done">Offsets of ${esc(topic)} reset.</p>`;
          await refresh();
        } catch (e) {
          out.textContent = errorText(e);
          out.className = "error";
        }
      };
    } catch (e) {
      preview.innerHTML = `<p class="error">${esc(errorText(e))}</p>`;
    }
  };

  async function refresh() {
    const [described, lagStats] = await Promise.all([
      api(`/v1/groups/${enc}`),
      api(`/v1/stats/groups/${enc}`).catch((e) => {
        if (e instanceof ApiError && e.status === 404) return null; // live members, nothing committed yet
        throw e;
      }),
    ]);
    current = described;
    document.querySelector("[data-testid=members] tbody").innerHTML =
      current.members
        .map(
          (m) => `<tr><td><code>${esc(m.member_id)}</code></td><td class="num">${m.generation}</td>
            <td>${esc(m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", "))}</td></tr>`,
        )
        .join("") || `<tr><td colspan="3" class="muted">no live members</td></tr>`;
    let total = 0;
    document.querySelector("[data-testid=offsets] tbody").innerHTML = current.topics
      .flatMap((t) =>
        t.partitions.map((p) => {
          total += p.lag;
          return `<tr data-tp="${esc(t.topic)}-${p.partition}"><td><a href="${topicHref(t.topic)}">${esc(t.topic)}</a></td>
            <td class="num">${p.partition}</td><td class="num">${p.committed_offset}</td>
            <td class="num">${p.high_watermark}</td><td class="num">${p.lag}</td></tr>`;
        }),
      )
      .join("");
    document.querySelector("[data-testid=total-lag]").textContent = String(total);
    const sel = document.querySelector("#reset select[name=topic]");
    if (sel.options.length !== current.topics.length) {
      sel.innerHTML = current.topics.map((t) => `<option>${esc(t.topic)}</option>`).join("");
    }
    if (lagStats) {
      chart(document.getElementById("chart"), `${group}: lag, last 15 minutes`, [
        { label: "lag (records)", value: (p) => p.lag, stroke: "#b00020" },
      ], lagStats.samples);
    }
  }
  return refresh;
}

// ---------------------------------------------------------------- router
async function route() {
  clearTimeout(timer);
  charts.forEach((c) => c.destroy());
  charts = [];
  document.body.dataset.ready = "";
  const hash = location.hash.replace(/^#\/?/, "");
  const [kind, ...rest] = hash.split("/");
  const name = decodeURIComponent(rest.join("/"));
  document.querySelectorAll("[data-nav]").forEach((a) => {
    a.classList.toggle("active", a.dataset.nav === (["groups", "cluster", "transactions"].includes(kind) ? kind : "overview"));
  });
  let refresh;
  if (kind === "topics" && name) refresh = await topicPage(name);
  else if (kind === "groups" && name) refresh = await groupPage(name);
  else if (kind === "groups") refresh = await groupsPage();
  else if (kind === "cluster") refresh = await clusterPage();
  else if (kind === "transactions") refresh = await transactionsPage();
  else refresh = await overview();
  const here = location.hash;
  const ready = () => {
    if (performance.getEntriesByName("console-ready").length === 0) performance.mark("console-ready"); // load time
    document.body.dataset.ready = "1";
  };
  const tick = async () => {
    try {
      await refresh();
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
      ready();
    } catch (e) {
      view.insertAdjacentHTML("afterbegin", `<p class="error" data-testid="error">${esc(errorText(e))}</p>`);
      ready();
      return; // a page the principal may not see stops refreshing
    }
    if (location.hash === here) timer = setTimeout(tick, REFRESH_MS);
  };
  await tick();
}

window.addEventListener("hashchange", route);
showKeyState();
route();
