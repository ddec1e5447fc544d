// The request box: a request to the fleet (POST /api/ask), its route named at once, then what
// it causes (a hand-off, control's reply) as it lands in the thread (GET /api/threads/{id},
// waiting on the daemon, never polling on a timer).

const form = document.getElementById("ask-form");
const input = document.getElementById("ask-text");
const log = document.getElementById("ask-log");

async function call(method, path, body) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.message || `HTTP ${response.status}`);
  return data;
}

function line(parent, cls, text) {
  const li = document.createElement("li");
  li.className = cls;
  li.textContent = text;
  parent.append(li);
  return li;
}

function entryText(entry) {
  const where = entry.pane ? ` → ${entry.pane}` : "";
  return `${entry.actor}${where}: ${entry.text}`;
}

async function follow(request, after, list) {
  let last = after;
  for (let round = 0; round < 40; round += 1) {
    let data;
    try {
      data = await call("GET", `/api/threads/${request}?after=${last}&wait=25`);
    } catch (err) {
      line(list, "ask-error", err.message);
      return;
    }
    for (const entry of data.entries) {
      const seq = Number(entry.id.slice(1));
      if (seq > last) {
        line(list, `ask-${entry.kind}`, entryText(entry));
        last = seq;
      }
    }
    if (data.request.state === "answered" || data.request.state === "direct") return;
  }
}

if (form && input && log) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    const item = document.createElement("li");
    item.className = "ask-request";
    const list = document.createElement("ul");
    item.textContent = text;
    item.append(list);
    log.prepend(item);
    input.value = "";
    try {
      const data = await call("POST", "/api/ask", { text, front_end: "web" });
      const to = data.sent_to ? `sent to ${data.sent_to}` : "to control";
      line(list, "ask-route", `${data.request.id} ${to}: ${data.route.reason}`);
      const seqs = data.entries.map((e) => Number(e.id.slice(1)));
      follow(data.request.id, Math.max(Number(data.request.id.slice(1)), ...seqs), list);
    } catch (err) {
      line(list, "ask-error", err.message);
    }
  });
}
