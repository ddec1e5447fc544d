// openbus: the human side's page. Every piece of fleet data comes from the daemon's /api/*
// resources (each one a call through the gate, audited); this file only draws it.
// No framework, no build step, nothing from outside the box; text is always set as text.

const FAST_MS = 2500; // directory + cards while the page is visible
const HIDDEN_MS = 20000; // and while the tab is hidden
const AUDIT_POLL_MS = 4000; // the audit feed when its stream is unavailable
const CONNECTIONS_EVERY = 12; // refresh Connect presets at least every N polls
const AUDIT_KEEP = 200;
const PRESETS = ["off", "observe", "collaborate"];
const STATES = ["idle", "busy", "menu", "shell", "exited", "unknown"];
// Reads this page makes on its own; hidden from the feed unless asked for.
const OWN_READS = new Set([
  "directory.list",
  "directory.pane",
  "cards.list",
  "connect.list",
  "audit.read",
  "audit.follow",
  "messages.list",
]);
// Records after which the Connect presets may have changed.
const CONNECT_CHANGES = /^(connect\.|launch$|policy\.|principal\.|grant)/;

const $ = (id) => document.getElementById(id);
const state = {
  panes: [],
  version: null,
  connections: new Map(),
  cap: null,
  cards: [],
  audit: [],
  auditAfter: null,
  skew: 0, // server clock minus ours, in seconds (from the Date header)
  detail: null, // the pane shown in the detail view
  detailData: null,
  ticks: 0,
  needConnections: true,
  busy: new Set(),
  families: {}, // child pane -> the pane of the session that started it (GET /api/sessions)
};

// ---- icons: Lucide-style strokes (24x24, stroke 2, round caps), drawn for this page ----

const SVG = "http://www.w3.org/2000/svg";
const ICONS = {
  observe: [
    ["path", { d: "M2.5 12C4.6 7.6 8 5 12 5s7.4 2.6 9.5 7c-2.1 4.4-5.5 7-9.5 7s-7.4-2.6-9.5-7Z" }],
    ["circle", { cx: "12", cy: "12", r: "3" }],
  ],
  collaborate: [
    ["circle", { cx: "9", cy: "8", r: "3.5" }],
    ["path", { d: "M3 20c0-3.3 2.7-6 6-6s6 2.7 6 6" }],
    ["path", { d: "M15.5 4.7a3.5 3.5 0 0 1 0 6.6" }],
    ["path", { d: "M18 14.6c1.8.9 3 2.9 3 5.4" }],
  ],
  check: [["path", { d: "M5 12.5l4.5 4.5L19 7.5" }]],
  pair: [
    ["path", { d: "M3 12.5l4 4 9-9.5" }],
    ["path", { d: "M11 16.5l1 0 9-9.5" }],
  ],
  x: [["path", { d: "M6 6l12 12M18 6L6 18" }]],
  power: [
    ["path", { d: "M12 3v8" }],
    ["path", { d: "M6.3 7.2a8 8 0 1 0 11.4 0" }],
  ],
  branch: [
    ["circle", { cx: "6", cy: "5.5", r: "2.5" }],
    ["circle", { cx: "18", cy: "7.5", r: "2.5" }],
    ["path", { d: "M6 8v10.5M18 10c0 4-6 3.5-11 7" }],
  ],
  pr: [
    ["circle", { cx: "6", cy: "6", r: "2.5" }],
    ["circle", { cx: "18", cy: "18", r: "2.5" }],
    ["path", { d: "M6 8.5V21M18 15.5V9a3 3 0 0 0-3-3h-4" }],
    ["path", { d: "M13.5 3.5L11 6l2.5 2.5" }],
  ],
  sent: [["path", { d: "M7 17L17 7M9 7h8v8" }]],
  received: [["path", { d: "M17 7L7 17M15 17H7V9" }]],
  back: [["path", { d: "M15 5l-7 7 7 7" }]],
  clock: [
    ["circle", { cx: "12", cy: "12", r: "9" }],
    ["path", { d: "M12 7v5l3 2" }],
  ],
};

