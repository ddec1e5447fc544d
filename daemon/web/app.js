// openbus: the human side's page. Every piece of fleet data comes from the daemon's /api/*
// resources (each one a call through the gate, audited); this file only draws it.
// No framework, no build step, nothing from outside the box; text is always set as text.

const FAST_MS = 2500; // directory + cards while the page is visible (when it cannot follow)
const HIDDEN_MS = 20000; // and while the tab is hidden
const AUDIT_POLL_MS = 4000; // the audit feed when its stream is unavailable
const CONNECTIONS_EVERY = 12; // refresh Connect presets at least every N polls
const RESTORE_AGAIN_MS = 10000; // look for lost sessions once more after the panes change
const AUDIT_PAGE = 100; // older records loaded per scroll
const AUDIT_MAX = 5000; // records held in the page
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
  "human.follow",
  "human.page",
  "messages.list",
  "sessions.families",
  "restart.offers",
]);
// Records after which the Connect presets may have changed.
const CONNECT_CHANGES = /^(connect\.|launch$|policy\.|principal\.|grant)/;
// Records after which a session may have a new child.
const FAMILY_CHANGES = /^session\.(start|launch)$/;

const $ = (id) => document.getElementById(id);
const state = {
  panes: [],
  version: null,
  connections: new Map(),
  unavailable: new Map(), // pane -> why Connect cannot be honoured there (no toggle)
  offers: new Map(), // pane -> whether a restart can connect it, and why not (restart-offers)
  restartPreset: new Map(), // pane -> the preset chosen for its restart-to-connect
  cap: null,
  cards: [],
  audit: [],
  auditAfter: null, // the newest record's seq
  auditFrom: null, // records after this seq are loaded (0: from the beginning)
  skew: 0, // server clock minus ours, in seconds (from the Date header)
  detail: null, // the pane shown in the detail view
  detailData: null,
  ticks: 0,
  needConnections: true,
  busy: new Set(),
  errors: new Map(), // an error shown beside the control that caused it, by item
  seen: null, // Needs-you items already seen (null until the first load: no notifications)
  families: {}, // child pane -> the pane of the session that started it (GET /api/sessions)
  familiesKey: null, // the panes listed when the families were last read
  restorable: [], // sessions live in panes of a tmux server that is gone (restore dry run)
  restoreKey: null, // the panes listed when they were last looked for
};
const DESKTOP = window.matchMedia("(min-width: 900px)");

// ---- icons: the real Lucide SVGs, inlined into this file by the daemon when it serves it
// (from the lucide package's own files; nothing is fetched from outside the box)

const SVG = "http://www.w3.org/2000/svg";
const ICONS = /*LUCIDE-ICONS*/ {};

const drawnIcons = new Map(); // name -> its SVG, built once and cloned for every use

function iconShape(name) {
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
  for (const [tag, shape] of ICONS[name] || []) {
    const el = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(shape)) el.setAttribute(key, value);
    svg.append(el);
  }
  return svg;
}

