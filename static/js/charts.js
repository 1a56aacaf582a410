// Draws every Vega-Lite chart on the page, and in each htmx swap; specs come from json_script tags.
// Expressions run through vega-interpreter instead of Vega's default code generation, which needs
// `new Function` and so would need 'unsafe-eval' in the Content-Security-Policy.
(function () {
  "use strict";
  function drawCharts(root) {
    root.querySelectorAll("[data-vega-spec]").forEach(function (el) {
      var spec = JSON.parse(document.getElementById(el.dataset.vegaSpec).textContent);
      vegaEmbed(el, spec, {
        ast: true,
        expr: vega.expressionInterpreter,
        actions: {export: true, source: false, compiled: false, editor: false},
      })
        .then(function () { el.dataset.drawn = "1"; })
        .catch(function (err) { el.textContent = "Chart could not be drawn: " + err; });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    drawCharts(document);
    document.body.addEventListener("htmx:afterSwap", function (evt) { drawCharts(evt.detail.target); });
  });
})();
