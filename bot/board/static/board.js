// The board's page: reads /api/*, listens to the event streams, acts with the session's CSRF
// token. Inside Telegram (a Mini App) it signs in with the launch's initData and follows
// Telegram's theme and back button, without Telegram's script (no CDN: everything is served
// by the bot).
"use strict";

const state = { token: sessionStorage.getItem("board-token"), csrf: null, texts: {}, stream: null };
const main = document.getElementById("main");
const tg = telegramLaunch();

function t(key, params) {
  let text = state.texts[key] || key;
  for (const [k, v] of Object.entries(params || {})) text = text.split("{" + k + "}").join(v);
  return text;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// -- Telegram Mini App ----------------------------------------------------------------------
function telegramLaunch() {
  const params = new URLSearchParams(location.hash.slice(1));
  const initData = params.get("tgWebAppData");
  if (!initData) return null;
  let theme = {};
  try { theme = JSON.parse(params.get("tgWebAppThemeParams") || "{}"); } catch (e) { theme = {}; }
  const css = { bg_color: "--bg", text_color: "--fg", hint_color: "--hint", button_color: "--accent",
    button_text_color: "--accent-fg", secondary_bg_color: "--card" };
  for (const [k, v] of Object.entries(css)) if (theme[k]) document.documentElement.style.setProperty(v, theme[k]);
  if (theme.bg_color && luminance(theme.bg_color) < 0.4) document.documentElement.dataset.theme = "dark";
  const handlers = {};
  const receive = (type, data) => (handlers[type] || []).forEach((f) => f(data));
  window.Telegram = { WebView: { receiveEvent: receive } };
  window.addEventListener("message", (e) => {
    try { const m = JSON.parse(e.data); if (m.eventType) receive(m.eventType, m.eventData); } catch (err) { /* not ours */ }
  });
  const post = (type, data) => {
    const body = JSON.stringify(data || {});
    if (window.TelegramWebviewProxy) window.TelegramWebviewProxy.postEvent(type, body);
    else window.parent.postMessage(JSON.stringify({ eventType: type, eventData: data || {} }), "*");
  };
  post("web_app_ready");
  post("web_app_expand");
  const on = (type, f) => (handlers[type] = [...(handlers[type] || []), f]);
  const version = (params.get("tgWebAppVersion") || "0").split(".").map(Number);
  const popups = version[0] > 6 || (version[0] === 6 && version[1] >= 2);  // Bot API 6.2
  let answered = null;  // the open popup's resolver: one popup at a time
  on("popup_closed", (data) => { const done = answered; answered = null; if (done) done(data && data.button_id === "ok"); });
  // Telegram's own confirmation (what Telegram.WebApp.showConfirm sends): OK and Cancel
  const confirmed = (text) => new Promise((resolve) => {
    if (answered) answered(false);
    answered = resolve;
    post("web_app_open_popup", { message: text.slice(0, 256),
      buttons: [{ id: "ok", type: "ok" }, { id: "cancel", type: "cancel" }] });
  });
  return { initData, post, on, confirm: popups ? confirmed : null };
}

// A yes/no question before an action that cannot be undone: Telegram's popup inside the Mini
// App, the browser's own dialog outside it.
function ask(text) {
  return tg && tg.confirm ? tg.confirm(text) : Promise.resolve(confirm(text));
}

function luminance(hex) {
  const n = parseInt(hex.replace("#", ""), 16);
  return (0.299 * ((n >> 16) & 255) + 0.587 * ((n >> 8) & 255) + 0.114 * (n & 255)) / 255;
}

// -- the API --------------------------------------------------------------------------------
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h.Authorization = "Bearer " + state.token;
  if (state.csrf) h["X-CSRF-Token"] = state.csrf;
  return h;
}

async function api(path, body) {
  const init = { credentials: "same-origin", headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) { init.method = "POST"; init.body = JSON.stringify(body); }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw Object.assign(new Error(data.text || data.error || response.status), { status: response.status });
  return data;
}

