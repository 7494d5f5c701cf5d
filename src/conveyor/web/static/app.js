// conveyor dashboard: keeps pages live and draws the overview charts. No build step, no
// dependencies; the page works without it (forms are plain POSTs), it is only nicer with it.
"use strict";

(function () {
  const live = document.getElementById("live");
  const SVGNS = "http://www.w3.org/2000/svg";

  // ---- relative times ---------------------------------------------------------------------
  function ago(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 86400) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }
  function ahead(seconds) {
    const s = Math.round(seconds);
    if (s < 60) return "in " + s + "s";
    if (s < 3600) return "in " + Math.floor(s / 60) + "m";
    return "in " + Math.floor(s / 3600) + "h";
  }
  function stampTimes(root) {
    const now = Date.now() / 1000;
    root.querySelectorAll("time[data-ts]").forEach(function (el) {
      const ts = parseFloat(el.dataset.ts);
      if (!el.title) el.title = el.textContent + " UTC";
      el.textContent = ts > now + 1 ? ahead(ts - now) : ago(now - ts);
    });
  }

  // ---- live region: re-fetch ?partial=1 and swap, keeping what the operator selected -------
  function partialUrl() {
    const url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    url.searchParams.delete("flash");
    return url.toString();
  }
  function refresh() {
    if (document.hidden || !live) return Promise.resolve();
    return fetch(partialUrl(), { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) return;
      return r.text().then(function (html) {
        const checked = new Set();
        live.querySelectorAll("input[type=checkbox][name=ids]:checked").forEach(function (c) {
          checked.add(c.value);
        });
        const open = [];
        live.querySelectorAll("details").forEach(function (d, i) { if (d.open) open.push(i); });
        live.innerHTML = html;
        live.querySelectorAll("input[type=checkbox][name=ids]").forEach(function (c) {
          c.checked = checked.has(c.value);
        });
        const details = live.querySelectorAll("details");
        open.forEach(function (i) { if (details[i]) details[i].open = true; });
        stampTimes(live);
      });
    }).catch(function () { /* the server restarts: try again on the next tick */ });
  }
  if (live) {
    const every = parseInt(live.dataset.refresh || "0", 10);
    if (every > 0) setInterval(refresh, every);
  }
  stampTimes(document);

  // ---- forms: confirmations and select-all (delegated, so swapped content works) -----------
  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    const question = form.dataset && form.dataset.confirm;
    if (question && !window.confirm(question)) ev.preventDefault();
  });
  document.addEventListener("change", function (ev) {
    const box = ev.target;
    if (!box.classList || !box.classList.contains("select-all")) return;
    const form = box.closest("form");
    form.querySelectorAll("input[type=checkbox][name=ids]").forEach(function (c) {
      c.checked = box.checked;
    });
  });

  // ---- charts --------------------------------------------------------------------------------
  const H = 160, PAD = 28;
  const palette = ["#2f6fde", "#d9822b", "#29a36a", "#9b59b6", "#c0392b", "#16a2b8", "#7f8c8d"];

  function el(name, attrs, text) {
    const node = document.createElementNS(SVGNS, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }
  // Lines of `points` values each, right-aligned (a short series is the newest part), scaled to
  // the largest value; `caption` labels the right end of the time axis.
  function draw(svg, series, unit, points, caption) {
    const W = svg.viewBox.baseVal.width || 600;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    let max = 1;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    max = Math.ceil(max);
    for (let i = 0; i <= 4; i++) {
      const y = PAD / 2 + (H - PAD) * i / 4;
      svg.appendChild(el("line", { x1: PAD + 8, x2: W, y1: y, y2: y, class: "grid" }));
      const label = (max * (4 - i) / 4);
      svg.appendChild(el("text", { x: 0, y: y + 4, class: "axis" },
        (label % 1 ? label.toFixed(1) : label) + (i === 0 ? unit : "")));
    }
    series.forEach(function (s) {
      if (s.values.length < 2) return;
      const step = (W - PAD - 8) / (points - 1);
      const x0 = W - step * (s.values.length - 1);
      const pts = s.values.map(function (v, i) {
        return (x0 + i * step).toFixed(1) + "," +
          (PAD / 2 + (H - PAD) * (1 - v / max)).toFixed(1);
      });
      svg.appendChild(el("polyline", { points: pts.join(" "), class: "line", stroke: s.color }));
    });
    svg.appendChild(el("text", { x: W - 4, y: H - 2, class: "axis end" }, caption));
  }

  // ---- the last day, per minute (/api/history), redrawn every 15 s and on a queue's pick -----
  const dayChart = document.getElementById("chart-history");
  const pick = document.getElementById("history-queue");
  const KIND_COLORS = { processed: "#29a36a", failed: "#d9822b", dead: "#c0392b",
    retried: "#2f6fde" };
  function pollDay() {
    const api = new URL(dayChart.getAttribute("data-api"), window.location.href);
    if (pick && pick.value) api.searchParams.set("queue", pick.value);
    return fetch(api.toString(), { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (day) {
      if (!day) return;
      draw(dayChart, Object.keys(KIND_COLORS).map(function (k) {
        return { values: day.series[k], color: KIND_COLORS[k] };
      }), "/min", day.minutes, "now · from " + Math.round(day.minutes / 60) + " h ago");
      dayChart.setAttribute("data-queue", day.queue || "");  // what is drawn (tests read it)
      dayChart.setAttribute("data-start", String(day.start));
      shown = day;
      if (hovered !== null) tip(hovered);
    }).catch(function () { /* keep the last picture */ });
  }
  // Hovering shows one minute's numbers: a cursor line and a line of text at the top.
  let shown = null, hovered = null;
  function tip(clientX) {
    hovered = clientX;
    if (!shown) return;
    const W = dayChart.viewBox.baseVal.width, step = (W - PAD - 8) / (shown.minutes - 1);
    const box = dayChart.getBoundingClientRect();
    // the right edge of the pointer's pixel: the chart's last pixel is the current minute
    const x = (clientX + 1 - box.left) * W / box.width;
    const i = Math.max(0, Math.min(shown.minutes - 1, Math.round((x - (W - step * (shown.minutes - 1))) / step)));
    const at = new Date((shown.start + 60 * i) * 1000).toISOString().slice(11, 16);
    const text = at + " UTC — " + Object.keys(KIND_COLORS).map(function (k) {
      return shown.series[k][i] + " " + k;
    }).join(", ");
    dayChart.querySelectorAll(".cursor, .tip").forEach(function (n) { n.remove(); });
    const cx = (W - step * (shown.minutes - 1) + i * step).toFixed(1);
    dayChart.appendChild(el("line", { x1: cx, x2: cx, y1: PAD / 2, y2: H - PAD / 2,
      class: "cursor" }));
    dayChart.appendChild(el("text", { x: W - 4, y: 10, class: "axis end tip" }, text));
  }
  if (dayChart) {
    pollDay();
    setInterval(pollDay, 15000);
    if (pick) pick.addEventListener("change", pollDay);
    dayChart.addEventListener("mousemove", function (ev) { tip(ev.clientX); });
    dayChart.addEventListener("mouseleave", function () {
      hovered = null;
      dayChart.querySelectorAll(".cursor, .tip").forEach(function (n) { n.remove(); });
    });
  }

  // ---- overview: throughput and queue sizes of the last 90 s (/api/stats every 1.5 s) -------
  const rateChart = document.getElementById("chart-rate");
  const queueChart = document.getElementById("chart-queues");
  if (!rateChart || !queueChart) return;
  const POINTS = 60;
  const history = [];  // {t, processed, failed, queues: {name: pending}}
  const RECENT = "last " + Math.round(POINTS * 1.5) + "s";

  function render() {
    const rates = [], fails = [];
    for (let i = 1; i < history.length; i++) {
      const dt = Math.max(history[i].t - history[i - 1].t, 0.001);
      rates.push(Math.max(0, (history[i].processed - history[i - 1].processed) / dt));
      fails.push(Math.max(0, (history[i].failed - history[i - 1].failed) / dt));
    }
    draw(rateChart, [{ values: rates, color: "#29a36a" }, { values: fails, color: "#c0392b" }],
      "/s", POINTS, RECENT);
    const names = Object.keys(history.length ? history[history.length - 1].queues : {}).sort();
    const legend = document.getElementById("chart-queues-legend");
    legend.textContent = "";
    const series = names.map(function (name, i) {
      const color = palette[i % palette.length];
      const key = document.createElement("span");
      key.className = "key";
      key.style.setProperty("--c", color);
      key.textContent = name;
      legend.appendChild(key);
      return { color: color, values: history.map(function (h) { return h.queues[name] || 0; }) };
    });
    draw(queueChart, series, "", POINTS, RECENT);
  }
  function poll() {
    // the stats address comes from the page, so the app works mounted under a prefix
    const api = new URL(document.body.getAttribute("data-api") || "/api/stats",
      window.location.href);
    fetch(api.toString(), { credentials: "same-origin" }).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (stats) {
      if (!stats) return;
      const queues = {};
      stats.queues.forEach(function (q) { queues[q.name] = q.pending; });
      history.push({ t: stats.now, processed: stats.totals.processed,
        failed: stats.totals.failed, queues: queues });
      while (history.length > POINTS) history.shift();
      render();
    }).catch(function () { /* keep the last picture */ });
  }
  poll();
  setInterval(poll, 1500);
})();