function icon(name, label) {
  if (!drawnIcons.has(name)) drawnIcons.set(name, iconShape(name));
  const svg = drawnIcons.get(name).cloneNode(true);
  if (label) {
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", label);
    const title = document.createElementNS(SVG, "title");
    title.textContent = label;
    svg.prepend(title);
  } else {
    svg.setAttribute("aria-hidden", "true");
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

const SOON_SECONDS = 120; // a card this close to expiring is marked

function expiryText(seconds) {
  const left = seconds - nowServer();
  if (left <= 0) return "expired";
  return `expires at ${clock(seconds)}${left < SOON_SECONDS ? ` (in ${until(seconds)})` : ""}`;
}

function until(seconds) {
  const d = Math.round(seconds - nowServer());
  if (d <= 0) return "expired";
  if (d < 60) return `${d}s`;
  if (d < 3600) return `${Math.floor(d / 60)} min`;
  return `${Math.floor(d / 3600)} h ${Math.floor((d % 3600) / 60)} min`;
}

function clock(seconds) {
  const date = new Date((seconds - state.skew) * 1000);
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

// ---- the API: one readable line on failure, never a stack ----

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

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
    throw new ApiError(message || `${method} ${path} answered ${response.status}`, response.status);
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

// Run one action of the person's. Its error is shown beside the control (``place``: the item
// it belongs to, redrawn with it) or, without a place, in the banner at the top.
async function act(key, work, place) {
  if (state.busy.has(key)) return;
  state.busy.add(key);
  try {
    await work();
    if (place) state.errors.delete(place);
    else clearError();
  } catch (error) {
    const message =
      error instanceof ApiError ? error.message : "something went wrong in the page";
    if (place) {
      state.errors.set(place, String(message).split("\n")[0]);
      drawn.clear();
      render();
    } else {
      showError(message);
    }
  } finally {
    state.busy.delete(key);
  }
}

function inlineError(place) {
  const message = state.errors.get(place);
  return message ? h("p", { class: "error inline", role: "alert", text: message }) : null;
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

// A radio group of presets, ``chosen`` on; each button's dataset[key] names its preset.
function presetGroup(presets, chosen, pick, { label, dataset = {}, key }) {
  const group = h("div", { class: "toggle", role: "radiogroup", "aria-label": label, dataset });
  for (const preset of presets) {
    group.append(h(
      "button",
      {
        type: "button",
        role: "radio",
        "aria-checked": String(chosen === preset),
        class: chosen === preset ? "on" : "",
        dataset: { [key]: preset },
        onclick: () => pick(preset),
      },
      preset === "off" ? null : icon(preset),
      preset[0].toUpperCase() + preset.slice(1),
    ));
  }
  return group;
}

function connectToggle(pane) {
  const current = presetOf(pane);
  const found = connectionOf(pane);
  const reason = found ? null : state.unavailable.get(pane.pane);
  if (reason) return h("p", { class: "small", dataset: { unavailable: pane.pane }, text: reason });
  const group = presetGroup(PRESETS, current, (preset) => setConnect(pane.pane, preset), {
    label: `Connect ${pane.pane}`,
    dataset: { connect: pane.pane },
    key: "preset",
  });
  const note =
    found && found.preset !== found.effective
      ? h("p", {
          class: "small",
          text: `Granted ${found.preset}; the org policy caps it at ${found.effective}.`,
        })
      : null;
  return h("div", { class: "connect" }, group, note, inlineError(`pane:${pane.pane}`));
}

// ---- restart-to-connect: an agent without a token, offered a restart where the daemon says
// one can connect it (GET /api/restart-offers), through the same PUT /api/connect the CLI
// uses: that raises the card "Restart this agent to connect it?", approved in Needs you.

async function refreshOffers() {
  const data = await api("GET", "/api/restart-offers");
  state.offers = new Map(data.offers.map((o) => [o.pane, o]));
}

function allowedPresets() {
  const cap = PRESETS.indexOf(state.cap || "collaborate");
  return PRESETS.filter((p, rank) => p !== "off" && rank <= cap);
}

function restartCard(pane) {
  return state.cards.find((c) => c.kind === "restart_to_connect" && c.target === pane);
}

// The pane detail's Connect section: the toggle where Connect can be honoured, the restart
// offer where a restart can connect it, else the reason it cannot.
function detailConnect(pane) {
  const offer = connectionOf(pane) ? null : state.offers.get(pane.pane);
  if (!offer) return [connectToggle(pane), inlineError(`restart:${pane.pane}`)];
  if (!offer.restartable) {
    return h("p", {
      class: "small",
      dataset: { unavailable: pane.pane, restartable: "false" },
      text: offer.reason || "a restart cannot connect this agent",
    });
  }
  return restartOffer(pane, offer);
}

function restartOffer(pane, offer) {
  const id = pane.pane;
  const place = `restart:${id}`;
  const box = (...children) =>
    h("div", { class: "connect restart", dataset: { restart: id } }, ...children,
      inlineError(place));
  const about = h("p", {
    class: "small",
    text: `${id} holds no openbus token. Restarting it quits ${offer.harness} and resumes the ` +
      `same session${offer.session_id ? ` (${offer.session_id})` : ""} connected, once it is ` +
      "idle with an empty composer.",
  });
  if (offer.restarting) {
    return box(h("p", {
      class: "small",
      dataset: { restarting: id },
      text: `${id} is restarting to connect it…`,
    }));
  }
  const pending = restartCard(id);
  if (pending) {
    return box(about, h("p", {
      class: "small",
      dataset: { pending: pending.id },
      text: "Waiting for your approval: its card is in Needs you.",
    }));
  }
  const allowed = allowedPresets();
  if (!allowed.length) {
    return box(about, h("p", {
      class: "small",
      dataset: { unavailable: id },
      text: `The org policy caps Connect at ${state.cap}: no restart can connect it.`,
    }));
  }
  const chosen = allowed.includes(state.restartPreset.get(id))
    ? state.restartPreset.get(id)
    : allowed[0];
  const pick = (preset) => {
    state.restartPreset.set(id, preset);
    drawn.delete("detail");
    renderDetail();
  };
  const group = presetGroup(allowed, chosen, pick, {
    label: `Connect ${id} with`,
    key: "restartPreset",
  });
  const go = h(
    "button",
    {
      type: "button",
      class: "primary",
      dataset: { restartConnect: id },
      onclick: () => restartToConnect(id, chosen),
    },
    icon("restart"),
    "Restart to connect",
  );
  return box(about, group, h("div", { class: "actions" }, go));
}

async function restartToConnect(pane, preset) {
  await act(`restart:${pane}`, async () => {
    const result = await api("PUT", "/api/connect", { pane, preset });
    const restart = result && result.restart;
    if (restart) {
      notify(`${pane}: ${restart.summary} Approve its card to restart it with ${preset}.`);
      if (!state.cards.some((c) => c.id === restart.card)) {
        state.cards = (await api("GET", "/api/cards")).cards;
      }
    } else {
      notify(`${pane} is connected: ${preset}.`);
    }
    await refreshConnections();
    await refreshOffers();
    render();
  }, `restart:${pane}`);
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
  }, `pane:${pane}`);
}

async function refreshConnections() {
  const data = await api("GET", "/api/connections");
  state.connections = new Map(data.connections.map((c) => [c.pane, c]));
  state.unavailable = new Map((data.unavailable || []).map((u) => [u.pane, u.reason]));
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
  if (value === false) return "draft in the composer";
  return "composer not visible on this screen";
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

// ---- restore: the sessions that were live in panes of a tmux server that is gone (a reboot,
// a kill-server), listed by POST /api/restore's dry run and brought back as one action, each
// in a new pane with its grant (the same call as `openbus restore`). Looked for when the
// listed panes change, and once more a little later: an agent can outlive its lost server for
// a moment, and a session whose process still runs is not offered.

function followRestore() {
  const key = state.panes.map((p) => p.pane).join(" ");
  if (key === state.restoreKey) return;
  state.restoreKey = key;
  lookForRestore();
  clearTimeout(followRestore.again);
  followRestore.again = setTimeout(lookForRestore, RESTORE_AGAIN_MS);
}

async function lookForRestore() {
  try {
    const listed = await api("POST", "/api/restore", { dry_run: true });
    state.restorable = (listed && listed.sessions) || [];
  } catch {
    state.restorable = []; // looked for again when the panes change
  }
  render();
}

function renderRestore() {
  const count = state.restorable.length;
  $("restore").hidden = count === 0;
  if (!count) return;
  const names = state.restorable.map((s) => `${s.harness} ${s.session_id}`).join(", ");
  $("restore-text").textContent =
    `Restore ${count} session${count === 1 ? "" : "s"}? They were live in panes of a tmux ` +
    `server that is gone: ${names}. Each comes back in a new pane with its grant.`;
}

async function restoreAll() {
  await act("restore", async () => {
    const result = await api("POST", "/api/restore", {});
    const restored = result.restored || [];
    const failed = restored.filter((r) => !r.ok);
    const why = failed.map((r) => `${r.harness} ${r.session_id}: ${r.error}`).join("; ");
    notify(
      `Restored ${restored.length - failed.length} of ${restored.length} ` +
        `session${restored.length === 1 ? "" : "s"}${failed.length ? `. Not restored: ${why}` : "."}`,
    );
    state.restorable = [];
    state.restoreKey = null;
    render();
  });
}

// ---- session families: children under their parent, the family on a pane's detail ----

async function refreshFamilies() {
  const found = await api("GET", "/api/sessions");
  state.families = (found && found.children) || {};
}

function familyChanged() {
  state.familiesKey = null;
  if (!state.panes.length) return;
  followFamilies()
    .then(render)
    .catch((error) => showError(error.message));
}

// Read the families when the listed panes change, and once more at the next frame (a new
// child's pane can show before its start is committed).
async function followFamilies() {
  const key = state.panes.map((p) => p.pane).join(" ");
  if (key === state.familiesKey && !state.familiesAgain) return;
  state.familiesAgain = key !== state.familiesKey;
  state.familiesKey = key;
  await refreshFamilies();
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

// Each row is rebuilt only when what it shows changed (a frame usually changes one pane);
// the list's children are replaced only where they differ.
const rows = new Map(); // pane -> { key, row }

function fleetRow(pane, depth) {
  const key = JSON.stringify([
    pane,
    depth,
    connectionOf(pane),
    state.unavailable.get(pane.pane),
    state.errors.get(`pane:${pane.pane}`),
    state.families[pane.pane],
  ]);
  const kept = rows.get(pane.pane);
  if (kept && kept.key === key) return kept.row;
  const row = familyCard(pane, depth);
  rows.set(pane.pane, { key, row });
  return row;
}

function renderFleet() {
  const list = $("panes");
  const wanted = familyOrder(state.panes).map(([pane, depth]) => fleetRow(pane, depth));
  const listed = new Set(state.panes.map((p) => p.pane));
  for (const pane of [...rows.keys()]) if (!listed.has(pane)) rows.delete(pane);
  const shown = list.children;
  if (shown.length === wanted.length && wanted.every((row, i) => shown[i].dataset.pane === row.dataset.pane)) {
    wanted.forEach((row, i) => {
      if (shown[i] !== row) shown[i].replaceWith(row);
    });
  } else {
    list.replaceChildren(...wanted);
  }
  $("panes-count").textContent = String(state.panes.length);
  $("panes-empty").hidden = state.panes.length > 0;
}

// ---- Needs you ----

function cardItem(card) {
  const decide = (decision) =>
    act(`card:${card.id}`, async () => {
      await api("POST", `/api/cards/${encodeURIComponent(card.id)}`, { decision });
      notify(decision === "decline" ? "Declined." : "Approved.");
      // decided: gone from Needs you at once; the feed's next frame brings the rest (no read)
      state.cards = state.cards.filter((c) => c.id !== card.id);
      render();
    }, `card:${card.id}`);
  const soon = card.expires - nowServer() < SOON_SECONDS;
  return h(
    "li",
    { class: `card${soon ? " soon" : ""}`, dataset: { card: card.id, kind: card.kind } },
    h("p", { class: "card-kind", text: card.kind.replace(/_/g, " ") }),
    h("p", { class: "card-summary", text: card.summary }),
    h(
      "p",
      { class: "small" },
      h("span", { class: "expiry", dataset: { expires: String(card.expires) } }, icon("clock"),
        expiryText(card.expires)),
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
    inlineError(`card:${card.id}`),
  );
}

// ---- Needs you: agents whose screen asks a person (a permission prompt, a question)

function asking() {
  return state.panes.filter((p) => p.state === "menu" && p.menu && p.menu.options.length);
}

function menuPaneName(pane) {
  return pane.title || pane.window?.name || pane.command || pane.pane;
}

function menuItem(pane) {
  const menu = pane.menu;
  const place = `menu:${pane.pane}`;
  const answer = (option) =>
    act(`answer:${pane.pane}`, async () => {
      await api("POST", `/api/panes/${encodeURIComponent(pane.pane)}/answer`, {
        incarnation: pane.incarnation,
        fingerprint: menu.fingerprint,
        key: option.key,
      });
      notify(`${pane.pane}: pressed ${option.key} (${option.label}).`);
    }, place);
  return h(
    "li",
    { class: "card asks", dataset: { asks: pane.pane, fingerprint: menu.fingerprint } },
    h("p", { class: "card-kind" }, icon("terminal"), `${pane.harness} asks · `,
      h("span", { class: "mono", text: pane.pane })),
    h("p", { class: "card-summary" },
      h("button", { type: "button", class: "linkish", onclick: () => openDetail(pane.pane) },
        menuPaneName(pane))),
    h("p", { class: "question", text: menu.question }),
    menu.detail ? h("p", { class: "menu-detail mono", text: menu.detail }) : null,
    h(
      "div",
      { class: "options" },
      menu.options.map((option, index) =>
        h("button", {
          type: "button",
          class: index === 0 ? "primary" : "",
          dataset: { key: option.key },
          onclick: () => answer(option),
        }, h("span", { class: "key mono", text: option.key }), option.label)),
    ),
    inlineError(place),
  );
}

function renderCards() {
  const asks = asking();
  const count = state.cards.length + asks.length;
  $("cards").replaceChildren(...asks.map(menuItem), ...state.cards.map(cardItem));
  $("cards-count").textContent = String(count);
  $("cards-count").classList.toggle("hot", count > 0);
  $("cards-empty").hidden = count > 0;
  badge(count);
  tell(asks);
}

// ---- be told: the title and icon carry the count; a notification per new item

function badge(count) {
  document.title = count ? `(${count}) openbus` : "openbus";
  const link = document.querySelector('link[rel="icon"]');
  const href = `/static/favicon-${count > 9 ? "9plus" : count}.svg`;
  if (link && link.getAttribute("href") !== href) link.setAttribute("href", href);
  if (navigator.setAppBadge) {
    (count ? navigator.setAppBadge(count) : navigator.clearAppBadge()).catch(() => {});
  }
}

function tell(asks) {
  const items = [
    ...asks.map((p) => [`menu:${p.pane}:${p.menu.fingerprint}`,
      `${menuPaneName(p)} (${p.pane}) asks`, p.menu.question]),
    ...state.cards.map((c) => [`card:${c.id}`, `${c.kind.replace(/_/g, " ")} card`, c.summary]),
  ];
  const first = state.seen === null;
  const seen = new Set(items.map(([key]) => key));
  if (!first && "Notification" in window && Notification.permission === "granted") {
    for (const [key, title, body] of items) {
      if (!state.seen.has(key)) new Notification(`openbus: ${title}`, { body, tag: key });
    }
  }
  state.seen = seen;
}

function askToNotify() {
  // asked once, on the person's first tap (browsers ignore a request without one)
  if (!("Notification" in window) || Notification.permission !== "default") return;
  if (localStorage.getItem("openbus-notify-asked")) return;
  localStorage.setItem("openbus-notify-asked", "1");
  Notification.requestPermission().catch(() => {});
}

// ---- the audit feed ----

function visibleRecord(record) {
  if ($("show-reads").checked) return true;
  const own =
    OWN_READS.has(record.action) ||
    (record.action === "session.restore" && record.details && record.details.dry_run === true);
  return !(record.actor.startsWith("human:") && own);
}

function refusalReason(record) {
  if (record.outcome !== "refused" && record.outcome !== "error") return null;
  const details = record.details || {};
  const why = details.message || details.reason;
  return why ? h("span", { class: "rec-why", text: String(why) }) : null;
}

// An agent as a person reads it: claude "auth review" %10 on fix/login (never its session id).
function paneName(pane) {
  const harness = pane.harness && pane.harness !== "unknown" ? pane.harness : "agent";
  const title = pane.title ? ` "${pane.title}"` : "";
  return `${harness}${title} ${pane.pane}${pane.branch ? ` on ${pane.branch}` : ""}`;
}

function actorName(actor) {
  if (!actor || !actor.startsWith("agent:")) return actor;
  for (const c of state.connections.values()) {
    if (c.actor !== actor) continue;
    const pane = state.panes.find((p) => p.pane === c.pane);
    if (!pane) return `${c.harness} ${c.pane}`;
    return paneName({ ...pane, harness: c.harness }); // the launched harness, as granted
  }
  const harness = actor.split(":")[1] || "agent";
  const pane = /:pane:(%\d+):/.exec(actor);
  return pane ? `${harness} ${pane[1]}` : `${harness} agent (no longer connected)`;
}

function auditItem(record) {
  return h(
    "li",
    { class: `rec outcome-${record.outcome}`, dataset: { action: record.action, seq: record.seq } },
    h("span", { class: "rec-time mono", text: clock(record.time) }),
    h("span", { class: "rec-action", text: record.action }),
    h("span", { class: "rec-outcome", text: record.outcome }),
    h("span", { class: "rec-actor", title: record.actor, text: actorName(record.actor) }),
    record.target ? h("span", { class: "rec-target mono", text: record.target }) : null,
    record.message_id ? h("span", { class: "rec-msg mono", text: `msg ${record.message_id}` }) : null,
    refusalReason(record),
  );
}

function renderAudit() {
  const shown = state.audit.filter(visibleRecord).reverse();
  $("audit-feed").replaceChildren(...shown.map(auditItem));
  const empty = $("audit-empty");
  empty.hidden = shown.length > 0;
  empty.textContent = state.audit.length
    ? "Only this page's own reads so far; they are hidden (tick the box above to see them)."
    : "Nothing recorded yet: what you and your agents do shows here as it happens.";
  $("audit-older").textContent =
    state.auditFrom === 0 ? "The beginning of the log." : "Scroll for older records…";
}

async function loadOlder() {
  if (state.auditFrom === null || state.auditFrom <= 0 || state.busy.has("older")) return;
  state.busy.add("older");
  try {
    const from = Math.max(0, state.auditFrom - AUDIT_PAGE);
    const page = await api("GET", `/api/audit?after=${from}&limit=${AUDIT_PAGE}`);
    const older = page.records.filter((r) => r.seq <= state.auditFrom);
    state.audit = [...older, ...state.audit].slice(-AUDIT_MAX);
    state.auditFrom = from;
    renderAudit();
  } catch (error) {
    showError(error.message);
  } finally {
    state.busy.delete("older");
  }
}

function addRecords(records) {
  if (!records.length) return;
  for (const record of records) {
    if (state.auditAfter !== null && record.seq <= state.auditAfter) continue;
    state.audit.push(record);
    state.auditAfter = record.seq;
    if (CONNECT_CHANGES.test(record.action)) state.needConnections = true;
    if (FAMILY_CHANGES.test(record.action)) familyChanged();
  }
  if (state.audit.length > AUDIT_MAX) state.audit = state.audit.slice(-AUDIT_MAX);
  renderAudit();
}

async function startAudit() {
  // the newest records first: ask where the log's head is, then read the tail
  const head = await api("GET", "/api/audit?after=0&limit=1");
  const top = head.export && typeof head.export.seq === "number" ? head.export.seq : head.next;
  const after = Math.max(0, top - 60);
  const tail = await api("GET", `/api/audit?after=${after}&limit=100`);
  state.auditAfter = after;
  state.auditFrom = after;
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

// Follow an NDJSON stream: each chunk's records (empty keep-alive lines skipped) to ``take``,
// until the stream ends; throws when it cannot be opened.
async function ndjson(path, take) {
  const response = await fetch(path, { credentials: "same-origin" });
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
    await take(lines.filter((line) => line.trim()).map((line) => JSON.parse(line)));
  }
}

function streamAudit() {
  return ndjson(`/api/audit/stream?after=${state.auditAfter}`, addRecords);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---- pane detail: fields, events, messages sent and received ----

function messageItem(message, direction) {
  const peer = direction === "sent" ? message.recipient_pane || message.target : message.sender_pane;
  const who = direction === "sent" ? message.recipient_name : message.sender_name;
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
      `${message.message_id} · ${who || ""}${message.hop_words ? ` · ${message.hop_words}` : ""}` +
        `${message.reason ? ` · ${message.reason}` : ""}`,
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

const AGENTS = new Set(["claude", "codex", "opencode", "omp", "gemini"]);

function renderDetail() {
  const view = $("detail");
  const pane = state.detailData;
  document.body.classList.toggle("with-detail", Boolean(state.detail));
  if (!state.detail) {
    view.hidden = true;
    $("home").hidden = false;
    $("type-form").hidden = true;
    return;
  }
  view.hidden = false;
  $("home").hidden = !DESKTOP.matches; // beside the fleet on a desk, instead of it on a phone
  const failed = state.errors.get("detail");
  if (!pane) {
    $("detail-h").textContent = state.detail;
    $("type-form").hidden = true;
    $("detail-body").replaceChildren(
      failed
        ? h("p", { class: "error inline", role: "alert", text: failed })
        : h("p", { class: "empty", text: "Loading…" }),
    );
    return;
  }
  const listed = state.panes.find((p) => p.pane === pane.pane) || pane;
  const preset = presetOf(listed);
  const heading = $("detail-h");
  heading.replaceChildren(
    h("span", { class: "indicator" }, indicator(preset)),
    `${pane.pane} ${pane.title || pane.window?.name || ""}`,
  );
  const rows = [
    ["Harness", pane.harness],
    ["State", pane.state],
    ["Composer", composer(pane.composer_empty)],
    ["Branch", pane.branch || "—"],
    ["Directory", pane.cwd || "—"],
    ["Summary", pane.summary || "—"],
    ["Connect", preset],
    ["Named", paneName(listed)],
    ["Last activity", pane.last_activity ? ago(pane.last_activity) : "—"],
    ["Incarnation", pane.incarnation],
  ];
  const messages = pane.messages || { sent: [], received: [] };
  const masked = pane.masked && pane.masked.length ? ` (masked: ${pane.masked.join(", ")})` : "";
  const parts = [
    failed ? h("p", { class: "error inline", role: "alert", text: failed }) : null,
    listed.state === "menu" && listed.menu ? h("ul", { class: "cards" }, menuItem(listed)) : null,
    h("h3", { text: `Screen${masked}` }),
    pane.screen
      ? h("pre", { class: "screen mono", dataset: { revision: String(pane.revision) },
          text: pane.screen })
      : h("p", { class: "empty", text: "No screen captured yet." }),
    h("dl", { class: "fields" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", { text: String(v) })])),
    pane.pr_links && pane.pr_links.length ? h("p", { class: "prs" }, prLinks(pane.pr_links)) : null,
    detailConnect(listed),
    familySection(pane.family),
    h("h3", { text: "Messages" }),
    messageList("Sent", messages.sent || [], "sent"),
    messageList("Received", messages.received || [], "received"),
    h("h3", { text: "Recent events" }),
    h(
      "ul",
      { class: "events" },
      (pane.events || []).slice(-20).reverse().map((e) =>
        h("li", { class: "small" }, `${clock(e.time)} ${e.text || e.kind}`)),
    ),
  ];
  $("detail-body").replaceChildren(...parts.flat().filter(Boolean));
  const form = $("type-form");
  form.hidden = !AGENTS.has(pane.harness) || pane.state === "exited";
  const ready = pane.state === "idle" && pane.composer_empty === true;
  form.querySelector("button").disabled = !ready;
  $("type-hint").textContent = ready
    ? "Typed into the agent's composer and sent, as you, audited."
    : `${pane.pane} is ${pane.state === "idle" ? "holding a draft" : pane.state}: text is typed only at an idle, empty composer.`;
}

async function refreshDetail() {
  if (!state.detail) return;
  const pane = state.detail;
  try {
    const data = await api("GET", `/api/panes/${encodeURIComponent(pane)}?masked=true`);
    // what openbus launched there decides an offer, not what the screen reads as (a shell)
    const listed = state.panes.find((p) => p.pane === pane) || data;
    if (!connectionOf(listed)) {
      try {
        await refreshOffers();
        state.errors.delete(`restart:${pane}`);
      } catch (error) {
        state.errors.set(`restart:${pane}`, error.message || "the restart offers could not be read");
      }
    }
    if (state.detail === pane) {
      state.detailData = data;
      state.errors.delete("detail");
    }
  } catch (error) {
    if (state.detail !== pane) return;
    state.errors.set("detail", error.message || "the pane could not be read");
    if (error instanceof ApiError && error.status === 404) state.detailData = null;
  }
}

async function typeText(event) {
  event.preventDefault();
  const pane = state.detailData;
  const input = $("type-text");
  const text = input.value;
  if (!pane || !text.trim()) return;
  await act(`type:${pane.pane}`, async () => {
    const result = await api("POST", `/api/panes/${encodeURIComponent(pane.pane)}/type`, {
      incarnation: pane.incarnation,
      text,
    });
    input.value = "";
    notify(result.submitted ? `Sent to ${pane.pane}.` : `Typed into ${pane.pane}; not yet sent.`);
    await refreshDetail();
    drawn.delete("detail");
    render();
  }, "detail");
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
    state.errors.delete("detail");
    drawn.delete("detail");
    renderDetail();
    if (pane) {
      refreshDetail().then(() => {
        drawn.delete("detail");
        renderDetail();
      });
    }
    // a phone shows the detail instead of the fleet: start it at the top; a desk keeps its place
    if (!DESKTOP.matches) window.scrollTo(0, 0);
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
  const errors = [...state.errors];
  const unavailable = [...state.unavailable.entries()];
  redraw("restore", [state.restorable], renderRestore);
  redraw("cards", [state.cards, asking(), errors], renderCards);
  redraw("fleet", [state.panes, connections, unavailable, errors, state.families], renderFleet);
  redraw(
    "detail",
    [state.detail, state.detailData, connections, unavailable, state.panes, errors,
      [...state.offers.values()], [...state.restartPreset], state.cards, state.cap],
    renderDetail,
  );
}

// The page follows the daemon's feed (/api/follow: one audited subscription, then a frame of
// directory, cards and connections whenever they change), so its own watching writes no
// audit record per refresh. Where the stream is unavailable it polls for a while instead.

function live(directory, ok) {
  const el = $("live");
  el.textContent = !ok ? "offline"
    : directory && directory.tmux && directory.tmux.running === false ? "tmux down" : "live";
  el.classList.toggle("ok", ok);
}

function take(directory, cards, connections) {
  state.panes = directory.panes;
  state.version = directory.version;
  state.cards = cards;
  if (!connections) return;
  state.connections = new Map(connections.connections.map((c) => [c.pane, c]));
  state.cap = connections.cap;
  state.unavailable = new Map((connections.unavailable || []).map((u) => [u.pane, u.reason]));
  state.needConnections = false;
}

async function apply(directory, cards, connections) {
  const moved = state.panes.find((p) => p.pane === state.detail)?.revision;
  take(directory, cards, connections);
  if (!connections && (state.needConnections || state.ticks % CONNECTIONS_EVERY === 0)) {
    await refreshConnections();
  }
  await followFamilies();
  followRestore();
  const now = state.panes.find((p) => p.pane === state.detail);
  // the open pane's detail (its screen) is read again when its screen changed
  if (state.detail && (!state.detailData || !now || now.revision !== moved)) await refreshDetail();
  live(directory, true);
  if (tick.failed) clearError();
  tick.failed = false;
  render();
}

async function tick() {
  state.ticks += 1;
  try {
    const [directory, cards] = await Promise.all([
      api("GET", "/api/directory"),
      api("GET", "/api/cards"),
    ]);
    if (directory.version !== state.version) state.needConnections = true;
    await apply(directory, cards.cards, null);
  } catch (error) {
    tick.failed = true;
    live(null, false);
    showError(error.message);
  }
}

// The page came with its first frame (GET / carries what /api/follow sends first, and the
// session families): the fleet is drawn from it before the page makes a request of its own.
function firstFrame() {
  const block = $("first-frame");
  let frame = null;
  try {
    frame = JSON.parse(block.textContent);
  } catch {
    return; // the page without a frame: the feed's first one draws it
  }
  block.remove();
  if (!frame || !frame.directory) return;
  take(frame.directory, frame.cards, frame.connections);
  state.families = frame.families || {};
  state.familiesKey = state.panes.map((p) => p.pane).join(" ");
  state.familiesAgain = true; // read once more at the feed's next frame, as after a read
  render();
}

function streamFollow() {
  return ndjson("/api/follow", async (frames) => {
    const frame = frames[frames.length - 1];
    if (frame) await apply(frame.directory, frame.cards, frame.connections);
  });
}

async function follow() {
  for (;;) {
    try {
      await streamFollow();
    } catch {
      // the stream is unavailable: poll for a while, then try it again
    }
    const until = Date.now() + 30000;
    do {
      await tick();
      await sleep(document.visibilityState === "visible" ? FAST_MS : HIDDEN_MS);
    } while (Date.now() < until);
  }
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
  $("restore-go").addEventListener("click", restoreAll);
  $("back").prepend(icon("back"));
  $("back").addEventListener("click", () => {
    location.hash = "";
  });
  $("show-reads").addEventListener("change", renderAudit);
  new IntersectionObserver((seen) => {
    if (seen.some((e) => e.isIntersecting)) loadOlder();
  }).observe($("audit-older"));
  $("type-form").addEventListener("submit", typeText);
  $("type-form").querySelector("button").prepend(icon("send"));
  document.addEventListener("click", askToNotify, { once: true });
  DESKTOP.addEventListener("change", () => {
    drawn.delete("detail");
    renderDetail();
  });
  $("live").addEventListener("click", () => tick());
  window.addEventListener("hashchange", route);
  setInterval(() => {
    for (const el of document.querySelectorAll(".expiry[data-expires]")) {
      const expires = Number(el.dataset.expires);
      el.lastChild.textContent = expiryText(expires);
      el.closest(".card")?.classList.toggle("soon", expires - nowServer() < SOON_SECONDS);
    }
  }, 1000);
  firstFrame();
  route();
  follow();
  startAudit().catch((error) => showError(error.message));
}

init();
