// The inspector's beam tree (js_on_load of its gr.HTML: `element` is the component). The
// figure comes inside the HTML, as the data-figure of .pg-beam-tree; Plotly is on the page
// for the board's charts. Each new HTML updates the page in place: the tree's element may
// stay while Plotly's drawing in it is gone, or come back with another figure. The observer
// sees either and draws again (Plotly's own drawing is seen too, and left alone).
const draw = () => {
  const el = element.querySelector(".pg-beam-tree");
  if (!el || !el.dataset.figure) return;
  const svg = el.querySelector(".main-svg");
  if (svg && el.pgFigure === el.dataset.figure) return;
  if (!window.Plotly) return void setTimeout(draw, 250);
  el.pgFigure = el.dataset.figure;
  const figure = JSON.parse(el.pgFigure);
  const config = { displayModeBar: false, responsive: true };
  (svg ? window.Plotly.react : window.Plotly.newPlot)(el, figure.data, figure.layout, config);
};
new MutationObserver(draw).observe(element, { childList: true, subtree: true, attributes: true,
                                              attributeFilter: ["data-figure"] });
draw();