// Server-sent events over fetch (EventSource cannot send the Mini App's Authorization header).
function listen(path, handlers) {
  const controller = new AbortController();
  let stopped = false;
  const run = async () => {
    while (!stopped) {
      try {
        const response = await fetch(typeof path === "function" ? path() : path,
          { credentials: "same-origin", headers: headers(), signal: controller.signal });
        if (response.status === 401) return signIn();
        live(true);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const chunk = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            let event = "message", data = "";
            for (const line of chunk.split("\n")) {
              if (line.startsWith("event: ")) event = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
            }
            if (data && handlers[event]) handlers[event](JSON.parse(data));
          }
        }
      } catch (e) {
        if (stopped) return;
      }
      live(false);
      await new Promise((r) => setTimeout(r, 1000));
    }
  };
  run();
  return () => { stopped = true; controller.abort(); };
}

function live(on) {
  document.getElementById("live").textContent = on ? "● " + t("live") : t("offline");
}

function toast(text) {
  const box = document.getElementById("toast");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), 3000);
}

async function act(path, body) {
  try {
    const done = await api(path, body || {});
    toast(done.text || t("done_toast"));
    return done;
  } catch (e) {
    toast(e.message);
    return null;
  }
}

// -- pages ----------------------------------------------------------------------------------
function signIn() {  // the shell carries the sign-in hint in the browser's language
  const hint = document.getElementById("signin") || el("p", { class: "hint", id: "signin" }, t("signin_needed"));
  hint.hidden = false;
  main.replaceChildren(hint);
}

function badgeText(row) {  // what it waits for, named as in the chat; else its status
  return row.wait_text || row.status_text;
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 90) return Math.round(s) + "s";
  if (s < 5400) return Math.round(s / 60) + "m";
  if (s < 129600) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function usd(text) { return text || "–"; }  // the server writes amounts as the chat does

function taskRow(row) {  // a sub-task stands under its parent, indented by its depth (CSS)
  const tree = row.depth ? " sub d" + Math.min(row.depth, 3) : "";
  return el("a", { class: "task" + tree, href: "/tasks/" + row.id, "data-id": row.id, onclick: go },
    el("div", { class: "title" }, el("span", { class: "badge " + row.badge }, badgeText(row)),
      row.worktree === "merged" || row.worktree === "discarded" ? el("span", { class: "badge " + row.worktree }, t(row.worktree)) : null,
      row.label, " · ", row.title),
    el("div", { class: "meta" }, [row.engine, row.model, row.mode, usd(row.cost_text), age(row.created_at), row.host && "📍 " + row.host].filter(Boolean).join(" · ")),
    el("div", { class: "meta" }, row.cwd));
}

function holdRow(row) {  // a task held by its preflight: its message and the chat's choices
  const choose = (choice) => () => act("/api/holds/" + row.hold, { choice });
  const buttons = row.choices.map((c) => el("button",
    { class: c === row.choices[row.choices.length - 1] ? "danger" : "secondary", "data-choice": c.choice, onclick: choose(c.choice) }, c.text));
  return el("div", { class: "task held", "data-hold": row.hold },
    el("div", { class: "title" }, el("span", { class: "badge " + row.badge }, badgeText(row)), row.title),
    el("div", { class: "goal meta" }, row.text.split("\n").slice(1).join("\n").trim()),  // the badge says the first line
    el("div", { class: "row" }, buttons));
}

function hostCard(h) {  // the lines /hosts says of it, in the reader's language
  return el("div", { class: "host " + (h.online ? "online" : "offline"), "data-host": h.host },
    el("div", { class: "title" }, h.lines[0]), h.lines.slice(1).map((line) => el("div", { class: "meta" }, line)));
}

function watchHosts(box) {  // asked again every half heartbeat while the list is shown
  const poll = async () => {
    let data = null;
    try { data = await api("/api/hosts"); } catch (e) { data = null; }
    if (!box.isConnected) return;
    if (data) box.replaceChildren(...(data.hosts.length ? [el("h2", {}, data.title), data.hosts.map(hostCard)].flat() : []));
    if (data && !data.every_s) return;  // one process: no hosts to watch
    state.hosts = setTimeout(poll, data ? data.every_s * 1000 : 2000);
  };
  clearTimeout(state.hosts);
  poll();
}

