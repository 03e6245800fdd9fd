// The live board: subscribes to the server's frames (GET board/stream, server-sent events) and
// writes them into the page. `draw` is assets/charts.js, the charts' one render path.
// A frame's `board` event carries the shared HTML, written into the page's live slots
// ([data-live="stats|cards|log|scoreboard|alert|stops"], which the server's components hold
// while this session looks at the live board). The session's lesson slot ([data-live="lesson"],
// written by its own callbacks) names its preset, run and guess: it takes the frame's panel for
// them, when the frame has one. Its `charts` events carry {chart: figure}. While the session is
// rewound (no slot in #pg-board) the charts are kept, and drawn when it is live again; a chart
// the session draws itself (the inspected request's block table, window.pgStream.own) is left
// out. The visitor's own card is the session's (in #pg-board); its twin among everybody's goes.
(draw) => {
  if (window.pgStream) return;
  const st = (window.pgStream = { board: null, text: null, charts: null, scheduled: false,
                                  own: new Set(), held: {} });
  const isLive = () => document.querySelector("#pg-board [data-live]") !== null;
  const dropMine = (slot) => {
    const mine = document.querySelector("#pg-board .pg-mine .pg-rid");
    const rid = mine && mine.textContent;
    if (!rid) return;
    for (const card of slot.querySelectorAll(".pg-card")) {
      const other = card.querySelector(".pg-rid");
      if (other && other.textContent === rid) card.remove();
    }
  };
  const htmlFor = (board, slot) => {
    const d = slot.dataset;
    if (d.live !== "lesson") return board[d.live];
    const lesson = board.lessons.find((l) => l.key === d.key && String(l.run) === d.run);
    return lesson && lesson.panels[d.guess];
  };
  const fill = () => {
    const board = st.board;
    if (!board) return;
    for (const slot of document.querySelectorAll("[data-live]")) {
      const html = htmlFor(board, slot);
      if (html === undefined || slot.dataset.v === String(board.frame)) continue;
      slot.dataset.v = board.frame;
      if (slot.pgHtml === html) continue;  // unchanged: the page is not touched (no restyle)
      slot.innerHTML = html;
      slot.pgHtml = html;
      if (slot.dataset.live === "cards") dropMine(slot);
    }
    const compare = document.querySelector("#pg-compare");
    if (compare) compare.style.display = board.compare ? "flex" : "none";
  };
  // Gradio re-renders a component (the session's own card, back from a rewind) with an empty
  // slot: filled before the browser paints it.
  new MutationObserver(() => {
    if (document.querySelector("[data-live]:not([data-v])")) fill();
  }).observe(document.body, { childList: true, subtree: true });
  // A renderer that falls behind (a busy machine) must not queue frames: messages only keep
  // the latest board and the charts not drawn yet, and one render at a time draws them.
  const render = () => {
    st.scheduled = false;
    if (st.text !== null) {
      st.board = JSON.parse(st.text);
      st.text = null;
      fill();
    }
    if (st.charts === null) return;
    if (!isLive()) {  // rewound: kept, one figure per chart
      st.charts = JSON.stringify(JSON.parse(st.charts));
      return;
    }
    let charts = st.charts;
    st.charts = null;
    if (st.own.size) {
      const figures = JSON.parse(charts);
      for (const key of st.own) {
        if (key in figures) st.held[key] = figures[key];
        delete figures[key];
      }
      charts = JSON.stringify(figures);
    }
    draw(charts);
  };
  // The session's own charts ({chart: figure} JSON, "" for none): drawn, and the stream's
  // figures of those charts held back until the session lets them go, then drawn again.
  st.setOwn = (text) => {
    const own = text ? JSON.parse(text) : {};
    const shown = (window.pgCharts && window.pgCharts.latest) || {};
    const back = {};
    for (const key of st.own) if (!(key in own) && st.held[key]) back[key] = st.held[key];
    for (const key of Object.keys(own)) if (!st.own.has(key)) st.held[key] = shown[key];
    st.own = new Set(Object.keys(own));
    const figures = { ...back, ...own };
    if (Object.keys(figures).length) draw(JSON.stringify(figures));
  };
  const schedule = () => {
    if (st.scheduled) return;
    st.scheduled = true;
    setTimeout(render, 0);
  };
  // {chart: figure} objects merged as text: with a key twice, JSON.parse keeps the last one.
  const merge = (a, b) => (a === null ? b : `${a.slice(0, -1)},${b.slice(1)}`);
  // The stream, with the seat's token ("" none) when this session holds the seat: the server
  // sends a seat's stream every frame, a crowd's ones at the crowd's rate. A new token opens
  // a new stream at once (it starts with every chart).
  const connect = (token) => {
    if (st.source) st.source.close();
    st.pass = token;
    const query = token ? `?seat=${encodeURIComponent(token)}` : "";
    const source = (st.source = new EventSource(`board/stream${query}`));
    source.addEventListener("board", (e) => {
      st.text = e.data;
      schedule();
    });
    source.addEventListener("charts", (e) => {
      st.charts = merge(st.charts, e.data);
      schedule();
    });
  };
  st.setPass = (token) => {
    if ((token || "") !== st.pass) connect(token || "");
  };
  connect(window.pgPass || "");
}
