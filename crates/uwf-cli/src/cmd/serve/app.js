// uwf serve: keeps the list of threads and a thread's page up to date.
// Every text goes in through textContent, never as markup: outputs and
// tasks are untrusted (docs/serve.md, "Security").
"use strict";

// A cell linking to a thread's page.
function threadCell(row, id) {
  const td = document.createElement("td");
  const a = document.createElement("a");
  a.href = "/threads/" + encodeURIComponent(id);
  const code = document.createElement("code");
  code.textContent = id;
  a.appendChild(code);
  td.appendChild(a);
  row.appendChild(td);
  return td;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

// The list page: the API is polled every two seconds with the page's filter.
function refreshList() {
  const params = new URLSearchParams(window.location.search);
  fetch("/api/threads?" + params.toString(), { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then((data) => {
      const body = document.getElementById("rows");
      const rows = document.createDocumentFragment();
      for (const t of data.threads) {
        const tr = document.createElement("tr");
        threadCell(tr, t.thread);
        cell(tr, t.state, "state state-" + String(t.state).replace(/[^a-z]/g, ""));
        cell(tr, t.name);
        cell(tr, t.task);
        cell(tr, t.age);
        rows.appendChild(tr);
      }
      body.replaceChildren(rows);
      document.getElementById("total").textContent = data.total + " threads";
    })
    .catch(() => {});
}

// A thread's page: server-sent events; the frame is reloaded when a step
// lands, and the actions are read again from the API.
function followThread(id) {
  const events = document.getElementById("events");
  const state = document.getElementById("state");
  const view = document.getElementById("view");
  const actions = threadActions(id);
  const source = new EventSource("/api/threads/" + encodeURIComponent(id) + "/events");
  const note = (text) => {
    const li = document.createElement("li");
    li.textContent = text;
    events.prepend(li);
  };
  source.addEventListener("step", (e) => {
    note(JSON.parse(e.data).text);
    view.src = view.src;
    actions.refresh();
  });
  source.addEventListener("state", (e) => {
    const d = JSON.parse(e.data);
    state.textContent = d.state;
    state.className = "state state-" + String(d.state).replace(/[^a-z]/g, "");
    actions.refresh();
    if (d.done) {
      source.close();
      view.src = view.src;
    }
  });
  source.addEventListener("error", (e) => {
    if (e.data) note("error: " + JSON.parse(e.data).error);
  });
}

// ---------------------------------------------------------------------------
// Actions (docs/serve.md, "Actions"): every POST carries the access token in
// the Authorization header. The person types the token; it is kept for this
// tab only (sessionStorage), never in a cookie the browser would send alone.

const TOKEN_KEY = "uwf-serve-token";

function post(path, body) {
  const token = document.getElementById("token").value.trim();
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = "Bearer " + token;
  return fetch(path, {
    method: "POST",
    headers: headers,
    body: JSON.stringify(body),
    credentials: "same-origin",
  }).then((r) =>
    r
      .json()
      .catch(() => ({ error: "HTTP " + r.status }))
      .then((data) => ({ ok: r.ok, status: r.status, data: data }))
  );
}

// A refusal as the server explains it: its message, code and hint.
function explain(el, data) {
  el.replaceChildren();
  const msg = document.createElement("p");
  msg.className = "refused";
  msg.textContent = data.error || "refused";
  el.appendChild(msg);
  if (data.code) {
    const code = document.createElement("p");
    code.className = "code";
    code.textContent = data.code;
    el.appendChild(code);
  }
  if (data.help) {
    const help = document.createElement("p");
    help.className = "help";
    help.textContent = data.help;
    el.appendChild(help);
  }
}

function threadActions(id) {
  const section = document.getElementById("actions");
  const status = document.getElementById("action-status");
  const holder = document.getElementById("answer");
  const token = document.getElementById("token");
  const base = "/api/threads/" + encodeURIComponent(id);
  token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  token.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, token.value.trim()));
  document.getElementById("kill").addEventListener("click", () => {
    if (!window.confirm("Kill this thread? It is archived as killed; a running agent's result is not applied.")) return;
    status.textContent = "killing…";
    post(base + "/kill", {}).then((r) => {
      if (r.ok) status.textContent = "killed";
      else explain(status, r.data);
    });
  });
  const runButton = document.getElementById("run");
  const resumeButton = document.getElementById("resume");
  runButton.addEventListener("click", () => {
    status.textContent = "queueing…";
    post(base + "/run", {}).then((r) => {
      if (r.ok) status.textContent = r.data.queued ? "queued for the workers" : "the thread is done";
      else explain(status, r.data);
      refresh();
    });
  });
  resumeButton.addEventListener("click", () => {
    status.textContent = "resuming… (the step runs now)";
    resumeButton.disabled = true;
    post(base + "/resume", {}).then((r) => {
      resumeButton.disabled = false;
      if (r.ok) status.textContent = "resumed: step " + r.data.head;
      else explain(status, r.data);
      refresh();
    });
  });
  const fork = (step) => {
    status.textContent = "forking…";
    post(base + "/fork", { step: step }).then((r) => {
      if (!r.ok) {
        explain(status, r.data);
        return;
      }
      status.replaceChildren(document.createTextNode("forked from " + step + ": "));
      const a = document.createElement("a");
      a.id = "forked";
      a.href = "/threads/" + encodeURIComponent(r.data.thread);
      a.textContent = r.data.thread;
      status.appendChild(a);
    });
  };
  // What the form on the page answers ("" when there is none), so that a
  // refresh does not wipe what the person is typing.
  let shown = "";
  // One read at a time; a change seen during a read asks for one more, so
  // the last state is never missed.
  let reading = false;
  let again = false;
  const refresh = () => {
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    again = false;
    const done = () => {
      reading = false;
      if (again) refresh();
    };
    fetch(base, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((t) => {
        done();
        timeline(t, fork);
        const queued = t.run && t.run.state !== "failed";
        runButton.hidden = t.done || queued || !!t.waiting;
        resumeButton.hidden = t.done || !(t.waiting && t.waiting.role === "$SUSPEND");
        if (t.done) {
          section.hidden = true;
          holder.replaceChildren();
          return;
        }
        const w = t.waiting;
        const key = w ? [t.head, w.role, w.answer].join(" ") : "";
        if (key === shown) return;
        shown = key;
        holder.replaceChildren();
        if (!w) return;
        if (w.role === "$SUSPEND") {
          holder.appendChild(paragraph("note", "Suspended: “resume” runs one step from $START's resume route (as `uwf thread resume " + id + "`). " + w.prompt));
        } else if (w.outputSchema !== undefined) {
          holder.appendChild(answerForm(base, w, status));
        } else {
          const p = paragraph("note", "Role " + w.role + " waits on child thread ");
          const a = document.createElement("a");
          a.href = "/threads/" + encodeURIComponent(w.answer);
          a.textContent = w.answer;
          p.appendChild(a);
          p.appendChild(document.createTextNode(": answer there."));
          holder.appendChild(p);
        }
      })
      .catch(done);
  };
  refresh();
  return { refresh: refresh };
}

// The timeline of a thread (docs/serve.md, "The timeline"): each step with
// its agent, when it landed, how long it took, the attempts that failed
// before it, its tokens and cost where the agent reports them, its full
// input, and a button to fork a new thread from it.
function duration(ms) {
  if (typeof ms !== "number") return "";
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function usageText(u) {
  if (!u) return "";
  const parts = [];
  if (typeof u.tokens === "number") parts.push(u.tokens + " tokens");
  if (typeof u.costUsd === "number") parts.push("$" + u.costUsd.toFixed(4));
  return parts.join(" · ");
}

function timeline(t, fork) {
  const body = document.getElementById("steps");
  if (!body || !Array.isArray(t.steps)) return;
  // Drawn again only when something changed: an open input stays open.
  const key = [t.head, t.steps.length, (t.attempts || []).length, t.state].join(" ");
  if (body.dataset.key === key) return;
  body.dataset.key = key;
  const rows = document.createDocumentFragment();
  t.steps.forEach((s, i) => {
    const tr = document.createElement("tr");
    tr.dataset.hash = s.hash;
    cell(tr, i === 0 ? "start" : String(i));
    cell(tr, i === 0 ? "$START" : s.role);
    cell(tr, s.agent || "");
    cell(tr, typeof s.timestamp === "number" ? new Date(s.timestamp).toLocaleString() : "");
    cell(tr, duration(s.durationMs), "took");
    const failed = cell(tr, "", "failed");
    for (const a of s.failedAttempts || []) {
      failed.appendChild(paragraph("attempt", "#" + a.attempt + " " + (a.agent || "") + ": " + (a.reason || "") + (a.durationMs != null ? " (" + duration(a.durationMs) + ")" : "")));
    }
    cell(tr, usageText(s.usage), "usage");
    const td = document.createElement("td");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "fork";
    b.textContent = "fork from here";
    b.title = "a new thread whose head is this node (uwf thread fork " + s.hash + ")";
    b.addEventListener("click", () => fork(s.hash));
    td.appendChild(b);
    tr.appendChild(td);
    rows.appendChild(tr);
    // The task of the start; a step's whole input is read when opened.
    const more = document.createElement("tr");
    more.className = "input";
    const cellAll = document.createElement("td");
    cellAll.colSpan = 8;
    const d = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = i === 0 ? "the task" : "the input " + s.role + " was given";
    const pre = document.createElement("pre");
    d.appendChild(summary);
    d.appendChild(pre);
    if (i === 0) {
      pre.textContent = s.prompt;
    } else {
      d.addEventListener("toggle", () => {
        if (!d.open || pre.dataset.loaded) return;
        pre.textContent = "…";
        const url = "/api/threads/" + encodeURIComponent(t.thread) + "/steps/" + encodeURIComponent(s.hash) + "/input";
        fetch(url, { credentials: "same-origin" })
          .then((r) => r.json().then((data) => ({ ok: r.ok, data: data })))
          .then(({ ok, data }) => {
            pre.dataset.loaded = "1";
            pre.textContent = ok ? data.input : "cannot rebuild it: " + data.error;
          })
          .catch(() => {
            pre.textContent = "cannot read it";
          });
      });
    }
    cellAll.appendChild(d);
    more.appendChild(cellAll);
    rows.appendChild(more);
  });
  // The attempts of the step still to come (failed at the current head).
  const pending = (t.attempts || []).filter((a) => a.head === t.head);
  if (pending.length) {
    const tr = document.createElement("tr");
    tr.className = "pending";
    cell(tr, "next");
    cell(tr, pending[0].role);
    cell(tr, "");
    cell(tr, "");
    cell(tr, "");
    const failed = cell(tr, "", "failed");
    for (const a of pending) failed.appendChild(paragraph("attempt", "#" + a.attempt + " " + (a.agent || "") + ": " + (a.reason || "")));
    cell(tr, "");
    cell(tr, "");
    rows.appendChild(tr);
  }
  body.replaceChildren(rows);
  const totals = document.getElementById("totals");
  const u = t.usage || {};
  const parts = [];
  if (typeof t.elapsedMs === "number") parts.push("steps took " + duration(t.elapsedMs) + " in all");
  if (typeof u.tokens === "number") parts.push(u.tokens + " tokens");
  if (typeof u.costUsd === "number") parts.push("$" + u.costUsd.toFixed(4));
  totals.textContent = parts.join(" · ");
}

function paragraph(cls, text) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  return p;
}

// ---------------------------------------------------------------------------
// The answer form, generated from the role's outputSchema. An object schema
// with properties gets one field per property; a property, or a whole schema,
// that no field fits is typed as JSON. The browser checks what the form
// states (required, numbers, bounds, lengths, JSON syntax); the server checks
// the whole schema again and its refusal is shown under the form.

function scalar(v) {
  return v === null || ["string", "number", "boolean"].includes(typeof v);
}

// How a property is entered.
function kindOf(p) {
  if (!p || typeof p !== "object") return "json";
  if (Array.isArray(p.enum) && p.enum.length > 0 && p.enum.every(scalar)) return "enum";
  switch (p.type) {
    case "string":
      return typeof p.maxLength === "number" && p.maxLength <= 200 ? "line" : "text";
    case "boolean":
      return "boolean";
    case "integer":
    case "number":
      return p.type;
    default:
      return "json";
  }
}

function fieldsOf(schema) {
  if (!schema || typeof schema !== "object" || schema.type !== "object") return null;
  const props = schema.properties;
  if (!props || typeof props !== "object" || Array.isArray(props)) return null;
  const names = Object.keys(props);
  return names.length ? names.map((n) => [n, props[n]]) : null;
}

// A JSON field: invalid (for the browser's check) while it does not parse,
// or, with `object`, while it is not an object.
function jsonControl(area, object) {
  const check = () => {
    const text = area.value.trim();
    let msg = "";
    if (text) {
      try {
        const v = JSON.parse(text);
        if (object && (v === null || typeof v !== "object" || Array.isArray(v))) msg = "the answer must be a JSON object";
      } catch (e) {
        msg = "not JSON: " + e.message;
      }
    }
    area.setCustomValidity(msg);
  };
  area.addEventListener("input", check);
  check();
  return area;
}

function control(name, p, kind, required) {
  let el;
  switch (kind) {
    case "enum": {
      el = document.createElement("select");
      if (!required) el.appendChild(new Option("", ""));
      else el.appendChild(new Option("choose…", ""));
      p.enum.forEach((v, i) => el.appendChild(new Option(String(v), String(i))));
      break;
    }
    case "boolean":
      el = document.createElement("input");
      el.type = "checkbox";
      el.checked = p.default === true;
      el.name = name;
      return el;
    case "integer":
    case "number":
      el = document.createElement("input");
      el.type = "number";
      el.step = kind === "integer" ? "1" : "any";
      if (typeof p.minimum === "number") el.min = String(p.minimum);
      if (typeof p.maximum === "number") el.max = String(p.maximum);
      break;
    case "line":
      el = document.createElement("input");
      el.type = "text";
      break;
    case "text":
      el = document.createElement("textarea");
      el.rows = 3;
      break;
    default:
      el = jsonControl(document.createElement("textarea"), false);
      el.rows = 2;
      el.className = "json";
      el.placeholder = "JSON";
  }
  if (kind === "line" || kind === "text") {
    if (typeof p.minLength === "number") el.minLength = p.minLength;
    if (typeof p.maxLength === "number") el.maxLength = p.maxLength;
  }
  if (required) el.required = true;
  if (p && p.default !== undefined && kind !== "enum" && kind !== "json") el.value = String(p.default);
  el.name = name;
  return el;
}

// The field's value, or undefined to leave the property out.
function valueOf(el, kind, p) {
  switch (kind) {
    case "enum":
      return el.value === "" ? undefined : p.enum[Number(el.value)];
    case "boolean":
      return el.checked;
    case "integer":
    case "number":
      return el.value === "" ? undefined : Number(el.value);
    case "line":
    case "text":
      return el.value === "" && !el.required ? undefined : el.value;
    default:
      return el.value.trim() === "" ? undefined : JSON.parse(el.value);
  }
}

// Marks the fields whose property the server's refusal names by its path
// ("at /labels/1: …", docs/serve.md).
function markRefused(form, text) {
  form.querySelectorAll(".field[data-name]").forEach((row) => {
    const at = "at /" + row.dataset.name.replace(/~/g, "~0").replace(/\//g, "~1");
    row.classList.toggle("refused", text.includes(at + ":") || text.includes(at + "/"));
  });
}

function answerForm(base, waiting, status) {
  const schema = waiting.outputSchema;
  const form = document.createElement("form");
  form.id = "answer-form";
  form.className = "answer";
  const legend = document.createElement("h2");
  legend.textContent = "Answer as " + waiting.role;
  form.appendChild(legend);
  if (waiting.prompt) form.appendChild(paragraph("prompt", waiting.prompt));
  const required = new Set(Array.isArray(schema && schema.required) ? schema.required : []);
  const fields = fieldsOf(schema);
  const read = [];
  const addRow = (labelText, el, isRequired, description, name) => {
    const row = document.createElement("div");
    row.className = "field";
    if (name !== undefined) row.dataset.name = name;
    const label = document.createElement("label");
    label.textContent = labelText;
    if (isRequired) {
      const mark = document.createElement("span");
      mark.className = "required";
      mark.textContent = " *";
      mark.title = "required";
      label.appendChild(mark);
    }
    el.id = "field-" + labelText.replace(/[^A-Za-z0-9_-]/g, "_");
    label.htmlFor = el.id;
    row.appendChild(label);
    row.appendChild(el);
    if (description) row.appendChild(paragraph("hint", description));
    form.appendChild(row);
  };
  if (fields) {
    for (const [name, p] of fields) {
      const kind = kindOf(p);
      const isRequired = required.has(name);
      const el = control(name, p, kind, isRequired);
      el.dataset.kind = kind;
      let hint = p && typeof p.description === "string" ? p.description : "";
      if (kind === "json") hint = ["JSON", p && p.type ? "(" + [].concat(p.type).join(" or ") + ")" : "", hint].join(" ").trim();
      addRow(name, el, isRequired, hint, name);
      read.push((out) => {
        const v = valueOf(el, kind, p);
        if (v !== undefined) out[name] = v;
      });
    }
  } else {
    const area = jsonControl(document.createElement("textarea"), true);
    area.rows = 6;
    area.className = "json";
    area.required = true;
    area.value = "{}";
    area.dataset.kind = "json";
    addRow("output (JSON)", area, true, "");
    read.push((out) => Object.assign(out, JSON.parse(area.value)));
  }
  const who = document.createElement("input");
  who.type = "text";
  who.placeholder = "web";
  addRow("answered by", who, false, "");
  const submit = document.createElement("button");
  submit.type = "submit";
  submit.id = "answer-submit";
  submit.textContent = "answer";
  form.appendChild(submit);
  const errors = document.createElement("div");
  errors.id = "answer-errors";
  errors.className = "errors";
  errors.setAttribute("role", "alert");
  form.appendChild(errors);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    // The browser has run its checks before this event; this is a guard
    // for a form submitted by script.
    if (!form.checkValidity()) {
      form.reportValidity();
      return;
    }
    const output = {};
    read.forEach((f) => f(output));
    const body = { output: output, role: waiting.role };
    if (who.value.trim()) body.as = who.value.trim();
    errors.replaceChildren();
    submit.disabled = true;
    post(base + "/answer", body).then((r) => {
      submit.disabled = false;
      if (r.ok) {
        status.textContent = "answered as " + waiting.role + ": step " + r.data.head;
      } else {
        explain(errors, r.data);
        markRefused(form, String(r.data.error || ""));
      }
    });
  });
  return form;
}

// ---------------------------------------------------------------------------
// The list page's start form: a registered workflow and a task; "queue it"
// also queues the new thread for the workers (as `uwf thread run --detach`).

function startForm() {
  const form = document.getElementById("start-form");
  const select = document.getElementById("start-workflow");
  const errors = document.getElementById("start-errors");
  const token = document.getElementById("token");
  token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  token.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, token.value.trim()));
  fetch("/api/workflows", { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
    .then((data) => {
      select.replaceChildren(new Option("choose…", ""));
      for (const w of data.workflows) select.appendChild(new Option(w.name, w.name));
    })
    .catch(() => {});
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    errors.replaceChildren();
    const body = {
      workflow: select.value,
      prompt: document.getElementById("start-prompt").value,
      run: document.getElementById("start-run").checked,
    };
    post("/api/threads", body).then((r) => {
      if (r.ok) window.location.href = "/threads/" + encodeURIComponent(r.data.thread);
      else explain(errors, r.data);
    });
  });
}

