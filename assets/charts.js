// Draws the board's charts with Plotly.react into the plots gr.Plot put on the page.
// Gradio's gr.Plot re-mounts its plot on every new value and draws it twice, which costs the
// browser about three times a redraw in place, and drops the visitor's zoom and hover. So
// the server sends the figures here instead (one JSON object {chart: figure}), and gr.Plot
// only draws the first figure. A plot not on the page yet (a hidden compare row, Plotly
// still loading) or re-mounted by Gradio is drawn by the periodic check below.
// Only the charts on or near the screen (within half a screen of it) are redrawn: the others
// keep their last figure until they scroll near, then get the latest at once. A redraw is the
// page's largest cost, and a board shows a few of its charts at a time.
// A chart's height is its figure's, so the page never moves while a run goes on; on a short
// screen (a projector) every chart is drawn at most SHORT_HEIGHT tall, so the question, the
// cards and a row of charts fit, with what its figure asks for there (layout.meta.short: the
// timeline drops cost labels its rows are too thin for). Plotly's toolbar stays hidden.
(figures) => {
  const SHORT_SCREEN = "(max-height: 760px) and (min-width: 761px)";
  const SHORT_HEIGHT = 230;
  const pg = (window.pgCharts ??= { latest: {}, drawn: new WeakMap(), timer: null,
                                    near: new WeakSet() });
  pg.observer ??= new IntersectionObserver((entries) => {
    for (const e of entries) e.isIntersecting ? pg.near.add(e.target) : pg.near.delete(e.target);
    pg.draw();
  }, { rootMargin: "50% 0px" });
  const draw = () => {
    if (!window.Plotly) return;
    const short = window.matchMedia(SHORT_SCREEN).matches;
    for (const [chart, figure] of Object.entries(pg.latest)) {
      const el = document.querySelector(`#pg-plot-${chart} .js-plotly-plot`);
      if (!el || pg.drawn.get(el) === figure) continue;
      pg.observer.observe(el);  // a no-op for a plot it watches; a new one is drawn once seen
      if (!pg.near.has(el)) continue;  // off screen, or hidden (a hidden plot never intersects)
      const layout = { ...figure.layout, autosize: true };
      if (short) {
        layout.height = Math.min(layout.height ?? SHORT_HEIGHT, SHORT_HEIGHT);
        Object.assign(layout, layout.meta?.short);
      }
      const config = { ...(figure.config ?? {}), responsive: true };
      window.Plotly.react(el, figure.data, layout, config);
      pg.drawn.set(el, figure);
    }
  };
  pg.draw = draw;
  if (figures) Object.assign(pg.latest, JSON.parse(figures));
  pg.timer ??= setInterval(draw, 500);
  draw();
}
