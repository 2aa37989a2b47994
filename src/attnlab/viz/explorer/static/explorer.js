// attnlab attention explorer: head view, model view, matrix view and summaries.
// Hand-written, no libraries and no external resources. Works served (data fetched per
// layer from the JSON API) and as a self-contained file (data embedded in the page).
(function () {
  "use strict";
  const root = document.getElementById("attnlab");
  const $ = (id) => document.getElementById(id);
  const MODE = root.dataset.mode; // "server" or "file"
  const ROW = 18; // px per token in the head view
  const state = { ov: null, group: 0, layer: 0, head: 0, view: "head", enabled: [], focus: null,
                  embedded: null, layers: new Map(), timings: {} };
  window.attnlab = state; // for notebooks, tests and curious users

  // ---------------------------------------------------------------- data access
  function u16ToFloat(u16) {
    const out = new Float32Array(u16.length);
    for (let i = 0; i < u16.length; i++) out[i] = u16[i] / 65535;
    return out;
  }
  function decodeU16(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return u16ToFloat(new Uint16Array(bytes.buffer));
  }
  function decodeU8(b64) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return bytes;
  }
  async function api(path, body) {
    const response = await fetch(path, body === undefined ? {} : {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || ("HTTP " + response.status));
    return data;
  }
  function group() { return state.ov.groups[state.group]; }
  // "?id=...&group=..." naming a group of the current analysis, for the per-group requests.
  function groupQuery(g) {
    return "?id=" + encodeURIComponent(state.ov.id) + "&group=" + encodeURIComponent(g.name);
  }
  // Weights of one layer of the current group: Float32Array (heads * Lq * Lk).
  async function layerWeights(layer) {
    const g = group();
    const key = state.ov.id + "|" + g.name + "|" + layer;
    if (!state.layers.has(key)) {
      if (state.embedded) {
        state.layers.set(key, decodeU16(g.layer_data[layer]));
      } else {
        // Raw little-endian uint16 bytes: no base64 or JSON to build and parse.
        const response = await fetch("/api/layer.bin" + groupQuery(g) + "&layer=" + layer);
        if (!response.ok) throw new Error((await response.json()).error || ("HTTP " + response.status));
        const buffer = await response.arrayBuffer();
        if (buffer.byteLength !== 2 * g.heads * g.queries * g.keys) throw new Error("layer " + layer + ": " +
            buffer.byteLength + " bytes, expected " + 2 * g.heads * g.queries * g.keys);
        state.layers.set(key, u16ToFloat(new Uint16Array(buffer)));
      }
    }
    return state.layers.get(key);
  }

  // ---------------------------------------------------------------- helpers
  function headColour(h, n, alpha) {
    return "hsla(" + Math.round((h * 360) / n) + ",75%,42%," + (alpha === undefined ? 1 : alpha) + ")";
  }
  function status(text, isError) {
    const el = $("status");
    el.textContent = text;
    el.className = isError ? "error" : "muted";
  }
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }
  function make(tag, props, parent) {
    const el = document.createElement(tag);
    Object.assign(el, props || {});
    if (parent) parent.appendChild(el);
    return el;
  }

  // ---------------------------------------------------------------- controls
  function buildControls() {
    const g = group();
    clear($("groups"));
    state.ov.groups.forEach((gr, i) => {
      const b = make("button", { className: "tab" + (i === state.group ? " on" : ""), textContent: gr.name }, $("groups"));
      b.dataset.group = gr.name;
      b.onclick = () => { state.group = i; state.layer = Math.min(state.layer, group().layers - 1);
                          state.focus = null; buildControls(); render(); };
    });
    const layerSelect = $("layer");
    clear(layerSelect);
    for (let l = 0; l < g.layers; l++) make("option", { value: l, textContent: "layer " + (l + 1) }, layerSelect);
    layerSelect.value = state.layer;
    if (state.enabled.length !== g.heads) state.enabled = new Array(g.heads).fill(true);
    const heads = $("heads");
    clear(heads);
    for (let h = 0; h < g.heads; h++) {
      const label = make("label", { title: "head " + (h + 1) }, heads);
      const box = make("input", { type: "checkbox", checked: state.enabled[h] }, label);
      box.dataset.head = h;
      box.onchange = () => { state.enabled[h] = box.checked; render(); };
      make("span", { className: "swatch" }, label).style.background = headColour(h, g.heads);
      make("span", { textContent: String(h + 1) }, label);
    }
    const headSelect = $("head");
    clear(headSelect);
    for (let h = 0; h < g.heads; h++) make("option", { value: h, textContent: "head " + (h + 1) }, headSelect);
    headSelect.value = Math.min(state.head, g.heads - 1);
    for (const id of ["pair-q", "pair-k"]) {
      const sel = $(id);
      clear(sel);
      (id === "pair-q" ? g.query_tokens : g.key_tokens).forEach((t, i) =>
        make("option", { value: i, textContent: i + ": " + t }, sel));
    }
  }
  function showView(name) {
    state.view = name;
    for (const v of ["head", "model", "matrix", "summary"]) {
      $("view-" + v).classList.toggle("on", v === name);
      $("tab-" + v).classList.toggle("on", v === name);
    }
    render();
  }

  // ---------------------------------------------------------------- head view
  function buildTokenColumn(el, tokens, side) {
    clear(el);
    tokens.forEach((t, i) => {
      const d = make("div", { className: "tok", textContent: t }, el);
      d.dataset.index = i;
      d.dataset.side = side;
      d.onmouseenter = () => {
        state.focus = { side: side, index: i };
        drawHeadLines();
        if (side === "q" && $("image-panel").style.display !== "none") { $("image-query").value = i; renderImagePanel(); }
      };
      d.onmouseleave = () => { state.focus = null; drawHeadLines(); };
    });
  }
  let headData = null; // {layer, weights} of the head view
  async function renderHeadView() {
    const g = group();
    const t0 = performance.now();
    const weights = await layerWeights(state.layer);
    headData = { weights: weights, layer: state.layer, group: state.group };
    buildTokenColumn($("tokens-q"), g.query_tokens, "q");
    buildTokenColumn($("tokens-k"), g.key_tokens, "k");
    const canvas = $("head-canvas");
    const rows = Math.max(g.queries, g.keys);
    const ratio = window.devicePixelRatio || 1;
    canvas.style.width = "260px";
    canvas.style.height = rows * ROW + "px";
    canvas.width = Math.round(260 * ratio);
    canvas.height = Math.round(rows * ROW * ratio);
    drawHeadLines();
    state.timings.headDraw = performance.now() - t0;
  }
  function drawHeadLines() {
    if (!headData) return;
    const g = group();
    const canvas = $("head-canvas");
    const ctx = canvas.getContext("2d");
    const ratio = canvas.width / 260;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, 260, canvas.height / ratio);
    const Q = g.queries, K = g.keys, H = g.heads, w = headData.weights;
    const focus = state.focus;
    const threshold = focus ? 0.002 : 0.02;
    let drawn = 0;
    // One path per head and opacity bucket: thousands of lines in a few strokes.
    const BUCKETS = 10;
    for (let h = 0; h < H; h++) {
      if (!state.enabled[h]) continue;
      const paths = [];
      for (let b = 0; b < BUCKETS; b++) paths.push(new Path2D());
      const base = h * Q * K;
      const qFrom = focus && focus.side === "q" ? focus.index : 0;
      const qTo = focus && focus.side === "q" ? focus.index + 1 : Q;
      for (let q = qFrom; q < qTo; q++) {
        const y1 = q * ROW + ROW / 2;
        const kFrom = focus && focus.side === "k" ? focus.index : 0;
        const kTo = focus && focus.side === "k" ? focus.index + 1 : K;
        for (let k = kFrom; k < kTo; k++) {
          const v = w[base + q * K + k];
          if (v < threshold) continue;
          const b = Math.min(BUCKETS - 1, Math.floor(v * BUCKETS));
          paths[b].moveTo(0, y1);
          paths[b].lineTo(260, k * ROW + ROW / 2);
          drawn++;
        }
      }
      ctx.lineWidth = focus ? 2 : 1.5;
      for (let b = 0; b < BUCKETS; b++) {
        ctx.strokeStyle = headColour(h, H, (b + 0.5) / BUCKETS);
        ctx.stroke(paths[b]);
      }
    }
    canvas.dataset.lines = drawn;
    canvas.dataset.focus = focus ? focus.side + focus.index : "";
    for (const el of document.querySelectorAll("#view-head .tok")) {
      const on = focus && el.dataset.side === focus.side && Number(el.dataset.index) === focus.index;
      el.classList.toggle("focus", !!on);
    }
  }

  // ---------------------------------------------------------------- image panel
  // For a group whose keys are places in the analysed image (ViT patches, a captioner's
  // cells, sub-pixels), the chosen query's attention of this layer, averaged over the
  // ticked heads and summed per grid cell, drawn as a heat overlay over the image.
  const pictures = new Map(); // data URI -> loaded <img>
  function picture(src) {
    if (!pictures.has(src)) {
      pictures.set(src, new Promise((resolve, reject) => {
        const img = new Image();
        img.onload = () => resolve(img);
        img.onerror = () => reject(new Error("the image could not be shown"));
        img.src = src;
      }));
    }
    return pictures.get(src);
  }
  async function renderImagePanel() {
    const panel = $("image-panel"), g = group(), im = state.ov.image;
    if (!im || !g.key_cells) { panel.style.display = "none"; return; }
    panel.style.display = "";
    const select = $("image-query");
    const owner = state.ov.id + "|" + g.name;
    if (select.dataset.owner !== owner) {
      clear(select);
      g.query_tokens.forEach((t, i) => make("option", { value: i, textContent: i + ": " + t }, select));
      select.dataset.owner = owner;
    }
    const q = Math.min(Number(select.value || 0), g.queries - 1);
    const layer = state.layer;
    const [weights, img] = await Promise.all([layerWeights(layer), picture(im.src)]);
    const Q = g.queries, K = g.keys, heat = new Float32Array(im.rows * im.cols);
    let heads = 0;
    for (let h = 0; h < g.heads; h++) {
      if (!state.enabled[h]) continue;
      heads++;
      const base = h * Q * K + q * K;
      for (let k = 0; k < K; k++) {
        const cell = g.key_cells[k];
        if (cell) heat[cell[0] * im.cols + cell[1]] += weights[base + k];
      }
    }
    let peak = 0, total = 0;
    for (let i = 0; i < heat.length; i++) {
      heat[i] /= Math.max(heads, 1);
      total += heat[i];
      if (heat[i] > peak) peak = heat[i];
    }
    const canvas = $("image-canvas");
    const scale = Math.max(1, Math.floor(320 / Math.max(im.height, im.width)));
    canvas.width = im.width * scale;
    canvas.height = im.height * scale;
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    const cw = canvas.width / im.cols, ch = canvas.height / im.rows;
    for (let r = 0; r < im.rows; r++) {
      for (let c = 0; c < im.cols; c++) {
        const v = peak > 0 ? heat[r * im.cols + c] / peak : 0;
        ctx.fillStyle = "rgba(255,60,0," + (0.7 * v).toFixed(3) + ")";
        ctx.fillRect(c * cw, r * ch, cw, ch);
      }
    }
    const own = g.query_cells ? g.query_cells[q] : null; // the query's own place, outlined
    if (own) {
      ctx.strokeStyle = "#1e6bff";
      ctx.lineWidth = 2;
      ctx.strokeRect(own[1] * cw + 1, own[0] * ch + 1, cw - 2, ch - 2);
    }
    canvas.dataset.query = q;
    canvas.dataset.layer = layer;
    canvas.dataset.peak = peak.toFixed(5);
    $("image-caption").textContent = "layer " + (layer + 1) + ", " + heads + " head(s) averaged; " +
      (100 * total).toFixed(0) + "% of it on the image, brightest cell " + peak.toFixed(3);
  }

  // ---------------------------------------------------------------- model view
  async function renderModelView() {
    const g = group();
    if (!g.thumbnails) { // fetched when the model view first opens: the first drawing needs none
      g.thumbnails = await api("/api/thumbnails" + groupQuery(g));
    }
    const grid = $("model-grid");
    clear(grid);
    grid.style.gridTemplateColumns = "auto repeat(" + g.heads + ", auto)";
    const th = g.thumbnails, pixels = decodeU8(th.data), size = th.height * th.width;
    const scale = 72 / Math.max(th.height, th.width); // every thumbnail fits a 72-pixel box, pixels kept sharp
    make("div", { className: "lab" }, grid);
    for (let h = 0; h < g.heads; h++) make("div", { className: "lab", textContent: "head " + (h + 1) }, grid);
    for (let l = 0; l < g.layers; l++) {
      make("div", { className: "lab", textContent: "layer " + (l + 1) }, grid);
      for (let h = 0; h < g.heads; h++) {
        const c = make("canvas", { width: th.width, height: th.height, title: "layer " + (l + 1) + ", head " + (h + 1) +
                                   " — click to enlarge" }, grid);
        c.style.width = Math.round(th.width * scale) + "px";
        c.style.height = Math.round(th.height * scale) + "px";
        c.dataset.layer = l;
        c.dataset.head = h;
        const ctx = c.getContext("2d");
        const image = ctx.createImageData(th.width, th.height);
        const offset = (l * g.heads + h) * size;
        for (let i = 0; i < size; i++) {
          const v = pixels[offset + i] / 255;
          image.data[4 * i] = Math.round(255 - 212 * v);
          image.data[4 * i + 1] = Math.round(255 - 162 * v);
          image.data[4 * i + 2] = Math.round(255 - 100 * v);
          image.data[4 * i + 3] = 255;
        }
        ctx.putImageData(image, 0, 0);
        c.onclick = () => { state.layer = l; state.head = h; $("layer").value = l; $("head").value = h;
                            showView("matrix"); };
      }
    }
  }

  // ---------------------------------------------------------------- matrix view
  async function renderMatrixView() {
    const g = group();
    const weights = await layerWeights(state.layer);
    const Q = g.queries, K = g.keys, h = state.head;
    const cell = Math.max(2, Math.min(36, Math.floor(900 / Math.max(Q, K))));
    const labels = cell >= 12;
    const margin = labels ? 110 : 0;
    const canvas = $("matrix-canvas");
    canvas.width = margin + K * cell;
    canvas.height = margin + Q * cell;
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "white";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    const base = h * Q * K;
    let peak = 1e-9; // colours span 0 .. this head's largest weight, so diffuse heads show their shape too
    for (let i = base; i < base + Q * K; i++) if (weights[i] > peak) peak = weights[i];
    for (let q = 0; q < Q; q++) {
      for (let k = 0; k < K; k++) {
        const v = weights[base + q * K + k];
        const c = v / peak;
        ctx.fillStyle = "rgb(" + Math.round(255 - 212 * c) + "," + Math.round(255 - 162 * c) + "," +
                        Math.round(255 - 100 * c) + ")";
        ctx.fillRect(margin + k * cell, margin + q * cell, cell, cell);
        if (cell >= 30) {
          ctx.fillStyle = c > 0.55 ? "white" : "#333";
          ctx.font = "9px monospace";
          ctx.fillText(v.toFixed(2), margin + k * cell + 3, margin + q * cell + cell / 2 + 3);
        }
      }
    }
    if (labels) {
      ctx.fillStyle = "#222";
      ctx.font = Math.min(11, cell - 1) + "px monospace";
      ctx.textAlign = "right";
      g.query_tokens.forEach((t, q) => ctx.fillText(t.slice(0, 14), margin - 4, margin + q * cell + cell / 2 + 4));
      g.key_tokens.forEach((t, k) => {
        ctx.save();
        ctx.translate(margin + k * cell + cell / 2 + 4, margin - 4);
        ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left";
        ctx.fillText(t.slice(0, 14), 0, 0);
        ctx.restore();
      });
    }
    canvas.onmousemove = (event) => {
      const rect = canvas.getBoundingClientRect();
      const k = Math.floor((event.clientX - rect.left - margin) / cell);
      const q = Math.floor((event.clientY - rect.top - margin) / cell);
      if (q < 0 || k < 0 || q >= Q || k >= K) { $("matrix-value").textContent = ""; return; }
      $("matrix-value").textContent = "layer " + (state.layer + 1) + ", head " + (h + 1) + ": query " + q + " '" +
        g.query_tokens[q] + "' → key " + k + " '" + g.key_tokens[k] + "' = " + weights[base + q * K + k].toFixed(4);
    };
    $("matrix-title").textContent = g.name + " attention, layer " + (state.layer + 1) + ", head " + (h + 1) +
      " (rows: queries, columns: keys; darkest = " + peak.toFixed(3) + (cell >= 30 ? "" : "; hover for values") + ")";
  }

  // ---------------------------------------------------------------- summaries
  function summaryTable(el, title, values, max) {
    clear(el);
    make("caption", { textContent: title }, el);
    const head = make("tr", {}, el);
    make("th", { textContent: "" }, head);
    values[0].forEach((_, h) => make("th", { textContent: "h" + (h + 1) }, head));
    values.forEach((row, l) => {
      const tr = make("tr", {}, el);
      make("th", { textContent: "L" + (l + 1) }, tr);
      row.forEach((v) => {
        const td = make("td", { textContent: v.toFixed(2) }, tr);
        const a = max > 0 ? Math.min(1, v / max) : 0;
        td.style.background = "rgba(43,93,155," + (0.08 + 0.5 * a).toFixed(3) + ")";
      });
    });
  }
  async function renderSummary() {
    const g = group();
    if (!g.summaries) {
      g.summaries = await api("/api/summary" + groupQuery(g));
    }
    const s = g.summaries;
    summaryTable($("entropy-table"), "entropy per head (nats; uniform = " + s.max_entropy.toFixed(2) + ")",
                 s.entropy, s.max_entropy);
    const maxDistance = Math.max(...s.distance.flat(), 1e-9);
    summaryTable($("distance-table"), "mean attention distance (positions)", s.distance, maxDistance);
  }
  async function searchPair() {
    const g = group();
    const q = Number($("pair-q").value), k = Number($("pair-k").value);
    let heads;
    if (state.embedded) {
      heads = [];
      for (let l = 0; l < g.layers; l++) {
        const w = await layerWeights(l);
        for (let h = 0; h < g.heads; h++) {
          const base = h * g.queries * g.keys + q * g.keys;
          const v = w[base + k];
          let rank = 1;
          for (let j = 0; j < g.keys; j++) if (w[base + j] > v) rank++;
          heads.push({ layer: l, head: h, weight: v, rank: rank });
        }
      }
      heads.sort((a, b) => b.weight - a.weight);
      heads = heads.slice(0, 10);
    } else {
      heads = (await api("/api/pair" + groupQuery(g) + "&query=" + q + "&key=" + k)).heads;
    }
    const list = $("pair-results");
    clear(list);
    for (const r of heads) {
      const li = make("li", { textContent: "layer " + (r.layer + 1) + ", head " + (r.head + 1) + ": " +
        r.weight.toFixed(3) + (r.rank === 1 ? " (its strongest link)" : " (rank " + r.rank + ")") }, list);
      li.onclick = () => {
        state.layer = r.layer; state.enabled = state.enabled.map((_, h) => h === r.head);
        state.focus = { side: "q", index: q }; buildControls(); showView("head");
      };
    }
  }

  // ---------------------------------------------------------------- main loop
  async function render() {
    if (!state.ov) return;
    try {
      if (state.view === "head") await renderHeadView();
      else if (state.view === "model") await renderModelView();
      else if (state.view === "matrix") await renderMatrixView();
      else await renderSummary();
      await renderImagePanel();
      root.dataset.rendered = state.view;
    } catch (error) {
      status(String(error.message || error), true);
    }
  }
  function showOverview(ov) {
    state.ov = ov;
    state.group = Math.min(state.group, ov.groups.length - 1);
    state.layer = Math.min(state.layer, ov.groups[state.group].layers - 1);
    state.focus = null;
    state.enabled = [];
    $("output").textContent = ov.output ? "model output: " + ov.output : "";
    buildControls();
    const g = group();
    status(g.queries + " × " + g.keys + " tokens, " + g.layers + " layers × " + g.heads + " heads");
  }
  async function analyse() {
    const text = $("text").value;
    const wanted = $("generate-box").style.display === "none" ? 0 : Number($("generate").value || 0);
    status("running the model…");
    const t0 = performance.now();
    state.drawn = []; // the query count of every drawing of this analysis
    try {
      // A language model's continuation streams in: one more greedy token per request
      // (greedy decoding is deterministic, so each answer extends the previous one), and
      // the views redraw with the new token's attention each time.
      for (let k = wanted > 0 ? 1 : 0; k <= wanted; k++) {
        const ov = await api("/api/analyse", wanted > 0 ? { text: text, generate: k } : { text: text });
        const t1 = performance.now();
        showOverview(ov);
        await render();
        if (k <= 1) {
          state.timings.analyse = t1 - t0;
          state.timings.firstRender = performance.now() - t0;
        }
        if (wanted > 0) status("generated " + k + " of " + wanted + " tokens; " + $("status").textContent);
        state.drawn.push(group().queries);
        root.dataset.generated = k;
      }
    } catch (error) {
      status(String(error.message || error), true);
    }
  }

  function init() {
    $("layer").onchange = () => { state.layer = Number($("layer").value); state.focus = null; render(); };
    $("head").onchange = () => { state.head = Number($("head").value); render(); };
    for (const v of ["head", "model", "matrix", "summary"]) $("tab-" + v).onclick = () => showView(v);
    $("all-heads").onclick = () => { state.enabled = state.enabled.map(() => true); buildControls(); render(); };
    $("no-heads").onclick = () => { state.enabled = state.enabled.map(() => false); buildControls(); render(); };
    $("pair-go").onclick = () => searchPair().catch((e) => status(String(e.message || e), true));
    $("image-query").onchange = () => renderImagePanel().catch((e) => status(String(e.message || e), true));
    if (MODE === "file") {
      state.embedded = JSON.parse($("attnlab-data").textContent);
      $("input-form").style.display = "none";
      $("text-shown").textContent = state.embedded.text;
      showOverview(state.embedded);
      render();
      return;
    }
    $("analyse").onclick = analyse;
    // An image of the user's own travels in the request as a data URI (no server file is named).
    $("image-file").onchange = () => {
      const file = $("image-file").files[0];
      if (!file) return;
      // Shrunk in the browser to at most 256 pixels a side (the models read 28..224), so it
      // fits the server's 64 KB body: PNG when small enough, else JPEG.
      const url = URL.createObjectURL(file);
      const img = new Image();
      img.onload = () => {
        URL.revokeObjectURL(url);
        const scale = Math.min(1, 256 / Math.max(img.width, img.height));
        const canvas = make("canvas", { width: Math.max(1, Math.round(img.width * scale)),
                                        height: Math.max(1, Math.round(img.height * scale)) });
        canvas.getContext("2d").drawImage(img, 0, 0, canvas.width, canvas.height);
        let uri = canvas.toDataURL("image/png");
        if (uri.length > 60000) uri = canvas.toDataURL("image/jpeg", 0.9);
        $("text").value = uri;
        analyse();
      };
      img.onerror = () => { URL.revokeObjectURL(url); status(file.name + ": not an image the browser can read", true); };
      img.src = url;
    };
    api("/api/info").then((info) => {
      $("description").textContent = info.description;
      $("text").value = info.default_text;
      $("generate-box").style.display = info.generates ? "" : "none";
      $("image-box").style.display = info.image_input ? "" : "none";
      if (info.hint) { $("text").placeholder = info.hint; $("text").title = info.hint; }
      analyse();
    }).catch((error) => status(String(error.message || error), true));
  }
  init();
})();