function icon(name, label) {
  const svg = document.createElementNS(SVG, "svg");
  const attrs = {
    viewBox: "0 0 24 24",
    width: "18",
    height: "18",
    fill: "none",
    stroke: "currentColor",
    "stroke-width": "2",
    "stroke-linecap": "round",
    "stroke-linejoin": "round",
    class: `icon icon-${name}`,
    "data-icon": name,
  };
  for (const [key, value] of Object.entries(attrs)) svg.setAttribute(key, value);
  if (label) {
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const title = document.createElementNS(SVG, "title");
    title.textContent = label;
    svg.append(title);
  } else {
    svg.setAttribute("aria-hidden", "true");
  }
  for (const [tag, shape] of ICONS[name]) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(shape)) el.setAttribute(key, value);
    svg.append(el);
  }
  return svg;
}

// ---- small DOM helpers (text only, never HTML from data) ----

function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return el;
}

function nowServer() {
  return Date.now() / 1000 + state.skew;
}

function ago(seconds) {
  const d = Math.max(0, Math.round(nowServer() - seconds));
  if (d < 60) return `${d}s ago`;
  if (d < 3600) return `${Math.floor(d / 60)}m ago`;
  if (d < 86400) return `${Math.floor(d / 3600)}h ago`;
  return `${Math.floor(d / 86400)}d ago`;
}

function until(seconds) {
  const d = Math.round(seconds - nowServer());
  if (d <= 0) return "expired";
  if (d < 60) return `expires in ${d}s`;
  if (d < 3600) return `expires in ${Math.floor(d / 60)} min`;
  return `expires in ${Math.floor(d / 3600)} h ${Math.floor((d % 3600) / 60)} min`;
}

function clock(seconds) {
  const date = new Date((seconds - state.skew) * 1000);
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

// ---- the API: one readable line on failure, never a stack ----

class ApiError extends Error {}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError("the daemon cannot be reached");
  }
  noteSkew(response);
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    if (response.status === 401 && !data) location.reload(); // the tunnel's login page
    const message = data && typeof data.message === "string" ? data.message : null;
    throw new ApiError(message || `${method} ${path} answered ${response.status}`);
  }
  return data;
}

function noteSkew(response) {
  const date = response.headers.get("Date");
  if (!date) return;
  const server = Date.parse(date) / 1000;
  if (!Number.isNaN(server)) state.skew = server - Date.now() / 1000;
}

function showError(message) {
  const el = $("error");
  el.textContent = String(message).split("\n")[0];
  el.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

function notify(message) {
  const el = $("notice");
  el.textContent = message;
  el.hidden = false;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => {
    el.hidden = true;
  }, 6000);
}

async function act(key, work) {
  if (state.busy.has(key)) return;
  state.busy.add(key);
  try {
    await work();
    clearError();
  } catch (error) {
    showError(error instanceof ApiError ? error.message : "something went wrong in the page");
  } finally {
    state.busy.delete(key);
  }
}

// ---- Connect ----

function connectionOf(pane) {
  const found = state.connections.get(pane.pane);
  if (!found) return null;
  if (found.incarnation && pane.incarnation && found.incarnation !== pane.incarnation) return null;
  return found;
}

function presetOf(pane) {
  const found = connectionOf(pane);
  return found ? found.effective : "off";
}

function indicator(preset) {
  if (preset === "observe") return icon("observe", "Connected: Observe");
  if (preset === "collaborate") return icon("collaborate", "Connected: Collaborate");
  return null; // Off has no icon
}

function connectToggle(pane) {
  const current = presetOf(pane);
  const found = connectionOf(pane);
  const group = h("div", {
    class: "toggle",
    role: "radiogroup",
    "aria-label": `Connect ${pane.pane}`,
    dataset: { connect: pane.pane },
  });
  for (const preset of PRESETS) {
    const label = preset[0].toUpperCase() + preset.slice(1);
    const button = h(
      "button",
      {
        type: "button",
        role: "radio",
        "aria-checked": String(current === preset),
        class: current === preset ? "on" : "",
        dataset: { preset },
        onclick: () => setConnect(pane.pane, preset),
      },
      preset === "off" ? null : icon(preset),
      label,
    );
    group.append(button);
  }
  const note =
    found && found.preset !== found.effective
      ? h("p", {
          class: "small",
          text: `Granted ${found.preset}; the org policy caps it at ${found.effective}.`,
        })
      : null;
  return h("div", { class: "connect" }, group, note);
}