function listPage() {
  document.title = t("title");
  const filter = el("select", { "aria-label": t("filter") },
    el("option", { value: "all" }, t("all")), el("option", { value: "active" }, t("active")),
    el("option", { value: "finished" }, t("finished")));
  const archived = el("input", { type: "checkbox", id: "archived" });
  const list = el("div", { id: "tasks" });
  const hosts = el("section", { id: "hosts" });
  let rows = [];
  const draw = () => {
    const shown = rows.filter((r) => filter.value === "all" || (filter.value === "active") === r.active);
    const drawn = (r) => (r.hold ? holdRow(r) : taskRow(r));
    list.replaceChildren(...(shown.length ? shown.map(drawn) : [el("p", { class: "hint" }, t("empty"))]));
  };
  filter.addEventListener("change", draw);
  main.replaceChildren(el("h1", {}, t("tasks")),
    el("div", { class: "controls" }, filter, el("label", {}, archived, " ", t("show_archived"))), list, hosts);
  watchHosts(hosts);
  const open = () => {
    if (state.stream) state.stream();
    state.stream = listen("/api/stream" + (archived.checked ? "?archived=1" : ""),
      { tasks: (data) => { rows = data.tasks; draw(); } });
  };
  archived.addEventListener("change", open);
  open();
}

function transcriptItem(item, tools) {
  if (item.kind === "result") {
    const tool = tools.get(item.tool);
    const pre = el("pre", {}, item.output || t("no_output"));
    if (tool) { tool.append(pre); if (item.error) tool.parentElement.classList.add("error"); return null; }
    return el("div", { class: "item tool" + (item.error ? " error" : "") }, pre);
  }
  if (item.kind === "tool") {
    // folded: its one-line summary; unfolded: its whole input, then its output
    const body = el("div", { "data-tool": item.tool }, el("pre", { class: "input" }, item.detail || item.input));
    tools.set(item.tool, body);
    return el("details", { class: "item tool" }, el("summary", {}, item.name + ": " + item.input.split("\n")[0].slice(0, 160)), body);
  }
  if (item.kind === "text") {
    return el("div", { class: "item text md-body" }, MD.render(item.text));
  }
  if (item.kind === "said") return el("div", { class: "item said" }, (item.steered ? "➡️ " : "↪️ ") + item.text);
  if (item.kind === "note") return el("div", { class: "item note" + (item.urgent ? " urgent" : "") }, (item.urgent ? "📣❗ " : "📣 ") + item.text);
  if (item.kind === "end") return el("div", { class: "item end" + (item.error ? " error" : "") }, item.error ? "✖ " + item.text : "✔");
  return el("div", { class: "item " + item.kind }, "⟳ " + item.text);
}

function diffFile(file) {
  // coloured in the language of its extension (static/syntax.js: DOM nodes, never HTML),
  // when first unfolded: a large diff costs nothing until it is read
  const pre = el("pre", { class: "diff" });
  const mark = file.new ? " (" + t("new_file") + ")" : file.deleted ? " (" + t("deleted_file") + ")" : "";
  const box = el("details", { class: "card file", "data-path": file.path },
    el("summary", {}, file.path + mark + "  +" + file.added + " −" + file.removed), pre);
  box.addEventListener("toggle", () => {
    if (box.open && !pre.firstChild) pre.append(SYNTAX.diff(file.patch, file.path));
  });
  return box;
}

function pendingCard(q, taskId) {
  // an approval is answered in the desk's words (allow, deny, always): "always" in one step,
  // its rule shown on the card and confirmed before it goes
  const answer = (body) => async () => { await act("/api/tasks/" + taskId + "/answer", Object.assign({ qid: q.id }, body)); };
  const buttons = q.kind === "approval"
    ? [el("button", { onclick: answer({ answer: "allow" }), "data-answer": "allow" }, t("allow")),
       el("button", { class: "secondary", onclick: answer({ answer: "deny" }), "data-answer": "deny" }, t("deny")),
       el("button", { class: "secondary", "data-answer": "always",
         onclick: async () => (await ask(t("always_confirm"))) && answer({ answer: "always" })() }, t("always"))]
    : q.options.map((o, i) => el("button", { class: "secondary", "data-option": i, onclick: answer({ option: i }) },
        (q.selected.includes(i) ? "✓ " : "") + o))
      .concat(q.multi ? [el("button", { "data-option": q.done, onclick: answer({ option: q.done }) }, t("done_toast"))] : []);
  const rule = q.kind === "approval" && q.rule ? el("div", { class: "meta rule" }, t("always_rule"), " ", el("code", {}, q.rule)) : null;
  return el("div", { class: "card pending", "data-qid": q.id }, el("div", { class: "goal" }, q.text), rule, el("div", { class: "row" }, buttons));
}

