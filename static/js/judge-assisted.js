// Draws the judge-assisted page's charts from their json_script specs (no inline script, so
// the page works under a Content-Security-Policy without 'unsafe-inline').
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-vega-spec]").forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.dataset.vegaSpec).textContent);
    vegaEmbed(el, spec, {actions: {export: true, source: false, compiled: false, editor: false}})
      .then(function () { el.dataset.drawn = "1"; })
      .catch(function (err) { el.textContent = "Chart could not be drawn: " + err; });
  });
});
