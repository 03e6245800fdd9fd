// Draws the board's charts with Plotly.react into the plots gr.Plot put on the page.
// Gradio's gr.Plot re-mounts its plot on every new value and draws it twice, which costs the
// browser about three times a redraw in place, and drops the visitor's zoom and hover. So
// the server sends the figures here instead (one JSON object {chart: figure}), and gr.Plot
// only draws the first figure. A plot not on the page yet (a hidden compare row, Plotly
// still loading) or re-mounted by Gradio is drawn by the periodic check below.
(figures) => {
  const pg = (window.pgCharts ??= { latest: {}, drawn: new WeakMap(), timer: null });
  const draw = () => {
    if (!window.Plotly) return;
    for (const [chart, figure] of Object.entries(pg.latest)) {
      const el = document.querySelector(`#pg-plot-${chart} .js-plotly-plot`);
      if (!el || el.offsetParent === null || pg.drawn.get(el) === figure) continue;
      figure.layout.autosize = true;
      window.Plotly.react(el, figure.data, figure.layout, { responsive: true });
      pg.drawn.set(el, figure);
    }
  };
  if (figures) Object.assign(pg.latest, JSON.parse(figures));
  pg.timer ??= setInterval(draw, 500);
  draw();
}
