// uwf serve: keeps the list of threads and a thread's page up to date.
// Every text goes in through textContent, never as markup: outputs and
// tasks are untrusted (docs/serve.md, "Security").
"use strict";

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
        const td = document.createElement("td");
        const a = document.createElement("a");
        a.href = "/threads/" + encodeURIComponent(t.thread);
        const code = document.createElement("code");
        code.textContent = t.thread;
        a.appendChild(code);
        td.appendChild(a);
        tr.appendChild(td);
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

// A thread's page: server-sent events; the frame is reloaded when a step lands.
function followThread(id) {
  const events = document.getElementById("events");
  const state = document.getElementById("state");
  const view = document.getElementById("view");
  const source = new EventSource("/api/threads/" + encodeURIComponent(id) + "/events");
  const note = (text) => {
    const li = document.createElement("li");
    li.textContent = text;
    events.prepend(li);
  };
  source.addEventListener("step", (e) => {
    note(JSON.parse(e.data).text);
    view.src = view.src;
  });
  source.addEventListener("state", (e) => {
    const d = JSON.parse(e.data);
    state.textContent = d.state;
    if (d.done) {
      source.close();
      view.src = view.src;
    }
  });
  source.addEventListener("error", (e) => {
    if (e.data) note("error: " + JSON.parse(e.data).error);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "list") {
    const select = document.getElementById("state");
    select.addEventListener("change", () => select.form.submit());
    setInterval(refreshList, 2000);
  } else if (page === "thread") {
    followThread(document.body.dataset.thread);
  }
});