async function setConnect(pane, preset) {
  await act(`connect:${pane}`, async () => {
    await api("PUT", "/api/connect", { pane, preset });
    notify(
      preset === "off"
        ? `${pane} is off: pure, with nothing from openbus.`
        : `${pane} is connected: ${preset}.`,
    );
    await refreshConnections();
    render();
  });
}

async function refreshConnections() {
  const data = await api("GET", "/api/connections");
  state.connections = new Map(data.connections.map((c) => [c.pane, c]));
  state.cap = data.cap;
  state.needConnections = false;
}

// ---- the fleet ----

function stateBadge(value) {
  const known = STATES.includes(value) ? value : "unknown";
  return h("span", { class: `state state-${known}`, dataset: { state: known }, text: known });
}

function composer(value) {
  if (value === true) return "composer empty";
  if (value === false) return "draft in composer";
  return "composer unknown";
}

function prLinks(links) {
  return (links || []).map((url) => {
    const safe = /^https:\/\//.test(url) ? url : null;
    const label = url.replace(/^https:\/\/github\.com\//, "").replace("/pull/", "#");
    return safe
      ? h("a", { href: safe, class: "pr", rel: "noreferrer noopener", target: "_blank" },
          icon("pr"), label)
      : h("span", { class: "pr" }, icon("pr"), label);
  });
}

function paneCard(pane) {
  const preset = presetOf(pane);
  const title = pane.title || pane.window?.name || pane.command || pane.pane;
  return h(
    "li",
    { class: `pane preset-${preset}`, dataset: { pane: pane.pane, preset } },
    h(
      "div",
      { class: "pane-head" },
      h("span", { class: "indicator" }, indicator(preset)),
      h(
        "button",
        { type: "button", class: "linkish title", onclick: () => openDetail(pane.pane) },
        title,
      ),
      stateBadge(pane.state),
    ),
    h(
      "p",
      { class: "meta" },
      h("span", { class: "mono", text: pane.pane }),
      h("span", { text: pane.harness }),
      h("span", { text: composer(pane.composer_empty) }),
      pane.branch ? h("span", { class: "branch" }, icon("branch"), pane.branch) : null,
    ),
    pane.summary ? h("p", { class: "summary", text: pane.summary }) : null,
    pane.pr_links && pane.pr_links.length ? h("p", { class: "prs" }, prLinks(pane.pr_links)) : null,
    pane.harness === "shell"
      ? h("p", { class: "small", text: "A shell: never offered to agents." })
      : connectToggle(pane),
  );
}

// ---- session families: children under their parent, the family on a pane's detail ----

async function refreshFamilies() {
  const found = await api("GET", "/api/sessions");
  state.families = (found && found.children) || {};
}

// The panes with each child right after its parent (then that child's own children), and
// how deep each sits; a child whose parent is not listed stays where it is.
function familyOrder(panes) {
  const listed = new Set(panes.map((p) => p.pane));
  const under = new Map();
  for (const pane of panes) {
    const parent = state.families[pane.pane];
    if (parent && listed.has(parent)) {
      if (!under.has(parent)) under.set(parent, []);
      under.get(parent).push(pane);
    }
  }
  const out = [];
  const seen = new Set();
  const visit = (pane, depth) => {
    if (seen.has(pane.pane)) return;
    seen.add(pane.pane);
    out.push([pane, depth]);
    for (const child of under.get(pane.pane) || []) visit(child, depth + 1);
  };
  for (const pane of panes) {
    const parent = state.families[pane.pane];
    if (!parent || !listed.has(parent)) visit(pane, 0);
  }
  for (const pane of panes) visit(pane, 0); // a loop of parents: shown flat
  return out;
}

function familyCard(pane, depth) {
  const card = paneCard(pane);
  if (depth > 0) {
    card.classList.add("child");
    card.style.setProperty("--depth", String(depth));
    card.querySelector(".meta").append(
      h("span", { class: "child-of", text: `child of ${state.families[pane.pane]}` }),
    );
  }
  return card;
}

function familyMember(row, relation) {
  const label = row.pane || row.principal;
  return h(
    "li",
    { class: "small", dataset: { relation } },
    `${relation} `,
    row.pane
      ? h("button", { type: "button", class: "linkish mono", onclick: () => openDetail(row.pane) }, label)
      : h("span", { class: "mono", text: label }),
    ` ${[row.harness, row.state].filter(Boolean).join(", ")}`,
  );
}

function familySection(family) {
  if (!family || (!family.parent && !(family.children || []).length)) return null;
  const members = [];
  if (family.parent) members.push(familyMember(family.parent, "Started by"));
  for (const child of family.children || []) members.push(familyMember(child, "Started"));
  return [h("h3", { text: "Family" }), h("ul", { class: "family" }, members)];
}

function renderFleet() {
  const list = $("panes");
  list.replaceChildren(...familyOrder(state.panes).map(([pane, depth]) => familyCard(pane, depth)));
  $("panes-count").textContent = String(state.panes.length);
  $("panes-empty").hidden = state.panes.length > 0;
}

// ---- Needs you ----

function cardItem(card) {
  const decide = (decision) =>
    act(`card:${card.id}`, async () => {
      await api("POST", `/api/cards/${encodeURIComponent(card.id)}`, { decision });
      notify(decision === "decline" ? "Declined." : "Approved.");
      await refreshCards();
      render();
    });
  return h(
    "li",
    { class: "card", dataset: { card: card.id, kind: card.kind } },
    h("p", { class: "card-kind", text: card.kind.replace(/_/g, " ") }),
    h("p", { class: "card-summary", text: card.summary }),
    h(
      "p",
      { class: "small" },
      h("span", { class: "expiry", dataset: { expires: String(card.expires) } }, icon("clock"),
        until(card.expires)),
      card.target ? h("span", { class: "mono", text: ` · ${card.target}` }) : null,
    ),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "button", class: "primary", dataset: { decision: "approve" },
        onclick: () => decide("approve") }, icon("check"), "Approve"),
      card.kind === "message"
        ? h("button", { type: "button", dataset: { decision: "approve_pair" },
            title: "Approve this pair for the rest of the recipient's life",
            onclick: () => decide("approve_pair") }, icon("pair"), "Approve pair")
        : null,
      h("button", { type: "button", dataset: { decision: "decline" },
        onclick: () => decide("decline") }, icon("x"), "Decline"),
    ),
  );
}

