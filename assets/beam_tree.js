// The inspector's beam tree (js_on_load of its gr.HTML: `element` is the component). The
// figure comes inside the HTML, as the data-figure of .pg-beam-tree; Plotly is on the page
// for the board's charts. Drawn again after each new HTML (watch), once Plotly has loaded.
const draw = () => {
  const el = element.querySelector(".pg-beam-tree");
  if (!el || !el.dataset.figure) return;
  if (!window.Plotly) return void setTimeout(draw, 250);
  const figure = JSON.parse(el.dataset.figure);
  window.Plotly.react(el, figure.data, figure.layout, { displayModeBar: false, responsive: true });
};
watch("value", draw);
draw();
