// Draws the board's charts with Plotly.react into the plots gr.Plot put on the page.
// Gradio's gr.Plot re-mounts its plot on every new value and draws it twice, which costs the
// browser about three times a redraw in place, and drops the visitor's zoom and hover. So
// the server sends the figures here instead (one JSON object {chart: figure}), and gr.Plot
// only draws the first figure. A plot not on the page yet (a hidden compare row, Plotly
// still loading) or re-mounted by Gradio is drawn by the periodic check below.
// A chart's height is its figure's, so the page never moves while a run goes on; on a short
// screen (a projector) every chart is drawn at most SHORT_HEIGHT tall, so the question, the
// cards and a row of charts fit. Plotly's toolbar stays hidden (the figure's config).
(figures) => {
  const SHORT_SCREEN = "(max-height: 760px) and (min-width: 761px)";
  const SHORT_HEIGHT = 230;
  const pg = (window.pgCharts ??= { latest: {}, drawn: new WeakMap(), timer: null });
  const draw = () => {
    if (!window.Plotly) return;
    const short = window.matchMedia(SHORT_SCREEN).matches;
    for (const [chart, figure] of Object.entries(pg.latest)) {
      const el = document.querySelector(`#pg-plot-${chart} .js-plotly-plot`);
      if (!el || el.offsetParent === null || pg.drawn.get(el) === figure) continue;
      const layout = { ...figure.layout, autosize: true };
      if (short) layout.height = Math.min(layout.height ?? SHORT_HEIGHT, SHORT_HEIGHT);
      const config = { ...(figure.config ?? {}), responsive: true };
      window.Plotly.react(el, figure.data, layout, config);
      pg.drawn.set(el, figure);
    }
  };
  if (figures) Object.assign(pg.latest, JSON.parse(figures));
  pg.timer ??= setInterval(draw, 500);
  draw();
}