function renderCards() {
  $("cards").replaceChildren(...state.cards.map(cardItem));
  $("cards-count").textContent = String(state.cards.length);
  $("cards-count").classList.toggle("hot", state.cards.length > 0);
  $("cards-empty").hidden = state.cards.length > 0;
}

async function refreshCards() {
  const data = await api("GET", "/api/cards");
  state.cards = data.cards;
}

// ---- the audit feed ----

function visibleRecord(record) {
  if ($("show-reads").checked) return true;
  return !(record.actor.startsWith("human:") && OWN_READS.has(record.action));
}

function auditItem(record) {
  return h(
    "li",
    { class: `rec outcome-${record.outcome}`, dataset: { action: record.action, seq: record.seq } },
    h("span", { class: "rec-time mono", text: clock(record.time) }),
    h("span", { class: "rec-action", text: record.action }),
    h("span", { class: "rec-outcome", text: record.outcome }),
    h("span", { class: "rec-actor", text: record.actor }),
    record.target ? h("span", { class: "rec-target mono", text: record.target }) : null,
    record.message_id ? h("span", { class: "rec-msg mono", text: `msg ${record.message_id}` }) : null,
  );
}

function renderAudit() {
  const shown = state.audit.filter(visibleRecord).slice(-AUDIT_KEEP).reverse();
  $("audit-feed").replaceChildren(...shown.map(auditItem));
}

function addRecords(records) {
  if (!records.length) return;
  for (const record of records) {
    if (state.auditAfter !== null && record.seq <= state.auditAfter) continue;
    state.audit.push(record);
    state.auditAfter = record.seq;
    if (CONNECT_CHANGES.test(record.action)) state.needConnections = true;
  }
  if (state.audit.length > AUDIT_KEEP * 4) state.audit = state.audit.slice(-AUDIT_KEEP * 2);
  renderAudit();
}