// The run queue of `uwf worker`, refreshed with the list.
function time(ms) {
  return typeof ms === "number" ? new Date(ms).toLocaleTimeString() : "";
}

function refreshQueue() {
  const note = document.getElementById("queue-note");
  fetch("/api/runs", { credentials: "same-origin" })
    .then((r) => r.json().then((data) => ({ ok: r.ok, data: data })))
    .then(({ ok, data }) => {
      const body = document.getElementById("runs");
      const workers = document.getElementById("workers");
      if (!ok) {
        note.textContent = data.error || "no run queue";
        body.replaceChildren();
        workers.replaceChildren();
        return;
      }
      const counts = Object.entries(data.counts).map(([k, n]) => n + " " + k);
      note.textContent = data.runs.length ? counts.join(" · ") : "nothing queued";
      const rows = document.createDocumentFragment();
      for (const r of data.runs) {
        const tr = document.createElement("tr");
        threadCell(tr, r.thread);
        cell(tr, r.workflow);
        cell(tr, r.state, "state state-" + String(r.state).replace(/[^a-z]/g, ""));
        cell(tr, r.worker || "");
        cell(tr, r.state === "failed" ? time(r.failedAt) : time(r.leaseUntil));
        cell(tr, r.claims);
        cell(tr, r.error || "", "error");
        rows.appendChild(tr);
      }
      body.replaceChildren(rows);
      const items = document.createDocumentFragment();
      for (const w of data.workers) {
        const li = document.createElement("li");
        li.textContent = w.worker + ": " + w.threads.length + " run(s), lease until " + time(w.leaseUntil);
        items.appendChild(li);
      }
      workers.replaceChildren(items);
    })
    .catch(() => {});
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "list") {
    const select = document.getElementById("state");
    select.addEventListener("change", () => select.form.submit());
    startForm();
    refreshQueue();
    setInterval(refreshList, 2000);
    setInterval(refreshQueue, 2000);
  } else if (page === "thread") {
    followThread(document.body.dataset.thread);
  }
});