function followupControls(task, followup) {
  // while a turn runs, a follow-up goes into it (Steer now) or after it (Queue), as a reply
  const send = (body) => async () => {
    if (followup.value.trim() && await act("/api/tasks/" + task.id + "/followup", Object.assign({ prompt: followup.value }, body))) followup.value = "";
  };
  if (!task.running) return [el("button", { id: "send", onclick: send({}) }, t("send"))];
  return [el("button", { id: "steer", onclick: send({ steer: true }) }, t("steer_now")),
    el("button", { class: "secondary", id: "queue", onclick: send({ steer: false }) }, t("queue"))];
}

function taskHeader(page, box) {
  const task = page.task;
  document.title = task.label;
  const followup = el("textarea", { id: "followup", placeholder: t("followup_label") });
  const typed = box.querySelector("#followup");
  if (typed) followup.value = typed.value;  // a state change redraws the header, not the draft
  const controls = followupControls(task, followup);
  if (task.active) controls.push(el("button", { class: "danger", id: "cancel", onclick: () => act("/api/tasks/" + task.id + "/cancel") }, t("cancel")));
  const tree = page.worktree;  // Merge and Discard only while its worktree holds work
  if (tree && tree.changes && !task.active) {
    controls.push(el("button", { class: "secondary", id: "merge", onclick: () => act("/api/tasks/" + task.id + "/merge") }, t("merge")));
    controls.push(el("button", { class: "danger", id: "discard", onclick: async () => (await ask(t("discard_confirm"))) && act("/api/tasks/" + task.id + "/discard", { confirmed: true }) }, t("discard")));
    controls.push(el("button", { class: "secondary", id: "push", onclick: () => act("/api/tasks/" + task.id + "/push") }, t("push")));
    controls.push(el("button", { class: "secondary", id: "open-pr", onclick: () => act("/api/tasks/" + task.id + "/open_pr") }, t("open_pr")));
  }
  const pr = page.pr;  // the pull request its card follows
  if (pr && /^https?:\/\//.test(pr.url)) controls.push(el("a", { id: "pr", href: pr.url, target: "_blank", rel: "noopener" }, "PR #" + pr.number + " · " + (pr.state_text || pr.state) + " · " + (pr.checks_text || pr.checks)));
  const gone = tree && tree.state !== "active" ? el("div", { class: "meta", id: "worktree-state" }, t("worktree_" + tree.state, { base: tree.base })) : null;
  const turns = el("table", {}, el("tr", {}, el("th", {}, t("turn")), el("th", {}), el("th", {}, t("cost"))),
    page.turns.map((turn) => el("tr", {}, el("td", {}, "#" + turn.seq), el("td", {}, turn.status_text), el("td", {}, usd(turn.cost_text)))));
  const checks = page.checks.map((c) => el("details", { class: "card" },
    el("summary", {}, (c.passed ? "✔ " + t("passed") : "✖ " + t("failed")) + " · " + t("turn") + " " + c.turn + " · " + c.command),
    el("pre", {}, c.output || t("no_output"))));
  box.replaceChildren(...[
    el("h1", {}, el("span", { class: "badge " + task.badge }, badgeText(task)), task.label, " · ", task.title),
    el("div", { class: "meta" }, [t("engine") + ": " + task.engine, task.model && t("model") + ": " + task.model,
      t("mode") + ": " + task.mode, t("cost") + ": " + usd(task.cost_text), t("age") + ": " + age(task.created_at)].filter(Boolean).join(" · ")),
    el("div", { class: "meta" }, t("directory") + ": " + task.cwd + (task.host ? " · 📍 " + task.host : "")), gone,
    page.pending.length ? el("h2", {}, t("pending")) : null, page.pending.map((q) => pendingCard(q, task.id)),
    el("h2", {}, t("goal")), el("div", { class: "card goal" }, page.goal),
    el("div", { class: "card" }, followup, el("div", { class: "row" }, controls)),
    el("h2", {}, t("turns")), turns, checks.length ? el("h2", {}, t("checks")) : null, checks,
    (page.audit || []).length ? el("h2", {}, t("audit")) : null,
    (page.audit || []).length ? el("ul", { id: "audit" }, page.audit.map((a) => el("li", {}, age(a.at) + " · " + a.text))) : null,
  ].flat().filter(Boolean));
}

async function taskPage(id) {
  const head = el("section", { id: "head" });
  const transcript = el("div", { id: "transcript" });
  const diff = el("div", { id: "diff" });
  main.replaceChildren(el("a", { href: "/", onclick: go }, t("back")), head,
    el("h2", {}, t("transcript")), transcript, el("h2", {}, t("diff")), diff);
  if (tg) tg.post("web_app_setup_back_button", { is_visible: true });
  let cursor = 0;
  const tools = new Map();
  const add = (items) => {  // a page drawn off the document, then put in at once
    const fresh = document.createDocumentFragment();
    for (const item of items) {  // a tool's result folds into its call (``tools``, by id)
      const node = transcriptItem(item, tools);
      if (node) fresh.append(node);
    }
    transcript.append(fresh);
  };
  try {
    for (;;) {  // the transcript so far, a page at a time, then live from its cursor
      const early = cursor === 0 && state.early && state.early.id === id ? state.early.page : null;
      state.early = null;
      const page = await (early || api("/api/tasks/" + id + "/transcript?limit=5000&cursor=" + cursor));
      add(page.items);
      cursor = page.cursor;
      if (!page.more) break;
    }
    performance.mark("transcript-drawn");  // what bench/board.py times from navigation
  } catch (e) {
    if (e.status === 401) return signIn();
    main.replaceChildren(el("p", { class: "hint" }, e.message));
    return;
  }
  if (state.stream) state.stream();
  state.stream = listen(() => "/api/tasks/" + id + "/stream?cursor=" + cursor, {
    lines: (data) => { cursor = data.cursor; add(data.items); },
    task: (page) => taskHeader(page, head),
  });
  api("/api/tasks/" + id + "/diff").then((found) => {
    const note = found.scope === "checkout" && found.files.length ? el("p", { class: "hint", id: "diff-scope" }, t("diff_checkout")) : null;
    const none = found.note === "worktree.already_merged" ? t("worktree_merged", { base: found.base })
      : found.note === "worktree.already_discarded" ? t("worktree_discarded") : t("no_diff");
    diff.replaceChildren(...[note, ...(found.files.length ? found.files.map(diffFile) : [el("p", { class: "hint" }, none)])].filter(Boolean));
  }).catch(() => diff.replaceChildren(el("p", { class: "hint" }, t("no_diff"))));
}

function go(event) {
  if (event.metaKey || event.ctrlKey) return;
  event.preventDefault();
  history.pushState(null, "", event.currentTarget.getAttribute("href"));
  route();
}

function route() {
  clearTimeout(state.hosts);
  const match = location.pathname.match(/^\/tasks\/(\d+)$/);
  if (match) return taskPage(match[1]);
  if (tg) tg.post("web_app_setup_back_button", { is_visible: false });
  listPage();
}

async function start() {
  const opened = location.pathname.match(/^\/tasks\/(\d+)$/);
  if (opened && !tg) {  // its transcript asked for beside /api/me (a cookie is all it needs)
    const page = api("/api/tasks/" + opened[1] + "/transcript?limit=5000&cursor=0");
    page.catch(() => null);
    state.early = { id: opened[1], page };
  }
  try {
    let me;
    try {
      me = await api("/api/me");
    } catch (e) {
      if (e.status !== 401 || !tg) throw e;
      const form = new URLSearchParams({ initData: tg.initData });
      const signed = await fetch("/auth/webapp", { method: "POST", body: form });
      if (!signed.ok) throw e;
      state.token = (await signed.json()).token;
      sessionStorage.setItem("board-token", state.token);
      me = await api("/api/me");
    }
    state.csrf = me.csrf;
    state.texts = me.texts;
    document.documentElement.lang = me.locale;
    document.getElementById("home").textContent = t("title");
  } catch (e) {
    return signIn();
  }
  if (tg) tg.on("back_button_pressed", () => { history.pushState(null, "", "/"); route(); });
  if (tg) main.addEventListener("click", (event) => {  // the agent's links: Telegram opens them
    const a = event.target.closest(".md-body a[href]");
    if (!a) return;
    event.preventDefault();
    tg.post("web_app_open_link", { url: a.href });
  });
  window.addEventListener("popstate", route);
  route();
}

start();