async function startAudit() {
  // the newest records first: ask where the log's head is, then read the tail
  const head = await api("GET", "/api/audit?after=0&limit=1");
  const top = head.export && typeof head.export.seq === "number" ? head.export.seq : head.next;
  const after = Math.max(0, top - 60);
  const tail = await api("GET", `/api/audit?after=${after}&limit=100`);
  state.auditAfter = after;
  addRecords(tail.records);
  state.auditAfter = Math.max(state.auditAfter, tail.next || 0);
  followAudit();
}

async function followAudit() {
  // one audited call, then every record as it is committed (NDJSON); poll if that fails
  for (;;) {
    try {
      await streamAudit();
    } catch {
      // fall through to polling for a while
    }
    const until = Date.now() + 30000;
    while (Date.now() < until) {
      try {
        const page = await api("GET", `/api/audit?after=${state.auditAfter}&limit=100`);
        addRecords(page.records);
        if (page.records.length === 100) continue;
      } catch (error) {
        showError(error.message);
      }
      await sleep(AUDIT_POLL_MS);
    }
  }
}

async function streamAudit() {
  const response = await fetch(`/api/audit/stream?after=${state.auditAfter}`, {
    credentials: "same-origin",
  });
  if (!response.ok || !response.body) throw new Error("no stream");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    const lines = buffer.split("\n");
    buffer = lines.pop();
    const records = [];
    for (const line of lines) {
      if (line.trim()) records.push(JSON.parse(line));
    }
    addRecords(records);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---- pane detail: fields, events, messages sent and received ----

function messageItem(message, direction) {
  const peer = direction === "sent" ? message.recipient_pane || message.target : message.sender_pane;
  const who = direction === "sent" ? message.recipient : message.sender;
  return h(
    "li",
    { class: `msg outcome-${message.outcome}`, dataset: { message: message.message_id } },
    h(
      "p",
      { class: "msg-head" },
      icon(direction === "sent" ? "sent" : "received"),
      h("span", { text: direction === "sent" ? `to ${peer || "?"}` : `from ${peer || "?"}` }),
      h("span", { class: "rec-outcome", text: message.outcome }),
      message.admitted ? h("span", { class: "small", text: ago(message.admitted) }) : null,
    ),
    h("p", { class: "msg-text", text: message.preview || "" }),
    h(
      "p",
      { class: "small mono" },
      `${message.message_id} · ${who || ""}${message.reason ? ` · ${message.reason}` : ""}`,
    ),
  );
}

function messageList(title, messages, direction) {
  return h(
    "div",
    { class: "msgs", dataset: { direction } },
    h("h3", { text: `${title} (${messages.length})` }),
    messages.length
      ? h("ul", {}, messages.map((m) => messageItem(m, direction)))
      : h("p", { class: "empty", text: direction === "sent" ? "Nothing sent." : "Nothing received." }),
  );
}

function renderDetail() {
  const view = $("detail");
  const pane = state.detailData;
  if (!state.detail) {
    view.hidden = true;
    $("home").hidden = false;
    return;
  }
  view.hidden = false;
  $("home").hidden = true;
  if (!pane) {
    $("detail-h").textContent = state.detail;
    $("detail-body").replaceChildren(h("p", { class: "empty", text: "Loading…" }));
    return;
  }
  const listed = state.panes.find((p) => p.pane === pane.pane) || pane;
  const preset = presetOf(listed);
  const heading = $("detail-h");
  heading.replaceChildren(
    h("span", { class: "indicator" }, indicator(preset)),
    `${pane.pane} ${pane.title || pane.window?.name || ""}`,
  );
  const found = connectionOf(listed);
  const rows = [
    ["Harness", pane.harness],
    ["State", pane.state],
    ["Composer", composer(pane.composer_empty)],
    ["Branch", pane.branch || "—"],
    ["Directory", pane.cwd || "—"],
    ["Summary", pane.summary || "—"],
    ["Connect", preset + (found ? ` (${found.actor})` : "")],
    ["Last activity", pane.last_activity ? ago(pane.last_activity) : "—"],
    ["Incarnation", pane.incarnation],
  ];
  const messages = pane.messages || { sent: [], received: [] };
  const parts = [
    h("dl", { class: "fields" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: String(v) })])),
    pane.pr_links && pane.pr_links.length ? h("p", { class: "prs" }, prLinks(pane.pr_links)) : null,
    pane.harness === "shell" ? null : connectToggle(listed),
    familySection(pane.family),
    h("h3", { text: "Messages" }),
    messageList("Sent", messages.sent || [], "sent"),
    messageList("Received", messages.received || [], "received"),
    h("h3", { text: "Recent events" }),
    h(
      "ul",
      { class: "events" },
      (pane.events || []).slice(-20).reverse().map((e) =>
        h("li", { class: "small" }, `${clock(e.time)} ${e.kind}${e.state ? ` ${e.state}` : ""}`)),
    ),
  ];
  $("detail-body").replaceChildren(...parts.flat().filter(Boolean));
}

async function refreshDetail() {
  if (!state.detail) return;
  const pane = state.detail;
  const data = await api("GET", `/api/panes/${encodeURIComponent(pane)}`);
  if (state.detail === pane) state.detailData = data;
}

function openDetail(pane) {
  location.hash = `#/pane/${encodeURIComponent(pane)}`;
}

function route() {
  const match = /^#\/pane\/(.+)$/.exec(location.hash);
  const pane = match ? decodeURIComponent(match[1]) : null;
  if (pane !== state.detail) {
    state.detail = pane;
    state.detailData = null;
    drawn.delete("detail");
    renderDetail();
    if (pane) {
      act("detail", async () => {
        await refreshDetail();
        drawn.delete("detail");
        renderDetail();
      });
    }
    window.scrollTo(0, 0);
  }
}

// ---- refresh loop ----

// Redraw a part only when what it shows changed, so a tap is never lost to a redraw.
const drawn = new Map();

function redraw(part, inputs, draw) {
  const key = JSON.stringify(inputs);
  if (drawn.get(part) === key) return;
  drawn.set(part, key);
  draw();
}

function render() {
  const connections = [...state.connections.values()];
  redraw("cards", state.cards, renderCards);
  redraw("fleet", [state.panes, connections, state.families], renderFleet);
  redraw("detail", [state.detail, state.detailData, connections, state.panes.length], renderDetail);
}

async function tick() {
  state.ticks += 1;
  const visible = document.visibilityState === "visible";
  try {
    const [directory, cards] = await Promise.all([
      api("GET", "/api/directory"),
      api("GET", "/api/cards"),
    ]);
    if (directory.version !== state.version) state.needConnections = true;
    state.panes = directory.panes;
    state.version = directory.version;
    state.cards = cards.cards;
    if (state.needConnections || state.ticks % CONNECTIONS_EVERY === 0) await refreshConnections();
    if (directory.version !== state.familiesAt || state.ticks % CONNECTIONS_EVERY === 0) {
      await refreshFamilies();
      state.familiesAt = directory.version;
    }
    if (visible && state.detail) await refreshDetail();
    const live = $("live");
    live.textContent = directory.tmux && directory.tmux.running === false ? "tmux down" : "live";
    live.classList.toggle("ok", true);
    if (tick.failed) clearError();
    tick.failed = false;
    render();
  } catch (error) {
    tick.failed = true;
    $("live").textContent = "offline";
    $("live").classList.toggle("ok", false);
    showError(error.message);
  }
  clearTimeout(tick.timer);
  tick.timer = setTimeout(tick, visible ? FAST_MS : HIDDEN_MS);
}

function init() {
  $("disconnect-all").prepend(icon("power"));
  $("disconnect-all").addEventListener("click", () => {
    if (!confirm("Disconnect every agent? Each one loses its openbus access at once.")) return;
    act("disconnect-all", async () => {
      const result = await api("POST", "/api/disconnect-all");
      notify(`Disconnected ${result.disconnected} agent${result.disconnected === 1 ? "" : "s"}.`);
      state.needConnections = true;
      await refreshConnections();
      render();
    });
  });
  $("back").prepend(icon("back"));
  $("back").addEventListener("click", () => {
    location.hash = "";
  });
  $("show-reads").addEventListener("change", renderAudit);
  $("live").addEventListener("click", () => tick());
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") tick();
  });
  setInterval(() => {
    for (const el of document.querySelectorAll(".expiry[data-expires]")) {
      el.lastChild.textContent = until(Number(el.dataset.expires));
    }
  }, 1000);
  route();
  tick();
  startAudit().catch((error) => showError(error.message));
}

init();
